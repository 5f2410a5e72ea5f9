// Layernorm backward: the one-pass kernel, and a wide-row kernel for rows whose parameter-gradient
// sums do not fit the one-pass kernel's shared memory (cols > 6144, layernorm_backward_shape).
//
// One pass: each warp owns one row at a time (rows strided by blocks · warps over a grid fixed by
// the shape). It reads the row of inp and dout with 16-byte loads (8 bf16/fp16 or 4 fp32 values;
// scalar loads when cols · sizeof(T) is not a multiple of 16 or a pointer is not 16-byte aligned),
// reduces mean(dn) and mean(dn · n̂) in fp32 with warp shuffles (dn = dout · weight, n̂ from the
// saved mean and rstd), then re-reads the row, now in L1, to add its term into dinp and its
// dout · n̂ and dout into the warp's fp32 dweight/dbias sums in shared memory. Each block writes its
// warps' sums, added in warp order, as fp32 partials [blocks × 2 × cols]; one small kernel adds
// the partials over blocks in a fixed order, in double, into dweight/dbias. No float atomics.
//
// Floor: read inp, dout and dinp, write dinp: 4 · rows · cols · sizeof(T) bytes (plus mean/rstd,
// 8 · rows, and the weight); FLOPs (about 15 per element) are negligible. At rows 32768 ×
// cols 768 bf16: 201.6 MB, 67 µs at 3.0 TB/s. The partials add 256 blocks × 2 × 768 fp32 there:
// 1.6 MB written and read back (under 2 % of the floor).
#include "device_helpers.cuh"
#include "layernorm.cuh"

namespace strata::cuda {
namespace {

using detail::from_float;
using detail::to_float;
using detail::warp_sum;

// ---- the one-pass kernel ----

// kWidth elements of T moved by one load or store: a 16-byte vector, or one element.
template <typename T, int kWidth>
struct alignas(sizeof(T) * kWidth) Chunk {
  T v[kWidth];
};

// Dynamic shared memory: per warp, dweight sums then dbias sums, cols floats each, stored as
// [kWidth][chunks] so that the 32 lanes, which own consecutive chunks, hit 32 distinct banks.
template <typename T, int kWidth>
__global__ void layernorm_backward_one_pass_kernel(T* dinp, float* partials, const T* dout, const T* inp,
                                                   const T* weight, const float* mean, const float* rstd,
                                                   int64_t rows, int64_t cols) {
  using C = Chunk<T, kWidth>;
  extern __shared__ float ln_sums[];
  const int warps = static_cast<int>(blockDim.x / 32);
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int64_t chunks = cols / kWidth;
  float* dw_sum = ln_sums + static_cast<int64_t>(warp) * 2 * cols;
  float* db_sum = dw_sum + cols;
  // Each lane touches only the sums of its own chunks, here and in the row loop: no barrier.
  for (int64_t c = lane; c < chunks; c += 32) {
#pragma unroll
    for (int k = 0; k < kWidth; ++k) {
      dw_sum[k * chunks + c] = 0.0f;
      db_sum[k * chunks + c] = 0.0f;
    }
  }
  const C* w = reinterpret_cast<const C*>(weight);
  const float n_cols = static_cast<float>(cols);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * warps;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * warps + warp; row < rows; row += stride) {
    const C* x = reinterpret_cast<const C*>(inp + row * cols);
    const C* g = reinterpret_cast<const C*>(dout + row * cols);
    C* dx = reinterpret_cast<C*>(dinp + row * cols);
    const float mu = mean[row], rs = rstd[row];
    float dn_sum = 0.0f, dn_dot = 0.0f;
#pragma unroll 4
    for (int64_t c = lane; c < chunks; c += 32) {
      const C xc = x[c], gc = g[c], wc = w[c];
#pragma unroll
      for (int k = 0; k < kWidth; ++k) {
        const float normed = (to_float(xc.v[k]) - mu) * rs;
        const float dn = to_float(gc.v[k]) * to_float(wc.v[k]);
        dn_sum += dn;
        dn_dot += dn * normed;
      }
    }
    const float dn_mean = warp_sum(dn_sum) / n_cols;
    const float dn_dot_mean = warp_sum(dn_dot) / n_cols;
#pragma unroll 4
    for (int64_t c = lane; c < chunks; c += 32) {
      const C xc = x[c], gc = g[c], wc = w[c];
      C d = dx[c];
#pragma unroll
      for (int k = 0; k < kWidth; ++k) {
        const float normed = (to_float(xc.v[k]) - mu) * rs;
        const float gk = to_float(gc.v[k]);
        const float dn = gk * to_float(wc.v[k]);
        d.v[k] = from_float<T>(to_float(d.v[k]) + (dn - dn_mean - normed * dn_dot_mean) * rs);
        dw_sum[k * chunks + c] += gk * normed;
        db_sum[k * chunks + c] += gk;
      }
      dx[c] = d;
    }
  }
  __syncthreads();
  // The block's partials in column order, its warps added in order.
  for (int64_t col = threadIdx.x; col < cols; col += blockDim.x) {
    const int64_t at = (col % kWidth) * chunks + col / kWidth;
    float dw = 0.0f, db = 0.0f;
    for (int i = 0; i < warps; ++i) {
      dw += ln_sums[static_cast<int64_t>(i) * 2 * cols + at];
      db += ln_sums[static_cast<int64_t>(i) * 2 * cols + cols + at];
    }
    partials[(static_cast<int64_t>(blockIdx.x) * 2) * cols + col] = dw;
    partials[(static_cast<int64_t>(blockIdx.x) * 2 + 1) * cols + col] = db;
  }
}

// out_o[col] = float(out_o[col] + Σ_blocks partials) with o = blockIdx.y (0: dweight, 1: dbias):
// lane y adds blocks y, y + 32, ... in double, then lane 0 adds the 32 lanes in order, one
// rounding at the end as the CPU backend's add_column_sums does.
constexpr int kFinishLanes = 32;

__global__ void layernorm_backward_finish_kernel(const float* partials, int64_t blocks, int64_t cols, void* dweight,
                                                 ElemType dweight_type, void* dbias, ElemType dbias_type) {
  __shared__ double lane_sums[kFinishLanes][32];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const int o = static_cast<int>(blockIdx.y);
  double sum = 0.0;
  if (col < cols) {
    for (int64_t b = threadIdx.y; b < blocks; b += kFinishLanes) sum += partials[(b * 2 + o) * cols + col];
  }
  lane_sums[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y != 0 || col >= cols) return;
  double total = 0.0;
  for (int i = 0; i < kFinishLanes; ++i) total += lane_sums[i][threadIdx.x];
  void* out = o == 0 ? dweight : dbias;
  const ElemType type = o == 0 ? dweight_type : dbias_type;
  if (out) {
    const double start = detail::load_any(out, type, col);
    detail::store_any(out, type, col, static_cast<float>(start + total));
  }
}

template <typename T>
cudaError_t launch_one_pass(const LayerNormBackwardShape& shape, T* dinp, void* dweight, ElemType dweight_type,
                            void* dbias, ElemType dbias_type, const T* dout, const T* inp, const T* weight,
                            const float* mean, const float* rstd, int64_t rows, int64_t cols, float* partials,
                            cudaStream_t stream) {
  constexpr int kPack = static_cast<int>(16 / sizeof(T));
  const bool packed = cols % kPack == 0 && aligned16(dinp) && aligned16(dout) && aligned16(inp) && aligned16(weight);
  const auto blocks = static_cast<unsigned>(shape.blocks);
  const unsigned threads = 32u * static_cast<unsigned>(shape.warps);
  const size_t smem = static_cast<size_t>(shape.warps) * 2 * static_cast<size_t>(cols) * sizeof(float);
  if (packed) {
    layernorm_backward_one_pass_kernel<T, kPack><<<blocks, threads, smem, stream>>>(dinp, partials, dout, inp, weight,
                                                                                     mean, rstd, rows, cols);
  } else {
    layernorm_backward_one_pass_kernel<T, 1><<<blocks, threads, smem, stream>>>(dinp, partials, dout, inp, weight,
                                                                                 mean, rstd, rows, cols);
  }
  const cudaError_t rc = cudaGetLastError();
  if (rc != cudaSuccess) return rc;
  const dim3 finish_grid(static_cast<unsigned>(ceil_div(cols, 32)), 2);
  layernorm_backward_finish_kernel<<<finish_grid, dim3(32, kFinishLanes), 0, stream>>>(
      partials, shape.blocks, cols, dweight, dweight_type, dbias, dbias_type);
  return cudaGetLastError();
}

// ---- the wide-row kernel: dinp with double statistics, one warp per row and scalar loads; the
// parameter gradients through the shared two-pass column reduction, which reads dout and inp again ----

// dx = rstd · (dn − mean(dn) − n̂ · mean(dn · n̂)) with dn = dout · weight, accumulated into dinp.
template <typename T>
__global__ void layernorm_dinp_kernel(T* dinp, const T* dout, const T* inp, const T* weight, const float* mean,
                                      const float* rstd, int64_t rows, int64_t cols) {
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kLayerNormRowsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const T* x = inp + row * cols;
  const T* g = dout + row * cols;
  const double mu = mean[row], rs = rstd[row];
  double dn_sum = 0.0, dn_dot = 0.0;
  for (int64_t j = lane; j < cols; j += 32) {
    const double normed = (to_float(x[j]) - mu) * rs;
    const double dn = static_cast<double>(to_float(g[j])) * to_float(weight[j]);
    dn_sum += dn;
    dn_dot += dn * normed;
  }
  const double dn_mean = warp_sum(dn_sum) / static_cast<double>(cols);
  const double dn_dot_mean = warp_sum(dn_dot) / static_cast<double>(cols);
  T* dx = dinp + row * cols;
  for (int64_t j = lane; j < cols; j += 32) {
    const double normed = (to_float(x[j]) - mu) * rs;
    const double dn = static_cast<double>(to_float(g[j])) * to_float(weight[j]);
    const double d = (dn - dn_mean - normed * dn_dot_mean) * rs;
    dx[j] = from_float<T>(static_cast<float>(to_float(dx[j]) + d));
  }
}

// Column terms: output 0 is dweight (dout · n̂), output 1 is dbias (dout).
template <typename T>
struct LayerNormParamTerm {
  static constexpr int kOutputs = 2;
  const T* dout;
  const T* inp;
  const float* mean;
  const float* rstd;
  int64_t cols;
  __device__ void operator()(int64_t row, int64_t col, double (&acc)[2]) const {
    const double g = to_float(dout[row * cols + col]);
    const double normed = (to_float(inp[row * cols + col]) - static_cast<double>(mean[row])) * rstd[row];
    acc[0] += g * normed;
    acc[1] += g;
  }
};

template <typename T>
cudaError_t launch_wide_rows(T* dinp, void* dweight, ElemType dweight_type, void* dbias, ElemType dbias_type,
                             const T* dout, const T* inp, const T* weight, const float* mean, const float* rstd,
                             int64_t rows, int64_t cols, double* partials, cudaStream_t stream) {
  layernorm_dinp_kernel<T><<<static_cast<unsigned>(layernorm_blocks(rows)), 32 * kLayerNormRowsPerBlock, 0, stream>>>(
      dinp, dout, inp, weight, mean, rstd, rows, cols);
  const cudaError_t rc = cudaGetLastError();
  if (rc != cudaSuccess) return rc;
  const LayerNormParamTerm<T> term{dout, inp, mean, rstd, cols};
  return detail::launch_column_reduce(term, rows, cols, partials, dweight, dweight_type, dbias, dbias_type, stream);
}

}  // namespace

cudaError_t layernorm_backward(void* dinp, void* dweight, ElemType dweight_type, void* dbias, ElemType dbias_type,
                               const void* dout, const void* inp, const void* weight, const float* mean,
                               const float* rstd, ElemType type, int64_t rows, int64_t cols, double* partials,
                               cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  const LayerNormBackwardShape shape = layernorm_backward_shape(rows, cols);
  return detail::dispatch_float(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto* dx = static_cast<T*>(dinp);
    const auto* g = static_cast<const T*>(dout);
    const auto* x = static_cast<const T*>(inp);
    const auto* w = static_cast<const T*>(weight);
    if (shape.warps == 0) {
      return launch_wide_rows(dx, dweight, dweight_type, dbias, dbias_type, g, x, w, mean, rstd, rows, cols,
                              partials, stream);
    }
    // The workspace holds doubles for the wide-row kernel; the one-pass kernel's partials are fp32.
    return launch_one_pass(shape, dx, dweight, dweight_type, dbias, dbias_type, g, x, w, mean, rstd, rows, cols,
                           reinterpret_cast<float*>(partials), stream);
  });
}

}  // namespace strata::cuda
