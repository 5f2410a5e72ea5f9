// Fused softmax + cross-entropy. Each thread keeps an online (max, sum) over its columns; the
// pairs are merged in a fixed tree (warp shuffles, then warps in order), so results repeat
// bit for bit. Rows are read as 16-byte packs when the padded width allows it.
#include <cmath>

#include "cross_entropy.cuh"
#include "device_helpers.cuh"

namespace strata::cuda {
namespace {

using detail::from_float;
using detail::Pack;
using detail::to_float;

struct MaxSum {
  float max;
  float sum;
};

__device__ __forceinline__ void online_add(MaxSum& a, float x) {
  if (x > a.max) {
    a.sum = a.sum * expf(a.max - x) + 1.0f;  // expf(−inf) = 0 on the first element
    a.max = x;
  } else {
    a.sum += expf(x - a.max);
  }
}

__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  if (a.max == -INFINITY) return b;
  if (b.max == -INFINITY) return a;
  const float m = fmaxf(a.max, b.max);
  return {m, a.sum * expf(a.max - m) + b.sum * expf(b.max - m)};
}

// False (and the row reported in *bad_id, once per block) for a target outside [0, vocab): the
// block leaves its row untouched.
__device__ __forceinline__ bool target_in_vocab(int32_t target, int64_t vocab, int64_t row, BadIdFlag* bad_id) {
  if (target >= 0 && target < vocab) return true;
  if (threadIdx.x == 0) detail::report_bad_id(bad_id, row, target);
  return false;
}

template <typename T>
__global__ void __launch_bounds__(kCrossEntropyThreads)
    cross_entropy_kernel(T* logits, void* losses, ElemType losses_type, const int32_t* targets, int64_t padded_vocab,
                         int64_t vocab, bool packed, bool write_dlogits, float dloss, BadIdFlag* bad_id) {
  constexpr int kWarps = kCrossEntropyThreads / 32;
  __shared__ MaxSum warp_totals[kWarps];
  __shared__ MaxSum row_total;
  using P = Pack<T>;
  const int64_t row = blockIdx.x;
  const int32_t target = targets[row];
  if (!target_in_vocab(target, vocab, row, bad_id)) return;
  T* x = logits + row * padded_vocab;
  MaxSum local{-INFINITY, 0.0f};
  if (packed) {
    const int64_t packs = (vocab + P::kSize - 1) / P::kSize;
    for (int64_t k = threadIdx.x; k < packs; k += kCrossEntropyThreads) {
      const P v = reinterpret_cast<const P*>(x)[k];
#pragma unroll
      for (int i = 0; i < P::kSize; ++i)
        if (k * P::kSize + i < vocab) online_add(local, to_float(v.v[i]));
    }
  } else {
    for (int64_t j = threadIdx.x; j < vocab; j += kCrossEntropyThreads) online_add(local, to_float(x[j]));
  }
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
  auto grad = [&](int64_t j, float v) -> float {
    if (j >= vocab) return 0.0f;
    const float prob = __fdiv_rn(expf(v - max), sum);
    return __fmul_rn(dloss, j == target ? __fsub_rn(prob, 1.0f) : prob);
  };
  if (packed) {
    for (int64_t k = threadIdx.x; k < padded_vocab / P::kSize; k += kCrossEntropyThreads) {
      P v = reinterpret_cast<const P*>(x)[k];
#pragma unroll
      for (int i = 0; i < P::kSize; ++i) v.v[i] = from_float<T>(grad(k * P::kSize + i, to_float(v.v[i])));
      reinterpret_cast<P*>(x)[k] = v;
    }
  } else {
    for (int64_t j = threadIdx.x; j < padded_vocab; j += kCrossEntropyThreads) x[j] = from_float<T>(grad(j, to_float(x[j])));
  }
}

// ---- vocab-parallel passes: one block per row of the slice ----

// The row's real columns x[0, real), in 16-byte packs when the rows allow it, handed to fn(j, x_j).
template <typename T, typename Fn>
__device__ __forceinline__ void for_real_columns(const T* x, int64_t real, bool packed, Fn&& fn) {
  using P = Pack<T>;
  if (packed) {
    const int64_t packs = (real + P::kSize - 1) / P::kSize;
    for (int64_t k = threadIdx.x; k < packs; k += kCrossEntropyThreads) {
      const P v = reinterpret_cast<const P*>(x)[k];
#pragma unroll
      for (int i = 0; i < P::kSize; ++i)
        if (k * P::kSize + i < real) fn(k * P::kSize + i, to_float(v.v[i]));
    }
  } else {
    for (int64_t j = threadIdx.x; j < real; j += kCrossEntropyThreads) fn(j, to_float(x[j]));
  }
}

template <typename T>
__global__ void __launch_bounds__(kCrossEntropyThreads)
    slice_max_kernel(float* row_max, const T* logits, int64_t cols, int64_t real, bool packed) {
  constexpr int kWarps = kCrossEntropyThreads / 32;
  __shared__ float warp_maxima[kWarps];
  const int64_t row = blockIdx.x;
  float m = -INFINITY;
  for_real_columns(logits + row * cols, real, packed, [&](int64_t, float v) { m = fmaxf(m, v); });
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
  for_real_columns(x, real, packed, [&](int64_t, float v) { sum = __fadd_rn(sum, expf(__fsub_rn(v, m))); });
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
  using P = Pack<T>;
  const int64_t row = blockIdx.x;
  const float max = row_max[row], sum = stats[row];
  if (threadIdx.x == 0 && losses) {
    const double loss = (static_cast<double>(max) + log(static_cast<double>(sum))) - stats[rows + row];
    detail::store_any(losses, losses_type, row, static_cast<float>(loss));
  }
  if (!write_dlogits) return;
  const int64_t target = static_cast<int64_t>(targets[row]) - vocab_start;
  T* x = logits + row * cols;
  auto grad = [&](int64_t j, float v) -> float {
    if (j >= real) return 0.0f;
    const float prob = __fdiv_rn(expf(__fsub_rn(v, max)), sum);
    return __fmul_rn(dloss, j == target ? __fsub_rn(prob, 1.0f) : prob);
  };
  if (packed) {
    for (int64_t k = threadIdx.x; k < cols / P::kSize; k += kCrossEntropyThreads) {
      P v = reinterpret_cast<const P*>(x)[k];
#pragma unroll
      for (int i = 0; i < P::kSize; ++i) v.v[i] = from_float<T>(grad(k * P::kSize + i, to_float(v.v[i])));
      reinterpret_cast<P*>(x)[k] = v;
    }
  } else {
    for (int64_t j = threadIdx.x; j < cols; j += kCrossEntropyThreads) x[j] = from_float<T>(grad(j, to_float(x[j])));
  }
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
