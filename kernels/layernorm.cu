// Layernorm forward, plain and with the residual add fused (the backward is in
// layernorm_backward.cu): one-pass kernels holding the row in registers, and scalar kernels for
// the rows they cannot hold (widths of no whole 16-byte words, rows too wide, misaligned tensors).
//
// One pass: one warp per row (8 rows per block). Each lane loads its 16-byte words of the row
// (8 bf16/fp16 or 4 fp32 values; word c goes to lane c mod 32, so each step of the warp reads 512
// contiguous bytes) into registers, so x is read from global memory once. The statistics are the
// CPU reference's, in double and two-pass from the registers: mean = Σx / cols, then
// rstd = 1 / sqrt(Σ(x − mean)² / cols + eps), each sum taken per lane in word order and then over
// the warp with xor shuffles (a fixed order: repeats bit for bit). Then
// y = fp32(((x − mean) · rstd) in double) · weight + bias in fp32 round-to-nearest, weight and
// bias read as 16-byte words (from L1/L2: every row reads them), y written as 16-byte words.
// The residual kernel first forms residual = a + b rounded to T word by word, writes it, and keeps
// the rounded words as the row, so both kernels normalize the same registers the same way.
//
// Floor: plain, read x and write y: 2 · rows · cols · sizeof(T) bytes; residual, read a and b,
// write residual and y: 4 · rows · cols · sizeof(T); both plus mean/rstd (8 · rows) and the
// parameters. At rows 32768 × cols 768 bf16: plain 100.9 MB, 33.6 µs at 3.0 TB/s; residual
// 201.6 MB, 67.2 µs. Arithmetic per element: 4 fp32↔fp64 conversions and 5 fp64 operations,
// which H100's 16 conversions and 64 fp64 operations per clock per SM (the CUDA guide's table)
// finish in about as many clocks as the bytes of the plain 16-bit forward take at 3.0 TB/s: that
// row may be bound by conversions rather than bytes (the GPU run will say); the residual and fp32
// rows move twice the bytes per element.
#include <cstring>
#include <initializer_list>
#include <type_traits>

#include "device_helpers.cuh"
#include "layernorm.cuh"

namespace strata::cuda {
namespace {

using detail::from_float;
using detail::to_float;
using detail::element_of;
using detail::kPerWord;
using detail::word_of;
using detail::warp_sum;

constexpr double kEps = 1e-5;
constexpr int kThreads = 32 * kLayerNormRowsPerBlock;

// ---- the one-pass kernels ----


// The warp's row, held as words[i] = word lane + 32 · i of the row (absent past `words`): its
// statistics in double, then y and, from lane 0, mean/rstd. weight and bias never alias y, so
// their loads may be scheduled ahead of y's stores.
template <typename T, int kWords>
__device__ __forceinline__ void normalize_held_row(const uint4 (&held)[kWords], int words, T* y, float* mean,
                                                   float* rstd, const T* __restrict__ weight,
                                                   const T* __restrict__ bias, int64_t row, int64_t cols, int lane) {
  constexpr int kPer = kPerWord<T>;
  double sum = 0.0;
#pragma unroll
  for (int i = 0; i < kWords; ++i) {
    if (lane + 32 * i >= words) continue;
#pragma unroll
    for (int e = 0; e < kPer; ++e) sum += element_of<T>(held[i], e);
  }
  const double mu = warp_sum(sum) / static_cast<double>(cols);
  double sq = 0.0;
#pragma unroll
  for (int i = 0; i < kWords; ++i) {
    if (lane + 32 * i >= words) continue;
#pragma unroll
    for (int e = 0; e < kPer; ++e) {
      const double d = element_of<T>(held[i], e) - mu;
      sq += d * d;
    }
  }
  const double rs = 1.0 / sqrt(warp_sum(sq) / static_cast<double>(cols) + kEps);
  const auto* w = reinterpret_cast<const uint4*>(weight);
  const auto* b = reinterpret_cast<const uint4*>(bias);
  auto* out = reinterpret_cast<uint4*>(y);
#pragma unroll
  for (int i = 0; i < kWords; ++i) {
    const int c = lane + 32 * i;
    if (c >= words) continue;
    const uint4 wc = w[c], bc = b[c];
    float r[kPer];
#pragma unroll
    for (int e = 0; e < kPer; ++e) {
      const float normed = static_cast<float>((element_of<T>(held[i], e) - mu) * rs);
      r[e] = __fadd_rn(__fmul_rn(normed, element_of<T>(wc, e)), element_of<T>(bc, e));
    }
    out[c] = word_of<T>(r);
  }
  if (lane == 0) {
    if (mean) mean[row] = static_cast<float>(mu);
    if (rstd) rstd[row] = static_cast<float>(rs);
  }
}

// Every load of the row is issued before any store: y may alias inp.
template <typename T, int kWords>
__global__ void __launch_bounds__(kThreads)
    layernorm_forward_one_pass_kernel(T* out, float* mean, float* rstd, const T* inp, const T* __restrict__ weight,
                                      const T* __restrict__ bias, int64_t rows, int64_t cols) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kLayerNormRowsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const int words = static_cast<int>(cols / kPerWord<T>);
  const auto* x = reinterpret_cast<const uint4*>(inp + row * cols);
  uint4 held[kWords];
#pragma unroll
  for (int i = 0; i < kWords; ++i) {
    const int c = lane + 32 * i;
    held[i] = c < words ? x[c] : make_uint4(0u, 0u, 0u, 0u);
  }
  normalize_held_row<T, kWords>(held, words, out + row * cols, mean, rstd, weight, bias, row, cols, lane);
}

// residual = a + b rounded to T, word by word. Every word of a and b is loaded before the first
// residual store, and each lane stores only the words it loaded itself, so residual may alias a
// or b (and the loads are not held back behind stores that might alias them).
template <typename T, int kWords>
__global__ void __launch_bounds__(kThreads)
    residual_layernorm_forward_one_pass_kernel(T* residual, T* out, float* mean, float* rstd, const T* a, const T* b,
                                               const T* __restrict__ weight, const T* __restrict__ bias,
                                               int64_t rows, int64_t cols) {
  constexpr int kPer = kPerWord<T>;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kLayerNormRowsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const int words = static_cast<int>(cols / kPer);
  const auto* ar = reinterpret_cast<const uint4*>(a + row * cols);
  const auto* br = reinterpret_cast<const uint4*>(b + row * cols);
  uint4 held[kWords];
#pragma unroll
  for (int i = 0; i < kWords; ++i) {
    const int c = lane + 32 * i;
    held[i] = make_uint4(0u, 0u, 0u, 0u);
    if (c >= words) continue;
    const uint4 av = ar[c], bv = br[c];
    float s[kPer];
#pragma unroll
    for (int e = 0; e < kPer; ++e) s[e] = __fadd_rn(element_of<T>(av, e), element_of<T>(bv, e));
    held[i] = word_of<T>(s);
  }
  auto* res = reinterpret_cast<uint4*>(residual + row * cols);
#pragma unroll
  for (int i = 0; i < kWords; ++i) {
    const int c = lane + 32 * i;
    if (c < words) res[c] = held[i];
  }
  normalize_held_row<T, kWords>(held, words, out + row * cols, mean, rstd, weight, bias, row, cols, lane);
}

// Both kernels at one word count; `residual` null selects the plain kernel (inp = a).
template <typename T, int kWords>
void launch_one_pass(T* residual, T* out, float* mean, float* rstd, const T* a, const T* b, const T* weight,
                     const T* bias, int64_t rows, int64_t cols, cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>(layernorm_blocks(rows));
  if (residual) {
    residual_layernorm_forward_one_pass_kernel<T, kWords>
        <<<blocks, kThreads, 0, stream>>>(residual, out, mean, rstd, a, b, weight, bias, rows, cols);
  } else {
    layernorm_forward_one_pass_kernel<T, kWords><<<blocks, kThreads, 0, stream>>>(out, mean, rstd, a, weight, bias,
                                                                                  rows, cols);
  }
}

template <typename T>
void launch_one_pass_words(int words, T* residual, T* out, float* mean, float* rstd, const T* a, const T* b,
                           const T* weight, const T* bias, int64_t rows, int64_t cols, cudaStream_t stream) {
  static_assert(kLayerNormForwardMaxWords == 16, "one case per word count layernorm_forward_words returns");
  switch (words) {
    case 2: launch_one_pass<T, 2>(residual, out, mean, rstd, a, b, weight, bias, rows, cols, stream); break;
    case 4: launch_one_pass<T, 4>(residual, out, mean, rstd, a, b, weight, bias, rows, cols, stream); break;
    case 8: launch_one_pass<T, 8>(residual, out, mean, rstd, a, b, weight, bias, rows, cols, stream); break;
    default: launch_one_pass<T, 16>(residual, out, mean, rstd, a, b, weight, bias, rows, cols, stream); break;
  }
}

// ---- the scalar kernels: one warp per row, scalar loads, the row re-read (from L1/L2) in each
// of three passes, so any width and alignment works ----

// One warp normalizes row x into y: statistics in double, the affine part in fp32 round-to-nearest.
template <typename T>
__device__ void layernorm_row(T* y, float* mean, float* rstd, const T* x, const T* weight, const T* bias,
                              int64_t row, int64_t cols, int lane, double sum) {
  const double mu = warp_sum(sum) / static_cast<double>(cols);
  double sq = 0.0;
  for (int64_t j = lane; j < cols; j += 32) {
    const double d = to_float(x[j]) - mu;
    sq += d * d;
  }
  const double rs = 1.0 / sqrt(warp_sum(sq) / static_cast<double>(cols) + kEps);
  for (int64_t j = lane; j < cols; j += 32) {
    const float normed = static_cast<float>((to_float(x[j]) - mu) * rs);
    y[j] = from_float<T>(__fadd_rn(__fmul_rn(normed, to_float(weight[j])), to_float(bias[j])));
  }
  if (lane == 0) {
    if (mean) mean[row] = static_cast<float>(mu);
    if (rstd) rstd[row] = static_cast<float>(rs);
  }
}

template <typename T>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* inp, const T* weight,
                                         const T* bias, int64_t rows, int64_t cols) {
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kLayerNormRowsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const T* x = inp + row * cols;
  double sum = 0.0;
  for (int64_t j = lane; j < cols; j += 32) sum += to_float(x[j]);
  layernorm_row(out + row * cols, mean, rstd, x, weight, bias, row, cols, lane, sum);
}

// residual = a + b rounded to T (as the add kernel rounds it), then the layernorm of that
// rounded row. Each lane reads back only elements it wrote itself, so residual may alias a or b.
template <typename T>
__global__ void residual_layernorm_forward_kernel(T* residual, T* out, float* mean, float* rstd, const T* a,
                                                  const T* b, const T* weight, const T* bias, int64_t rows,
                                                  int64_t cols) {
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kLayerNormRowsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const T* ar = a + row * cols;
  const T* br = b + row * cols;
  T* x = residual + row * cols;
  double sum = 0.0;
  for (int64_t j = lane; j < cols; j += 32) {
    const T v = from_float<T>(__fadd_rn(to_float(ar[j]), to_float(br[j])));
    x[j] = v;
    sum += to_float(v);
  }
  layernorm_row(out + row * cols, mean, rstd, x, weight, bias, row, cols, lane, sum);
}

// The one-pass kernel's word count for these tensors, or 0 for the scalar kernel.
template <typename T>
int one_pass_words(int64_t cols, std::initializer_list<const void*> rows_and_params) {
  for (const void* p : rows_and_params)
    if (!aligned16(p)) return 0;
  return layernorm_forward_words(cols, sizeof(T));
}

}  // namespace

cudaError_t layernorm_forward(void* out, float* mean, float* rstd, const void* inp, const void* weight,
                              const void* bias, ElemType type, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  return detail::dispatch_float(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto* y = static_cast<T*>(out);
    const auto* x = static_cast<const T*>(inp);
    const auto* w = static_cast<const T*>(weight);
    const auto* b = static_cast<const T*>(bias);
    const int words = one_pass_words<T>(cols, {out, inp, weight, bias});
    if (words > 0) {
      launch_one_pass_words<T>(words, nullptr, y, mean, rstd, x, nullptr, w, b, rows, cols, stream);
    } else {
      layernorm_forward_kernel<T><<<static_cast<unsigned>(layernorm_blocks(rows)), kThreads, 0, stream>>>(
          y, mean, rstd, x, w, b, rows, cols);
    }
    return cudaGetLastError();
  });
}

cudaError_t residual_layernorm_forward(void* residual, void* out, float* mean, float* rstd, const void* a,
                                       const void* b, const void* weight, const void* bias, ElemType type,
                                       int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  return detail::dispatch_float(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto* r = static_cast<T*>(residual);
    auto* y = static_cast<T*>(out);
    const auto* x0 = static_cast<const T*>(a);
    const auto* x1 = static_cast<const T*>(b);
    const auto* w = static_cast<const T*>(weight);
    const auto* bs = static_cast<const T*>(bias);
    const int words = one_pass_words<T>(cols, {residual, out, a, b, weight, bias});
    if (words > 0) {
      launch_one_pass_words<T>(words, r, y, mean, rstd, x0, x1, w, bs, rows, cols, stream);
    } else {
      residual_layernorm_forward_kernel<T><<<static_cast<unsigned>(layernorm_blocks(rows)), kThreads, 0, stream>>>(
          r, y, mean, rstd, x0, x1, w, bs, rows, cols);
    }
    return cudaGetLastError();
  });
}

}  // namespace strata::cuda
