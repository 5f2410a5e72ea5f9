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

template <typename T>
__global__ void __launch_bounds__(kCrossEntropyThreads)
    cross_entropy_kernel(T* logits, void* losses, ElemType losses_type, const int32_t* targets, int64_t padded_vocab,
                         int64_t vocab, bool packed, bool write_dlogits, float dloss, int* bad_row) {
  constexpr int kWarps = kCrossEntropyThreads / 32;
  __shared__ MaxSum warp_totals[kWarps];
  __shared__ MaxSum row_total;
  using P = Pack<T>;
  const int64_t row = blockIdx.x;
  const int32_t target = targets[row];
  if (target < 0 || target >= vocab) {
    if (threadIdx.x == 0) atomicMin(bad_row, static_cast<int>(row));
    return;
  }
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

}  // namespace

cudaError_t softmax_cross_entropy(void* logits, ElemType type, void* losses, ElemType losses_type,
                                  const int32_t* targets, int64_t rows, int64_t padded_vocab, int64_t vocab,
                                  bool write_dlogits, float dloss, int* bad_row, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  const bool packed = aligned16(logits) && padded_vocab % pack_width(type) == 0;
  return detail::dispatch_float(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    cross_entropy_kernel<T><<<static_cast<unsigned>(rows), kCrossEntropyThreads, 0, stream>>>(
        static_cast<T*>(logits), losses, losses_type, targets, padded_vocab, vocab, packed, write_dlogits, dloss,
        bad_row);
    return cudaGetLastError();
  });
}

}  // namespace strata::cuda
