// Causal flash-attention forward: one block per (batch·head, 64-query tile) walks the key tiles
// up to the diagonal with an online softmax (running max and sum per row), so only a 64×64
// score tile ever exists. Inputs of any float type are widened to fp32 on load; scores, softmax
// statistics and the output accumulate in double, P is rounded to fp32. In fp32 the sums over a
// thousand keys, and scores that nearly cancel the row's log-sum-exp, would otherwise cost about
// 2e-5 of dQ, dK, dV against exact arithmetic, past the 1e-5 the fp32 path promises. This path is
// the fallback (fp32 training, unusual head dims, misaligned tensors): the launcher hands
// bf16/fp16 at head_dim 64/128 to the tensor-core kernel instead.
#include <cmath>

#include "attention.cuh"
#include "attention_tiles.cuh"
#include "attention_mma.cuh"

namespace strata::cuda {
namespace {

using namespace detail;

template <typename T, int kMaxDim>
__global__ void __launch_bounds__(kAttentionThreads)
    attention_forward_kernel(T* out, float* lse, const T* qkv, int seq, int heads, int head_dim, float scale) {
  constexpr int kGroups = kMaxDim / kColGroups;
  constexpr int kStride = kMaxDim + 1;
  extern __shared__ float smem[];
  float* q_tile = smem;                                 // (64, D) queries
  float* kv_tile = q_tile + kAttentionTile * kStride;   // (64, D) keys, then values
  float* p_tile = kv_tile + kAttentionTile * kStride;   // (64, 64) probabilities

  const int ty = threadIdx.x / kColGroups, tx = threadIdx.x % kColGroups;
  const int bh = blockIdx.x, b = bh / heads, h = bh % heads;
  const int q_tile_index = gridDim.y - 1 - blockIdx.y;  // longest rows first
  const int q0 = q_tile_index * kAttentionTile;
  const int64_t channels = static_cast<int64_t>(heads) * head_dim;
  const int64_t row_stride = 3 * channels;
  const T* q_base = qkv + static_cast<int64_t>(b) * seq * row_stride + static_cast<int64_t>(h) * head_dim;
  const T* k_base = q_base + channels;
  const T* v_base = q_base + 2 * channels;

  load_tile(q_tile, kStride, q_base + q0 * row_stride, row_stride, seq - q0, head_dim);

  double o[kRowsPerThread][kGroups];
  double row_max[kRowsPerThread], row_sum[kRowsPerThread];
#pragma unroll
  for (int a = 0; a < kRowsPerThread; ++a) {
    row_max[a] = -INFINITY;
    row_sum[a] = 0.0;
#pragma unroll
    for (int c = 0; c < kGroups; ++c) o[a][c] = 0.0;
  }

  for (int kt = 0; kt <= q_tile_index; ++kt) {
    const int k0 = kt * kAttentionTile;
    __syncthreads();  // previous values consumed; on the first pass, queries loaded
    load_tile(kv_tile, kStride, k_base + k0 * row_stride, row_stride, seq - k0, head_dim);
    __syncthreads();
    double s[kRowsPerThread][kRowsPerThread];
    score_tile(q_tile, kv_tile, kStride, head_dim, s);
#pragma unroll
    for (int a = 0; a < kRowsPerThread; ++a) {
      const int qi = q0 + ty * kRowsPerThread + a;
      double tile_max = -INFINITY;
#pragma unroll
      for (int c = 0; c < kRowsPerThread; ++c) {
        const int kj = k0 + tx + c * kColGroups;
        s[a][c] = kj <= qi ? s[a][c] * scale : -INFINITY;
        tile_max = fmax(tile_max, s[a][c]);
      }
      // Key k0 ≤ qi always, so every row has a finite maximum in every visited tile.
      const double new_max = fmax(row_max[a], strip_max(tile_max));
      const double rescale = exp(row_max[a] - new_max);
      double tile_sum = 0.0;
#pragma unroll
      for (int c = 0; c < kRowsPerThread; ++c) {
        const float p = expf(static_cast<float>(s[a][c] - new_max));
        tile_sum += p;
        p_tile[(ty * kRowsPerThread + a) * kAttentionScoreStride + tx + c * kColGroups] = p;
      }
      row_sum[a] = row_sum[a] * rescale + strip_sum(tile_sum);
      row_max[a] = new_max;
#pragma unroll
      for (int c = 0; c < kGroups; ++c) o[a][c] *= rescale;
    }
    __syncthreads();  // probabilities written, keys no longer read
    load_tile(kv_tile, kStride, v_base + k0 * row_stride, row_stride, seq - k0, head_dim);
    __syncthreads();
    value_tile<kMaxDim>(p_tile, kv_tile, kStride, head_dim, o);
  }

  const int groups = head_dim / kColGroups;
#pragma unroll
  for (int a = 0; a < kRowsPerThread; ++a) {
    const int qi = q0 + ty * kRowsPerThread + a;
    if (qi >= seq) continue;
    const double inv = 1.0 / row_sum[a];
    T* orow = out + (static_cast<int64_t>(b) * seq + qi) * channels + static_cast<int64_t>(h) * head_dim;
#pragma unroll
    for (int c = 0; c < kGroups; ++c)
      if (c < groups) orow[tx + c * kColGroups] = from_float<T>(static_cast<float>(o[a][c] * inv));
    if (tx == 0)
      lse[(static_cast<int64_t>(b) * heads + h) * seq + qi] = static_cast<float>(row_max[a] + log(row_sum[a]));
  }
}

template <typename T, int kMaxDim>
cudaError_t launch_forward(T* out, float* lse, const T* qkv, int64_t batch, int64_t seq, int64_t heads,
                           int64_t head_dim, cudaStream_t stream) {
  const size_t smem = attention_forward_smem_bytes(kMaxDim);
  auto kernel = attention_forward_kernel<T, kMaxDim>;
  cudaError_t rc = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (rc != cudaSuccess) return rc;
  const dim3 grid(static_cast<unsigned>(batch * heads), static_cast<unsigned>(attention_tiles(seq)));
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
  kernel<<<grid, kAttentionThreads, smem, stream>>>(out, lse, qkv, static_cast<int>(seq), static_cast<int>(heads),
                                                    static_cast<int>(head_dim), scale);
  return cudaGetLastError();
}

}  // namespace

cudaError_t attention_forward(void* out, float* lse, const void* qkv, ElemType type, int64_t batch, int64_t seq,
                              int64_t heads, int64_t head_dim, AttentionBf16Operands bf16_operands,
                              cudaStream_t stream) {
  if (!attention_head_dim_supported(head_dim)) return cudaErrorInvalidValue;
  if (batch * heads <= 0 || seq <= 0) return cudaSuccess;
  if (attention_uses_tensor_cores(type, head_dim, aligned16(out) && aligned16(qkv))) {
    return detail::attention_forward_mma(out, lse, qkv, type, batch, seq, heads, head_dim, bf16_operands, stream);
  }
  return dispatch_float(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (attention_dim_class(head_dim) == 64)
      return launch_forward<T, 64>(static_cast<T*>(out), lse, static_cast<const T*>(qkv), batch, seq, heads,
                                   head_dim, stream);
    return launch_forward<T, 128>(static_cast<T*>(out), lse, static_cast<const T*>(qkv), batch, seq, heads, head_dim,
                                  stream);
  });
}

}  // namespace strata::cuda
