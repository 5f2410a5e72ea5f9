// Causal flash-attention backward, deterministic: a first kernel computes D = rowsum(dO ∘ O);
// a key-tile kernel accumulates dK and dV over the query tiles at or after it; a query-tile
// kernel accumulates dQ over the key tiles up to the diagonal. Each output element has one
// owning block, so no atomics are needed; the price is recomputing P and dP in both kernels.
// Scores and gradients accumulate in double, as in the forward (attention_forward.cu).
// bf16/fp16 at head_dim 64/128 go to the tensor-core kernels after the same first kernel.
#include <cmath>

#include "attention.cuh"
#include "attention_tiles.cuh"
#include "attention_mma.cuh"

namespace strata::cuda {
namespace {

using namespace detail;

// delta[(b·NH + h)·T + t] = Σ_d dout · out over the head, one warp per row, in double.
template <typename T>
__global__ void row_dot_kernel(float* delta, const T* dout, const T* out, int seq, int heads, int head_dim) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= static_cast<int64_t>(heads) * seq) return;
  const int b = blockIdx.y;  // grid: (rows of one batch entry / 8, batch)
  const int h = static_cast<int>(row / seq), t = static_cast<int>(row % seq);
  const int64_t offset = (static_cast<int64_t>(b) * seq + t) * heads * head_dim + static_cast<int64_t>(h) * head_dim;
  double acc = 0.0;
  for (int d = lane; d < head_dim; d += 32)
    acc += static_cast<double>(to_float(dout[offset + d])) * to_float(out[offset + d]);
  acc = warp_sum(acc);
  if (lane == 0) delta[(static_cast<int64_t>(b) * heads + h) * seq + t] = static_cast<float>(acc);
}

struct HeadView {
  int64_t channels, row_stride, qkv_offset, out_offset, stat_offset;
};

__device__ __forceinline__ HeadView head_view(int bh, int seq, int heads, int head_dim) {
  const int b = bh / heads, h = bh % heads;
  HeadView v;
  v.channels = static_cast<int64_t>(heads) * head_dim;
  v.row_stride = 3 * v.channels;
  v.qkv_offset = static_cast<int64_t>(b) * seq * v.row_stride + static_cast<int64_t>(h) * head_dim;
  v.out_offset = static_cast<int64_t>(b) * seq * v.channels + static_cast<int64_t>(h) * head_dim;
  v.stat_offset = static_cast<int64_t>(bh) * seq;
  return v;
}

// Writes acc · factor into rows (tile row r < valid_rows) of a head slice with the given stride.
template <typename T, int kMaxDim>
__device__ __forceinline__ void store_rows(T* dst, int64_t dst_stride, int valid_rows, int head_dim, float factor,
                                           const double (&acc)[kRowsPerThread][kMaxDim / kColGroups]) {
  const int ty = threadIdx.x / kColGroups, tx = threadIdx.x % kColGroups;
  const int groups = head_dim / kColGroups;
#pragma unroll
  for (int a = 0; a < kRowsPerThread; ++a) {
    const int r = ty * kRowsPerThread + a;
    if (r >= valid_rows) continue;
#pragma unroll
    for (int c = 0; c < kMaxDim / kColGroups; ++c)
      if (c < groups) dst[r * dst_stride + tx + c * kColGroups] = from_float<T>(static_cast<float>(acc[a][c] * factor));
  }
}

template <typename T, int kMaxDim>
__global__ void __launch_bounds__(kAttentionThreads)
    attention_dkdv_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse, const float* delta, int seq,
                          int heads, int head_dim, float scale) {
  constexpr int kGroups = kMaxDim / kColGroups;
  constexpr int kStride = kMaxDim + 1;
  extern __shared__ float smem[];
  float* k_tile = smem;
  float* v_tile = k_tile + kAttentionTile * kStride;
  float* q_tile = v_tile + kAttentionTile * kStride;
  float* do_tile = q_tile + kAttentionTile * kStride;
  float* pt_tile = do_tile + kAttentionTile * kStride;          // Pᵀ (keys, queries)
  float* dst_tile = pt_tile + kAttentionTile * kAttentionScoreStride;  // dSᵀ
  float* lse_tile = dst_tile + kAttentionTile * kAttentionScoreStride;
  float* delta_tile = lse_tile + kAttentionTile;

  const int ty = threadIdx.x / kColGroups, tx = threadIdx.x % kColGroups;
  const HeadView view = head_view(blockIdx.x, seq, heads, head_dim);
  const int k_tile_index = gridDim.y - 1 - blockIdx.y;  // most query tiles first
  const int k0 = k_tile_index * kAttentionTile;
  const T* q_base = qkv + view.qkv_offset;
  load_tile(k_tile, kStride, q_base + view.channels + k0 * view.row_stride, view.row_stride, seq - k0, head_dim);
  load_tile(v_tile, kStride, q_base + 2 * view.channels + k0 * view.row_stride, view.row_stride, seq - k0, head_dim);

  double dk[kRowsPerThread][kGroups], dv[kRowsPerThread][kGroups];
#pragma unroll
  for (int a = 0; a < kRowsPerThread; ++a)
#pragma unroll
    for (int c = 0; c < kGroups; ++c) dk[a][c] = dv[a][c] = 0.0;

  const int q_tiles = gridDim.y;
  for (int qt = k_tile_index; qt < q_tiles; ++qt) {
    const int q0 = qt * kAttentionTile;
    __syncthreads();  // previous tiles fully consumed
    load_tile(q_tile, kStride, q_base + q0 * view.row_stride, view.row_stride, seq - q0, head_dim);
    load_tile(do_tile, kStride, dout + view.out_offset + q0 * view.channels, view.channels, seq - q0, head_dim);
    for (int i = threadIdx.x; i < kAttentionTile; i += kAttentionThreads) {
      const bool valid = q0 + i < seq;
      lse_tile[i] = valid ? lse[view.stat_offset + q0 + i] : 0.0f;
      delta_tile[i] = valid ? delta[view.stat_offset + q0 + i] : 0.0f;
    }
    __syncthreads();
    double s[kRowsPerThread][kRowsPerThread], dp[kRowsPerThread][kRowsPerThread];
    score_tile(k_tile, q_tile, kStride, head_dim, s);    // Sᵀ: rows keys, columns queries
    score_tile(v_tile, do_tile, kStride, head_dim, dp);  // dPᵀ = V · dOᵀ
#pragma unroll
    for (int a = 0; a < kRowsPerThread; ++a) {
      const int kj = k0 + ty * kRowsPerThread + a;
#pragma unroll
      for (int c = 0; c < kRowsPerThread; ++c) {
        const int i = tx + c * kColGroups;
        const int qi = q0 + i;
        const float p = (kj <= qi && qi < seq) ? expf(static_cast<float>(s[a][c] * scale - lse_tile[i])) : 0.0f;
        const int at = (ty * kRowsPerThread + a) * kAttentionScoreStride + i;
        pt_tile[at] = p;
        dst_tile[at] = static_cast<float>(p * (dp[a][c] - delta_tile[i]));
      }
    }
    __syncthreads();
    value_tile<kMaxDim>(pt_tile, do_tile, kStride, head_dim, dv);  // dV += Pᵀ · dO
    value_tile<kMaxDim>(dst_tile, q_tile, kStride, head_dim, dk);  // dK += dSᵀ · Q
  }
  T* dk_base = dqkv + view.qkv_offset + view.channels + k0 * view.row_stride;
  store_rows<T, kMaxDim>(dk_base, view.row_stride, seq - k0, head_dim, scale, dk);
  store_rows<T, kMaxDim>(dk_base + view.channels, view.row_stride, seq - k0, head_dim, 1.0f, dv);
}

template <typename T, int kMaxDim>
__global__ void __launch_bounds__(kAttentionThreads)
    attention_dq_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse, const float* delta, int seq,
                        int heads, int head_dim, float scale) {
  constexpr int kGroups = kMaxDim / kColGroups;
  constexpr int kStride = kMaxDim + 1;
  extern __shared__ float smem[];
  float* q_tile = smem;
  float* do_tile = q_tile + kAttentionTile * kStride;
  float* k_tile = do_tile + kAttentionTile * kStride;
  float* v_tile = k_tile + kAttentionTile * kStride;
  float* ds_tile = v_tile + kAttentionTile * kStride;
  float* lse_tile = ds_tile + kAttentionTile * kAttentionScoreStride;
  float* delta_tile = lse_tile + kAttentionTile;

  const int ty = threadIdx.x / kColGroups, tx = threadIdx.x % kColGroups;
  const HeadView view = head_view(blockIdx.x, seq, heads, head_dim);
  const int q_tile_index = gridDim.y - 1 - blockIdx.y;
  const int q0 = q_tile_index * kAttentionTile;
  const T* q_base = qkv + view.qkv_offset;
  load_tile(q_tile, kStride, q_base + q0 * view.row_stride, view.row_stride, seq - q0, head_dim);
  load_tile(do_tile, kStride, dout + view.out_offset + q0 * view.channels, view.channels, seq - q0, head_dim);
  for (int i = threadIdx.x; i < kAttentionTile; i += kAttentionThreads) {
    const bool valid = q0 + i < seq;
    lse_tile[i] = valid ? lse[view.stat_offset + q0 + i] : 0.0f;
    delta_tile[i] = valid ? delta[view.stat_offset + q0 + i] : 0.0f;
  }

  double dq[kRowsPerThread][kGroups];
#pragma unroll
  for (int a = 0; a < kRowsPerThread; ++a)
#pragma unroll
    for (int c = 0; c < kGroups; ++c) dq[a][c] = 0.0;

  for (int kt = 0; kt <= q_tile_index; ++kt) {
    const int k0 = kt * kAttentionTile;
    __syncthreads();
    load_tile(k_tile, kStride, q_base + view.channels + k0 * view.row_stride, view.row_stride, seq - k0, head_dim);
    load_tile(v_tile, kStride, q_base + 2 * view.channels + k0 * view.row_stride, view.row_stride, seq - k0,
              head_dim);
    __syncthreads();
    double s[kRowsPerThread][kRowsPerThread], dp[kRowsPerThread][kRowsPerThread];
    score_tile(q_tile, k_tile, kStride, head_dim, s);    // S: rows queries, columns keys
    score_tile(do_tile, v_tile, kStride, head_dim, dp);  // dP = dO · Vᵀ
#pragma unroll
    for (int a = 0; a < kRowsPerThread; ++a) {
      const int r = ty * kRowsPerThread + a;
      const int qi = q0 + r;
#pragma unroll
      for (int c = 0; c < kRowsPerThread; ++c) {
        const int kj = k0 + tx + c * kColGroups;
        const float p = (kj <= qi && qi < seq) ? expf(static_cast<float>(s[a][c] * scale - lse_tile[r])) : 0.0f;
        ds_tile[r * kAttentionScoreStride + tx + c * kColGroups] = static_cast<float>(p * (dp[a][c] - delta_tile[r]));
      }
    }
    __syncthreads();
    value_tile<kMaxDim>(ds_tile, k_tile, kStride, head_dim, dq);  // dQ += dS · K
  }
  store_rows<T, kMaxDim>(dqkv + view.qkv_offset + q0 * view.row_stride, view.row_stride, seq - q0, head_dim, scale,
                         dq);
}

template <typename T>
cudaError_t launch_row_dot(float* delta, const T* dout, const T* out, int64_t batch, int64_t seq, int64_t heads,
                           int64_t head_dim, cudaStream_t stream) {
  const dim3 dot_grid(static_cast<unsigned>(ceil_div(heads * seq, 8)), static_cast<unsigned>(batch));
  row_dot_kernel<T><<<dot_grid, 256, 0, stream>>>(delta, dout, out, static_cast<int>(seq), static_cast<int>(heads),
                                                  static_cast<int>(head_dim));
  return cudaGetLastError();
}

template <typename T, int kMaxDim>
cudaError_t launch_backward(T* dqkv, const T* dout, const T* qkv, const float* lse, int64_t batch, int64_t seq,
                            int64_t heads, int64_t head_dim, const float* delta, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(batch * heads), static_cast<unsigned>(attention_tiles(seq)));
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
  const int s = static_cast<int>(seq), nh = static_cast<int>(heads), hd = static_cast<int>(head_dim);

  const size_t dkdv_smem = attention_dkdv_smem_bytes(kMaxDim);
  auto dkdv = attention_dkdv_kernel<T, kMaxDim>;
  cudaError_t rc = cudaFuncSetAttribute(dkdv, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(dkdv_smem));
  if (rc != cudaSuccess) return rc;
  dkdv<<<grid, kAttentionThreads, dkdv_smem, stream>>>(dqkv, dout, qkv, lse, delta, s, nh, hd, scale);
  rc = cudaGetLastError();
  if (rc != cudaSuccess) return rc;

  const size_t dq_smem = attention_dq_smem_bytes(kMaxDim);
  auto dq = attention_dq_kernel<T, kMaxDim>;
  rc = cudaFuncSetAttribute(dq, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(dq_smem));
  if (rc != cudaSuccess) return rc;
  dq<<<grid, kAttentionThreads, dq_smem, stream>>>(dqkv, dout, qkv, lse, delta, s, nh, hd, scale);
  return cudaGetLastError();
}

}  // namespace

cudaError_t attention_backward(void* dqkv, const void* dout, const void* qkv, const void* out, const float* lse,
                               ElemType type, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                               AttentionBf16Operands bf16_operands, float* workspace, cudaStream_t stream) {
  if (!attention_head_dim_supported(head_dim)) return cudaErrorInvalidValue;
  if (batch * heads <= 0 || seq <= 0) return cudaSuccess;
  const bool tensor_cores =
      attention_uses_tensor_cores(type, head_dim, aligned16(dqkv) && aligned16(dout) && aligned16(qkv));
  return dispatch_float(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto* dst = static_cast<T*>(dqkv);
    const auto* g = static_cast<const T*>(dout);
    const auto* x = static_cast<const T*>(qkv);
    const auto* y = static_cast<const T*>(out);
    const cudaError_t rc = launch_row_dot<T>(workspace, g, y, batch, seq, heads, head_dim, stream);
    if (rc != cudaSuccess) return rc;
    if (tensor_cores)
      return detail::attention_backward_mma(dqkv, dout, qkv, lse, workspace, type, batch, seq, heads, head_dim,
                                            bf16_operands, stream);
    if (attention_dim_class(head_dim) == 64)
      return launch_backward<T, 64>(dst, g, x, lse, batch, seq, heads, head_dim, workspace, stream);
    return launch_backward<T, 128>(dst, g, x, lse, batch, seq, heads, head_dim, workspace, stream);
  });
}

}  // namespace strata::cuda
