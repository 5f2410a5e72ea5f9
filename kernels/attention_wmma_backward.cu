// Causal flash-attention backward on tensor cores (bf16/fp16, head_dim 64 or 128), deterministic:
// a key-tile kernel accumulates dK and dV over the query tiles at or after it, a query-tile kernel
// accumulates dQ over the key tiles up to the diagonal; each output row has one owning warp, so
// no atomics. Probabilities are recomputed from lse; every product is a WMMA GEMM.
#include "attention_wmma.cuh"

namespace strata::cuda::detail {
namespace {

// Offsets of one (batch, head) inside qkv / dqkv (row stride 3C), out / dout (row stride C)
// and the (B, NH, T) statistics.
struct HeadOffsets {
  int64_t channels, row_stride, qkv, out, stats;
};

__device__ __forceinline__ HeadOffsets head_offsets(int bh, int seq, int heads, int head_dim) {
  const int b = bh / heads, h = bh % heads;
  HeadOffsets o;
  o.channels = static_cast<int64_t>(heads) * head_dim;
  o.row_stride = 3 * o.channels;
  o.qkv = static_cast<int64_t>(b) * seq * o.row_stride + static_cast<int64_t>(h) * head_dim;
  o.out = static_cast<int64_t>(b) * seq * o.channels + static_cast<int64_t>(h) * head_dim;
  o.stats = static_cast<int64_t>(bh) * seq;
  return o;
}

// Block: 64 keys at k0, warp w owning keys k0 + 16w …; loops over the query tiles from the
// diagonal on, 16 queries at a time per warp: Sᵀ and dPᵀ chunks (16 keys × 16 queries) by WMMA,
// Pᵀ and dSᵀ by the lanes, then dV += Pᵀ·dO and dK += dSᵀ·Q for those 16 queries.
template <typename T, int kHeadDim, bool kSplit>
__global__ void __launch_bounds__(kWmmaThreads)
    attention_wmma_dkdv_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse, const float* delta, int seq,
                               int heads, float scale, float scale_log2) {
  using Layout = WmmaAttentionLayout<kHeadDim>;
  constexpr int kTileLd = Layout::kTileLd, kChunkLd = Layout::kChunkLd, kOperandLd = Layout::kOperandLd;
  constexpr int kStages = Layout::kStages;
  constexpr int kTileElements = kWmmaTile * kTileLd;
  constexpr int kDimSteps = kHeadDim / kWmmaFragment;
  constexpr int kQuerySteps = kWmmaTile / kWmmaFragment;
  constexpr int kParts = kSplit ? 2 : 1;  // bf16 Pᵀ and dSᵀ as hi + lo (see AttentionBf16Operands)
  constexpr int kOperandElements = kWmmaWarpRows * kOperandLd;
  // At head_dim 64 the warp's K and V rows fit in registers for the whole kernel (shared memory,
  // not registers, caps its occupancy); at 128 they are re-read from shared memory per use.
  constexpr bool kHoldKeyRows = kHeadDim == 64;

  extern __shared__ __align__(128) unsigned char smem[];
  T* k_tile = reinterpret_cast<T*>(smem + Layout::kDkdvK);      // (64, D) this block's keys
  T* v_tile = reinterpret_cast<T*>(smem + Layout::kDkdvV);      // (64, D) their values
  T* q_tiles = reinterpret_cast<T*>(smem + Layout::kDkdvQ);     // kStages × (64, D) queries
  T* do_tiles = reinterpret_cast<T*>(smem + Layout::kDkdvDout);  // kStages × (64, D) output gradients
  float* lse_tiles = reinterpret_cast<float*>(smem + Layout::kDkdvLse);      // kStages × 64
  float* delta_tiles = reinterpret_cast<float*>(smem + Layout::kDkdvDelta);  // kStages × 64
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* s_chunk = reinterpret_cast<float*>(smem + Layout::kDkdvChunks + warp * 2 * Layout::kChunkBytes);  // (16, 16)
  float* dp_chunk = s_chunk + kWmmaWarpRows * kChunkLd;                                                     // (16, 16)
  T* p_hi = reinterpret_cast<T*>(smem + Layout::kDkdvOperands + warp * 4 * Layout::kOperandBytes);  // (16, 16) each
  T* p_lo = p_hi + kOperandElements;
  T* ds_hi = p_lo + kOperandElements;
  T* ds_lo = ds_hi + kOperandElements;

  const HeadOffsets view = head_offsets(blockIdx.x, seq, heads, kHeadDim);
  const int k_tile_index = gridDim.y - 1 - blockIdx.y;  // most query tiles first
  const int num_q_tiles = gridDim.y;
  const int k0 = k_tile_index * kWmmaTile;
  const T* q_base = qkv + view.qkv;
  const T* do_base = dout + view.out;

  auto load_query_tile = [&](int qt, int stage) {
    const int q0 = qt * kWmmaTile;
    load_tile_async<kHeadDim>(q_tiles + stage * kTileElements, q_base + q0 * view.row_stride, view.row_stride,
                              seq - q0);
    load_tile_async<kHeadDim>(do_tiles + stage * kTileElements, do_base + q0 * view.channels, view.channels, seq - q0);
    load_row_stats_async(lse_tiles + stage * kWmmaTile, lse + view.stats + q0, seq - q0, INFINITY);
    load_row_stats_async(delta_tiles + stage * kWmmaTile, delta + view.stats + q0, seq - q0, 0.0f);
  };
  // Copy groups: the resident keys and values, then one group per query tile.
  load_tile_async<kHeadDim>(k_tile, q_base + view.channels + k0 * view.row_stride, view.row_stride, seq - k0);
  load_tile_async<kHeadDim>(v_tile, q_base + 2 * view.channels + k0 * view.row_stride, view.row_stride, seq - k0);
  cp_async_commit();
  load_query_tile(k_tile_index, 0);
  cp_async_commit();
  cp_async_wait<1>();
  __syncthreads();
  const T* k_rows = k_tile + warp * kWmmaWarpRows * kTileLd;  // this warp's 16 keys
  const T* v_rows = v_tile + warp * kWmmaWarpRows * kTileLd;
  RowOperand<T> k_frag[kHoldKeyRows ? kDimSteps : 1], v_frag[kHoldKeyRows ? kDimSteps : 1];
  if constexpr (kHoldKeyRows) {
#pragma unroll
    for (int d = 0; d < kDimSteps; ++d) {
      wmma::load_matrix_sync(k_frag[d], k_rows + d * kWmmaFragment, kTileLd);
      wmma::load_matrix_sync(v_frag[d], v_rows + d * kWmmaFragment, kTileLd);
    }
  }

  Accumulator dk[kDimSteps], dv[kDimSteps];
#pragma unroll
  for (int d = 0; d < kDimSteps; ++d) {
    wmma::fill_fragment(dk[d], 0.0f);
    wmma::fill_fragment(dv[d], 0.0f);
  }
  const int key_row0 = k0 + warp * kWmmaWarpRows;
  // In a (16, 16) chunk lane l handles row l / 2 (a key) and columns (l % 2)·8 … +7 (queries).
  const int row = lane / 2, col0 = (lane % 2) * 8;
  const int kj = key_row0 + row;

  for (int qt = k_tile_index; qt < num_q_tiles; ++qt) {
    const int stage = kStages == 2 ? (qt - k_tile_index) % 2 : 0;
    if constexpr (kStages == 2) {
      if (qt + 1 < num_q_tiles) load_query_tile(qt + 1, stage ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // this stage's tiles landed for every thread
    const T* q_tile = q_tiles + stage * kTileElements;
    const T* do_tile = do_tiles + stage * kTileElements;
    const float* lse_tile = lse_tiles + stage * kWmmaTile;
    const float* delta_tile = delta_tiles + stage * kWmmaTile;
    const int q0 = qt * kWmmaTile;

    for (int n = 0; n < kQuerySteps; ++n) {
      const int chunk_q0 = q0 + n * kWmmaFragment;
      if (chunk_q0 + kWmmaFragment - 1 < key_row0) continue;  // all 16 queries precede the warp's keys
      const T* q_rows = q_tile + n * kWmmaFragment * kTileLd;
      const T* do_rows = do_tile + n * kWmmaFragment * kTileLd;
      {
        Accumulator s, dp;  // Sᵀ = K_warp · Q_chunkᵀ, dPᵀ = V_warp · dO_chunkᵀ
        wmma::fill_fragment(s, 0.0f);
        wmma::fill_fragment(dp, 0.0f);
#pragma unroll
        for (int d = 0; d < kDimSteps; ++d) {
          TransposedB<T> bt;
          wmma::load_matrix_sync(bt, q_rows + d * kWmmaFragment, kTileLd);
          if constexpr (kHoldKeyRows) {
            wmma::mma_sync(s, k_frag[d], bt, s);
          } else {
            wmma::load_matrix_sync(k_frag[0], k_rows + d * kWmmaFragment, kTileLd);
            wmma::mma_sync(s, k_frag[0], bt, s);
          }
          wmma::load_matrix_sync(bt, do_rows + d * kWmmaFragment, kTileLd);
          if constexpr (kHoldKeyRows) {
            wmma::mma_sync(dp, v_frag[d], bt, dp);
          } else {
            wmma::load_matrix_sync(v_frag[0], v_rows + d * kWmmaFragment, kTileLd);
            wmma::mma_sync(dp, v_frag[0], bt, dp);
          }
        }
        wmma::store_matrix_sync(s_chunk, s, kChunkLd, wmma::mem_row_major);
        wmma::store_matrix_sync(dp_chunk, dp, kChunkLd, wmma::mem_row_major);
      }
      __syncwarp();
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const int c = col0 + e, qi = chunk_q0 + c;
        // Padded queries carry lse = +∞, so their probabilities vanish without a test.
        const float p = kj <= qi ? exp2f(fmaf(s_chunk[row * kChunkLd + c], scale_log2,
                                              -lse_tile[n * kWmmaFragment + c] * kLog2e))
                                 : 0.0f;
        const float ds = p * (dp_chunk[row * kChunkLd + c] - delta_tile[n * kWmmaFragment + c]);
        store_operand<T, kParts == 2>(p_hi, p_lo, row * kOperandLd + c, p);
        store_operand<T, kParts == 2>(ds_hi, ds_lo, row * kOperandLd + c, ds);
      }
      __syncwarp();
      RowOperand<T> pt[kParts], dst[kParts];  // Pᵀ and dSᵀ (16 keys × 16 queries)
      wmma::load_matrix_sync(pt[0], p_hi, kOperandLd);
      wmma::load_matrix_sync(dst[0], ds_hi, kOperandLd);
      if constexpr (kParts == 2) {
        wmma::load_matrix_sync(pt[1], p_lo, kOperandLd);
        wmma::load_matrix_sync(dst[1], ds_lo, kOperandLd);
      }
#pragma unroll
      for (int d = 0; d < kDimSteps; ++d) {
        RowMajorB<T> b;
        wmma::load_matrix_sync(b, do_rows + d * kWmmaFragment, kTileLd);  // dV += Pᵀ · dO_chunk
#pragma unroll
        for (int part = 0; part < kParts; ++part) wmma::mma_sync(dv[d], pt[part], b, dv[d]);
        wmma::load_matrix_sync(b, q_rows + d * kWmmaFragment, kTileLd);  // dK += dSᵀ · Q_chunk
#pragma unroll
        for (int part = 0; part < kParts; ++part) wmma::mma_sync(dk[d], dst[part], b, dk[d]);
      }
      __syncwarp();  // chunks and operands are rewritten for the next 16 queries
    }
    __syncthreads();  // every warp is done with this stage's tiles
    if constexpr (kStages == 1) {
      if (qt + 1 < num_q_tiles) load_query_tile(qt + 1, 0);
      cp_async_commit();
    }
  }

  const int valid_rows = seq - key_row0;
  if (valid_rows <= 0) return;  // warp-uniform
  T* dk_rows = dqkv + view.qkv + view.channels + key_row0 * view.row_stride;
  T* dv_rows = dk_rows + view.channels;
#pragma unroll
  for (int d = 0; d < kDimSteps; ++d)
    store_accumulator_rows<T, kChunkLd>(dk[d], s_chunk, dk_rows + d * kWmmaFragment, view.row_stride, valid_rows,
                                        scale);
#pragma unroll
  for (int d = 0; d < kDimSteps; ++d)
    store_accumulator_rows<T, kChunkLd>(dv[d], s_chunk, dv_rows + d * kWmmaFragment, view.row_stride, valid_rows,
                                        1.0f);
}

// Block: 64 queries at q0, warp w owning queries q0 + 16w …; loops over the key tiles up to the
// diagonal, 16 keys at a time: S and dP chunks (16 queries × 16 keys), dS by the lanes, then
// dQ += dS·K for those 16 keys.
template <typename T, int kHeadDim, bool kSplit>
__global__ void __launch_bounds__(kWmmaThreads)
    attention_wmma_dq_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse, const float* delta, int seq,
                             int heads, float scale, float scale_log2) {
  using Layout = WmmaAttentionLayout<kHeadDim>;
  constexpr int kTileLd = Layout::kTileLd, kChunkLd = Layout::kChunkLd, kOperandLd = Layout::kOperandLd;
  constexpr int kStages = Layout::kStages;
  constexpr int kTileElements = kWmmaTile * kTileLd;
  constexpr int kDimSteps = kHeadDim / kWmmaFragment;
  constexpr int kKeySteps = kWmmaTile / kWmmaFragment;
  constexpr int kParts = kSplit ? 2 : 1;  // bf16 dS as hi + lo (see AttentionBf16Operands)

  extern __shared__ __align__(128) unsigned char smem[];
  T* q_tile = reinterpret_cast<T*>(smem + Layout::kDqQ);        // (64, D) this block's queries
  T* do_tile = reinterpret_cast<T*>(smem + Layout::kDqDout);    // (64, D) their output gradients
  float* lse_tile = reinterpret_cast<float*>(smem + Layout::kDqLse);      // 64
  float* delta_tile = reinterpret_cast<float*>(smem + Layout::kDqDelta);  // 64
  T* k_tiles = reinterpret_cast<T*>(smem + Layout::kDqK);  // kStages × (64, D) keys
  T* v_tiles = reinterpret_cast<T*>(smem + Layout::kDqV);  // kStages × (64, D) values
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* s_chunk = reinterpret_cast<float*>(smem + Layout::kDqChunks + warp * 2 * Layout::kChunkBytes);  // (16, 16)
  float* dp_chunk = s_chunk + kWmmaWarpRows * kChunkLd;                                                   // (16, 16)
  T* ds_hi = reinterpret_cast<T*>(smem + Layout::kDqOperands + warp * 2 * Layout::kOperandBytes);  // (16, 16)
  T* ds_lo = ds_hi + kWmmaWarpRows * kOperandLd;                                                   // (16, 16)

  const HeadOffsets view = head_offsets(blockIdx.x, seq, heads, kHeadDim);
  const int q_tile_index = gridDim.y - 1 - blockIdx.y;  // most key tiles first
  const int q0 = q_tile_index * kWmmaTile;
  const T* q_base = qkv + view.qkv;

  auto load_key_tile = [&](int kt, int stage) {
    const int k0 = kt * kWmmaTile;
    load_tile_async<kHeadDim>(k_tiles + stage * kTileElements, q_base + view.channels + k0 * view.row_stride,
                              view.row_stride, seq - k0);
    load_tile_async<kHeadDim>(v_tiles + stage * kTileElements, q_base + 2 * view.channels + k0 * view.row_stride,
                              view.row_stride, seq - k0);
  };
  // Copy groups: the resident query side, then one group per key tile.
  load_tile_async<kHeadDim>(q_tile, q_base + q0 * view.row_stride, view.row_stride, seq - q0);
  load_tile_async<kHeadDim>(do_tile, dout + view.out + q0 * view.channels, view.channels, seq - q0);
  load_row_stats_async(lse_tile, lse + view.stats + q0, seq - q0, INFINITY);
  load_row_stats_async(delta_tile, delta + view.stats + q0, seq - q0, 0.0f);
  cp_async_commit();
  load_key_tile(0, 0);
  cp_async_commit();
  cp_async_wait<1>();
  __syncthreads();
  // This warp's 16 queries and output gradients are the A side of S and dP for the whole walk.
  RowOperand<T> q_frag[kDimSteps], do_frag[kDimSteps];
#pragma unroll
  for (int d = 0; d < kDimSteps; ++d) {
    wmma::load_matrix_sync(q_frag[d], q_tile + warp * kWmmaWarpRows * kTileLd + d * kWmmaFragment, kTileLd);
    wmma::load_matrix_sync(do_frag[d], do_tile + warp * kWmmaWarpRows * kTileLd + d * kWmmaFragment, kTileLd);
  }
  const int query_row0 = q0 + warp * kWmmaWarpRows;
  // In a (16, 16) chunk lane l handles row l / 2 (a query) and columns (l % 2)·8 … +7 (keys).
  const int row = lane / 2, col0 = (lane % 2) * 8;
  const int qi = query_row0 + row;
  const float row_lse_log2 = lse_tile[warp * kWmmaWarpRows + row] * kLog2e;  // +∞ for padded queries
  const float row_delta = delta_tile[warp * kWmmaWarpRows + row];

  Accumulator dq[kDimSteps];
#pragma unroll
  for (int d = 0; d < kDimSteps; ++d) wmma::fill_fragment(dq[d], 0.0f);

  for (int kt = 0; kt <= q_tile_index; ++kt) {
    const int stage = kStages == 2 ? kt % 2 : 0;
    if constexpr (kStages == 2) {
      if (kt + 1 <= q_tile_index) load_key_tile(kt + 1, stage ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // this stage's tiles landed for every thread
    const T* k_tile = k_tiles + stage * kTileElements;
    const T* v_tile = v_tiles + stage * kTileElements;
    const int k0 = kt * kWmmaTile;

    for (int n = 0; n < kKeySteps; ++n) {
      const int chunk_k0 = k0 + n * kWmmaFragment;
      if (chunk_k0 > query_row0 + kWmmaWarpRows - 1) continue;  // all 16 keys follow the warp's queries
      const T* k_rows = k_tile + n * kWmmaFragment * kTileLd;
      {
        Accumulator s, dp;  // S = Q_warp · K_chunkᵀ, dP = dO_warp · V_chunkᵀ
        wmma::fill_fragment(s, 0.0f);
        wmma::fill_fragment(dp, 0.0f);
        const T* v_rows = v_tile + n * kWmmaFragment * kTileLd;
#pragma unroll
        for (int d = 0; d < kDimSteps; ++d) {
          TransposedB<T> bt;
          wmma::load_matrix_sync(bt, k_rows + d * kWmmaFragment, kTileLd);
          wmma::mma_sync(s, q_frag[d], bt, s);
          wmma::load_matrix_sync(bt, v_rows + d * kWmmaFragment, kTileLd);
          wmma::mma_sync(dp, do_frag[d], bt, dp);
        }
        wmma::store_matrix_sync(s_chunk, s, kChunkLd, wmma::mem_row_major);
        wmma::store_matrix_sync(dp_chunk, dp, kChunkLd, wmma::mem_row_major);
      }
      __syncwarp();
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const int c = col0 + e, kj = chunk_k0 + c;
        const float p = kj <= qi ? exp2f(fmaf(s_chunk[row * kChunkLd + c], scale_log2, -row_lse_log2)) : 0.0f;
        store_operand<T, kParts == 2>(ds_hi, ds_lo, row * kOperandLd + c,
                                      p * (dp_chunk[row * kChunkLd + c] - row_delta));
      }
      __syncwarp();
      RowOperand<T> ds[kParts];  // dS (16 queries × 16 keys)
      wmma::load_matrix_sync(ds[0], ds_hi, kOperandLd);
      if constexpr (kParts == 2) wmma::load_matrix_sync(ds[1], ds_lo, kOperandLd);
#pragma unroll
      for (int d = 0; d < kDimSteps; ++d) {  // dQ += dS · K_chunk
        RowMajorB<T> b;
        wmma::load_matrix_sync(b, k_rows + d * kWmmaFragment, kTileLd);
#pragma unroll
        for (int part = 0; part < kParts; ++part) wmma::mma_sync(dq[d], ds[part], b, dq[d]);
      }
      __syncwarp();  // chunks and operands are rewritten for the next 16 keys
    }
    __syncthreads();  // every warp is done with this stage's tiles
    if constexpr (kStages == 1) {
      if (kt + 1 <= q_tile_index) load_key_tile(kt + 1, 0);
      cp_async_commit();
    }
  }

  const int valid_rows = seq - query_row0;
  if (valid_rows <= 0) return;  // warp-uniform
  T* dq_rows = dqkv + view.qkv + query_row0 * view.row_stride;
#pragma unroll
  for (int d = 0; d < kDimSteps; ++d)
    store_accumulator_rows<T, kChunkLd>(dq[d], s_chunk, dq_rows + d * kWmmaFragment, view.row_stride, valid_rows,
                                        scale);
}

template <typename T, int kHeadDim, bool kSplit>
cudaError_t launch_backward(void* dqkv, const void* dout, const void* qkv, const float* lse, const float* delta,
                            int64_t batch, int64_t seq, int64_t heads, cudaStream_t stream) {
  using Layout = WmmaAttentionLayout<kHeadDim>;
  const dim3 grid(static_cast<unsigned>(batch * heads), static_cast<unsigned>(attention_tiles(seq)));
  const double inv_sqrt = 1.0 / std::sqrt(static_cast<double>(kHeadDim));
  const float scale = static_cast<float>(inv_sqrt);
  const float scale_log2 = static_cast<float>(inv_sqrt * 1.4426950408889634);
  auto* dst = static_cast<T*>(dqkv);
  const auto* g = static_cast<const T*>(dout);
  const auto* x = static_cast<const T*>(qkv);
  const int s = static_cast<int>(seq), nh = static_cast<int>(heads);

  auto dkdv = attention_wmma_dkdv_kernel<T, kHeadDim, kSplit>;
  cudaError_t rc = cudaFuncSetAttribute(dkdv, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(Layout::kDkdvBytes));
  if (rc != cudaSuccess) return rc;
  dkdv<<<grid, kWmmaThreads, Layout::kDkdvBytes, stream>>>(dst, g, x, lse, delta, s, nh, scale, scale_log2);
  rc = cudaGetLastError();
  if (rc != cudaSuccess) return rc;

  auto dq = attention_wmma_dq_kernel<T, kHeadDim, kSplit>;
  rc = cudaFuncSetAttribute(dq, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(Layout::kDqBytes));
  if (rc != cudaSuccess) return rc;
  dq<<<grid, kWmmaThreads, Layout::kDqBytes, stream>>>(dst, g, x, lse, delta, s, nh, scale, scale_log2);
  return cudaGetLastError();
}

}  // namespace

cudaError_t attention_backward_wmma(void* dqkv, const void* dout, const void* qkv, const float* lse,
                                    const float* delta, ElemType type, int64_t batch, int64_t seq, int64_t heads,
                                    int64_t head_dim, AttentionBf16Operands bf16_operands, cudaStream_t stream) {
  const bool aligned = aligned16(dqkv) && aligned16(dout) && aligned16(qkv);
  if (!attention_uses_tensor_cores(type, head_dim, aligned)) return cudaErrorInvalidValue;
  if (batch * heads <= 0 || seq <= 0) return cudaSuccess;
  return dispatch_tensor_core_variant(type, head_dim, bf16_operands, [&](auto variant) {
    using V = decltype(variant);
    return launch_backward<typename V::type, V::kHeadDim, V::kSplit>(dqkv, dout, qkv, lse, delta, batch, seq, heads,
                                                                     stream);
  });
}

}  // namespace strata::cuda::detail
