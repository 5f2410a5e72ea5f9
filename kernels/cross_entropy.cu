// Fused softmax + cross-entropy. Each thread keeps an online (max, sum) over its columns; the
// pairs are merged in a fixed tree (warp shuffles, then warps in order), so results repeat
// bit for bit. Rows are read as 16-byte words when the padded width allows it.
//
// Per element, each pass costs a handful of instructions: e^(x − max) is one subtraction, one
// multiplication by log2 e and one ex2.approx (relative error within 2^-22: a few fp32 ulps, far
// below a 16-bit output's rounding), the running maximum is compared once per 16-byte word, and the
// dlogits are scaled by dloss / sum computed once per row. With expf (a dozen instructions), a
// division and a branch per element, the kernel took 3.70 ms on an H100 and 3.52 ms on an H200
// at 32768 × 50304 bf16 though the H200's memory is 1.4 times faster: instruction issue, not
// memory, held it back there (docs/gpu.md).
#include <cmath>

#include "cross_entropy.cuh"
#include "device_helpers.cuh"
#include "mma_ptx.cuh"

namespace strata::cuda {
namespace {

using detail::element_of;
using detail::from_float;
using detail::kPerWord;
using detail::to_float;
using detail::word_of;

constexpr float kLog2e = 1.4426950408889634f;

// e^(x − max) by the special-function unit; 0 for a masked column's x = −inf.
__device__ __forceinline__ float exp_shifted(float x, float max) {
  return detail::ptx::exp2_approx(__fmul_rn(__fsub_rn(x, max), kLog2e));
}

struct MaxSum {
  float max;
  float sum;
};

// n values into a running (max, sum): the sum is rescaled once when the maximum rises. From
// max = −inf the rescale is 2^−inf · 0 = 0.
template <int n>
__device__ __forceinline__ void online_add(MaxSum& a, const float (&x)[n]) {
  float m = x[0];
#pragma unroll
  for (int i = 1; i < n; ++i) m = fmaxf(m, x[i]);
  if (m > a.max) {
    a.sum = __fmul_rn(a.sum, exp_shifted(a.max, m));
    a.max = m;
  }
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < n; ++i) s = __fadd_rn(s, exp_shifted(x[i], a.max));
  a.sum = __fadd_rn(a.sum, s);
}

__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  if (a.max == -INFINITY) return b;
  if (b.max == -INFINITY) return a;
  const float m = fmaxf(a.max, b.max);
  return {m, __fadd_rn(__fmul_rn(a.sum, exp_shifted(a.max, m)), __fmul_rn(b.sum, exp_shifted(b.max, m)))};
}

// False (and the row reported in *bad_id, once per block) for a target outside [0, vocab): the
// block leaves its row untouched.
__device__ __forceinline__ bool target_in_vocab(int32_t target, int64_t vocab, int64_t row, BadIdFlag* bad_id) {
  if (target >= 0 && target < vocab) return true;
  if (threadIdx.x == 0) detail::report_bad_id(bad_id, row, target);
  return false;
}

// The row's real columns x[0, real) handed to fn(values) in this thread's share: as 16-byte
// words of kPerWord<T> values when `packed` (the columns of a word past `real` as −inf), one
// value at a time otherwise. Column indices are 32-bit (a row is one vocabulary): fewer
// registers and instructions than 64-bit ones.
template <typename T, typename Fn>
__device__ __forceinline__ void for_real_values(const T* x, int64_t real_columns, bool packed, Fn&& fn) {
  constexpr int kPer = kPerWord<T>;
  const int real = static_cast<int>(real_columns);
  if (packed) {
    const int full = real / kPer, words = (real + kPer - 1) / kPer;
    for (int k = threadIdx.x; k < words; k += kCrossEntropyThreads) {
      const uint4 w = reinterpret_cast<const uint4*>(x)[k];
      float f[kPer];
#pragma unroll
      for (int e = 0; e < kPer; ++e) f[e] = element_of<T>(w, e);
      if (k >= full) {
#pragma unroll
        for (int e = 0; e < kPer; ++e)
          if (k * kPer + e >= real) f[e] = -INFINITY;
      }
      fn(f);
    }
  } else {
    for (int j = threadIdx.x; j < real; j += kCrossEntropyThreads) {
      const float f[1] = {to_float(x[j])};
      fn(f);
    }
  }
}

// The row's dlogits over its `cols` columns in place: dloss · (softmax − onehot(target)) over
// the real columns [0, real) with (max, sum) the row's statistics, 0 over the rest (read only
// where real). `target_column` is the target's column in this row, outside [0, real) when elsewhere.
template <typename T>
__device__ __forceinline__ void write_row_dlogits(T* x, int64_t columns, int64_t real_columns, bool packed,
                                                  int64_t target_column, float max, float sum, float dloss) {
  constexpr int kPer = kPerWord<T>;
  const int cols = static_cast<int>(columns), real = static_cast<int>(real_columns);
  const int target = target_column >= 0 && target_column < real ? static_cast<int>(target_column) : -1;
  const float scale = __fdiv_rn(dloss, sum);
  // The target's column is written like the others, then again by the same thread after its
  // loop: softmax − 1 formed before the scaling, as the CPU backend does, from the logit that
  // thread kept before overwriting it.
  const int owner = (packed ? target / kPer : target) % kCrossEntropyThreads;
  const bool owns_target = target >= 0 && static_cast<int>(threadIdx.x) == owner;
  const float target_logit = owns_target ? to_float(x[target]) : 0.0f;
  if (packed) {
    const int full = real / kPer, words = (real + kPer - 1) / kPer;
    for (int k = threadIdx.x; k < cols / kPer; k += kCrossEntropyThreads) {
      float g[kPer];
      if (k < words) {
        const uint4 w = reinterpret_cast<const uint4*>(x)[k];
#pragma unroll
        for (int e = 0; e < kPer; ++e) g[e] = __fmul_rn(exp_shifted(element_of<T>(w, e), max), scale);
        if (k >= full) {
#pragma unroll
          for (int e = 0; e < kPer; ++e)
            if (k * kPer + e >= real) g[e] = 0.0f;
        }
      } else {
#pragma unroll
        for (int e = 0; e < kPer; ++e) g[e] = 0.0f;
      }
      reinterpret_cast<uint4*>(x)[k] = word_of<T>(g);
    }
  } else {
    for (int j = threadIdx.x; j < cols; j += kCrossEntropyThreads)
      x[j] = from_float<T>(j < real ? __fmul_rn(exp_shifted(to_float(x[j]), max), scale) : 0.0f);
  }
  if (owns_target) {
    const float prob = __fdiv_rn(exp_shifted(target_logit, max), sum);
    x[target] = from_float<T>(__fmul_rn(dloss, __fsub_rn(prob, 1.0f)));
  }
}

template <typename T>
__global__ void __launch_bounds__(kCrossEntropyThreads)
    cross_entropy_kernel(T* logits, void* losses, ElemType losses_type, const int32_t* targets, int64_t padded_vocab,
                         int64_t vocab, bool packed, bool write_dlogits, float dloss, BadIdFlag* bad_id) {
  constexpr int kWarps = kCrossEntropyThreads / 32;
  __shared__ MaxSum warp_totals[kWarps];
  __shared__ MaxSum row_total;
  const int64_t row = blockIdx.x;
  const int32_t target = targets[row];
  if (!target_in_vocab(target, vocab, row, bad_id)) return;
  T* x = logits + row * padded_vocab;
  MaxSum local{-INFINITY, 0.0f};
  for_real_values(x, vocab, packed, [&](const auto& f) { online_add(local, f); });
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const MaxSum other{__shfl_xor_sync(0xffffffffu, local.max, offset), __shfl_xor_sync(0xffffffffu, local.sum, offset)};
    local = merge(local, other);
  }
  if (threadIdx.x % 32 == 0) warp_totals[threadIdx.x / 32] = local;
  __syncthreads();
  if (threadIdx.x == 0) {
    MaxSum total = warp_totals[0];
    for (int w = 1; w < kWarps; ++w) total = merge(total, warp_totals[w]);
    row_total = total;
  }
  __syncthreads();
  const float max = row_total.max, sum = row_total.sum;
  if (threadIdx.x == 0 && losses) {
    const double loss = (static_cast<double>(max) + log(static_cast<double>(sum))) - to_float(x[target]);
    detail::store_any(losses, losses_type, row, static_cast<float>(loss));
  }
  if (!write_dlogits) return;
  __syncthreads();  // the loss above reads x[target] before it is overwritten
  write_row_dlogits(x, padded_vocab, vocab, packed, target, max, sum, dloss);
}

// ---- vocab-parallel passes: one block per row of the slice ----

template <typename T>
__global__ void __launch_bounds__(kCrossEntropyThreads)
    slice_max_kernel(float* row_max, const T* logits, int64_t cols, int64_t real, bool packed) {
  constexpr int kWarps = kCrossEntropyThreads / 32;
  __shared__ float warp_maxima[kWarps];
  const int64_t row = blockIdx.x;
  float m = -INFINITY;
  for_real_values(logits + row * cols, real, packed, [&](const auto& f) {
    for (float v : f) m = fmaxf(m, v);
  });
  m = detail::warp_max(m);
  if (threadIdx.x % 32 == 0) warp_maxima[threadIdx.x / 32] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = warp_maxima[0];
    for (int w = 1; w < kWarps; ++w) total = fmaxf(total, warp_maxima[w]);
    row_max[row] = total;
  }
}

template <typename T>
__global__ void __launch_bounds__(kCrossEntropyThreads)
    slice_sum_exp_kernel(float* stats, const T* logits, const float* row_max, const int32_t* targets, int64_t rows,
                         int64_t cols, int64_t real, int64_t vocab_start, int64_t vocab_size, bool packed,
                         BadIdFlag* bad_id) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const T* x = logits + row * cols;
  const float m = row_max[row];
  float sum = 0.0f;
  for_real_values(x, real, packed, [&](const auto& f) {
    float s = 0.0f;
    for (float v : f) s = __fadd_rn(s, exp_shifted(v, m));
    sum = __fadd_rn(sum, s);
  });
  sum = detail::block_sum<kCrossEntropyThreads>(sum, scratch);  // a fixed tree: repeats bit for bit
  if (threadIdx.x != 0) return;
  const int32_t target = targets[row];
  if (target < 0 || target >= vocab_size) detail::report_bad_id(bad_id, row, target);
  const int64_t local = static_cast<int64_t>(target) - vocab_start;
  stats[row] = sum;
  stats[rows + row] = local >= 0 && local < real ? to_float(x[local]) : 0.0f;
}

template <typename T>
__global__ void __launch_bounds__(kCrossEntropyThreads)
    slice_cross_entropy_kernel(T* logits, void* losses, ElemType losses_type, const int32_t* targets,
                               const float* row_max, const float* stats, int64_t rows, int64_t cols, int64_t real,
                               int64_t vocab_start, bool packed, bool write_dlogits, float dloss) {
  const int64_t row = blockIdx.x;
  const float max = row_max[row], sum = stats[row];
  if (threadIdx.x == 0 && losses) {
    const double loss = (static_cast<double>(max) + log(static_cast<double>(sum))) - stats[rows + row];
    detail::store_any(losses, losses_type, row, static_cast<float>(loss));
  }
  if (!write_dlogits) return;
  const int64_t target = static_cast<int64_t>(targets[row]) - vocab_start;
  write_row_dlogits(logits + row * cols, cols, real, packed, target, max, sum, dloss);
}

}  // namespace

cudaError_t softmax_cross_entropy(void* logits, ElemType type, void* losses, ElemType losses_type,
                                  const int32_t* targets, int64_t rows, int64_t padded_vocab, int64_t vocab,
                                  bool write_dlogits, float dloss, BadIdFlag* bad_id, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  const bool packed = aligned16(logits) && padded_vocab % pack_width(type) == 0;
  return detail::dispatch_float(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    cross_entropy_kernel<T><<<static_cast<unsigned>(rows), kCrossEntropyThreads, 0, stream>>>(
        static_cast<T*>(logits), losses, losses_type, targets, padded_vocab, vocab, packed, write_dlogits, dloss,
        bad_id);
    return cudaGetLastError();
  });
}

cudaError_t vocab_parallel_max(float* row_max, const void* logits, ElemType type, int64_t rows, int64_t cols,
                               int64_t real, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  const bool packed = aligned16(logits) && cols % pack_width(type) == 0;
  return detail::dispatch_float(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    slice_max_kernel<T><<<static_cast<unsigned>(rows), kCrossEntropyThreads, 0, stream>>>(
        row_max, static_cast<const T*>(logits), cols, real, packed);
    return cudaGetLastError();
  });
}

cudaError_t vocab_parallel_sum_exp(float* stats, const void* logits, ElemType type, const float* row_max,
                                   const int32_t* targets, int64_t rows, int64_t cols, int64_t real,
                                   int64_t vocab_start, int64_t vocab_size, BadIdFlag* bad_id,
                                   cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  const bool packed = aligned16(logits) && cols % pack_width(type) == 0;
  return detail::dispatch_float(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    slice_sum_exp_kernel<T><<<static_cast<unsigned>(rows), kCrossEntropyThreads, 0, stream>>>(
        stats, static_cast<const T*>(logits), row_max, targets, rows, cols, real, vocab_start, vocab_size, packed,
        bad_id);
    return cudaGetLastError();
  });
}

cudaError_t vocab_parallel_cross_entropy(void* logits, ElemType type, void* losses, ElemType losses_type,
                                         const int32_t* targets, const float* row_max, const float* stats,
                                         int64_t rows, int64_t cols, int64_t real, int64_t vocab_start,
                                         bool write_dlogits, float dloss, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  const bool packed = aligned16(logits) && cols % pack_width(type) == 0;
  return detail::dispatch_float(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    slice_cross_entropy_kernel<T><<<static_cast<unsigned>(rows), kCrossEntropyThreads, 0, stream>>>(
        static_cast<T*>(logits), losses, losses_type, targets, row_max, stats, rows, cols, real, vocab_start, packed,
        write_dlogits, dloss);
    return cudaGetLastError();
  });
}

}  // namespace strata::cuda
