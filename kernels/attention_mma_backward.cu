// Causal flash-attention backward on mma.sync (bf16/fp16, head_dim 64 or 128), after
// FlashAttention-2 and deterministic: a key-tile kernel accumulates dK and dV in registers over the
// query tiles at or after it, and a query-tile kernel accumulates dQ over the key tiles up to the
// diagonal (a second pass instead of fp32 atomics: every output row has one owning warp). P and dS
// are recomputed from lse and delta = rowsum(dO ∘ O) and go from accumulators to A operands in
// registers. Streamed tiles are double-buffered with cp.async. Both grids walk the tiles of one
// head before the next head's, so the blocks running at once share their heads' tensors in L2.
// FLOPs at B = 32, NH = 12, T = 1024, D = 64, causal: the backward counts 2.5× the forward's
// 52 GFLOP (5 products); this split runs 7 (S and dP twice), so at most 5/7 of the tensor-core
// rate shows up in the counted FLOP/s.
#include "attention_mma.cuh"

namespace strata::cuda::detail {

namespace {

// Offsets of one (batch, head) in qkv / dqkv (row stride 3C), dout (row stride C) and the
// (B, NH, T) statistics.
struct HeadView {
  int64_t channels, row_stride, qkv, out, stats;
};

template <int kHeadDim>
__device__ __forceinline__ HeadView head_view(int bh, int seq, int heads) {
  const int b = bh / heads, h = bh % heads;
  HeadView v;
  v.channels = static_cast<int64_t>(heads) * kHeadDim;
  v.row_stride = 3 * v.channels;
  v.qkv = static_cast<int64_t>(b) * seq * v.row_stride + static_cast<int64_t>(h) * kHeadDim;
  v.out = static_cast<int64_t>(b) * seq * v.channels + static_cast<int64_t>(h) * kHeadDim;
  v.stats = static_cast<int64_t>(bh) * seq;
  return v;
}

template <int kHeadDim>
constexpr size_t dkdv_smem_bytes() {  // K, V; Q and dO twice; lse and delta twice
  return 6 * mma_tile_bytes<kHeadDim>() + 4 * kMmaTile * sizeof(float);
}
template <int kHeadDim>
constexpr size_t dq_smem_bytes() {  // Q, dO; K and V twice
  return 6 * mma_tile_bytes<kHeadDim>();
}

// Block: 64 keys at k0, warp w owning keys k0 + 16w …; walks the query tiles from the diagonal on.
// Per tile: Sᵀ = K_w·Qᵀ and dPᵀ = V_w·dOᵀ (16 keys × 64 queries), Pᵀ and dSᵀ in registers, then
// dV += Pᵀ·dO and dK += dSᵀ·Q.
template <typename T, int kHeadDim, bool kSplit>
__global__ void __launch_bounds__(kMmaThreads, 2)
    attention_mma_dkdv_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse, const float* delta, int seq,
                              int heads, float scale, float scale_log2) {
  constexpr int kTileElems = kMmaTile * kHeadDim;
  constexpr bool kHold = kHeadDim == 64;
  extern __shared__ __align__(128) unsigned char smem[];
  T* k_tile = reinterpret_cast<T*>(smem);  // (64, D) this block's keys; later its dK rows
  T* v_tile = k_tile + kTileElems;          // (64, D) their values; later the dV rows
  T* q_tiles = v_tile + kTileElems;         // Q0, dO0, Q1, dO1
  float* stats = reinterpret_cast<float*>(q_tiles + 4 * kTileElems);  // lse0, delta0, lse1, delta1 (64 each)

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int q_tiles_total = (seq + kMmaTile - 1) / kMmaTile;
  const HeadView view = head_view<kHeadDim>(blockIdx.x / q_tiles_total, seq, heads);
  const int k_tile_index = blockIdx.x % q_tiles_total;  // key tile 0 has the most query tiles: it starts first
  const int k0 = k_tile_index * kMmaTile;
  const T* q_base = qkv + view.qkv;

  // Stage `stage` ← query tile qt: Q and dO by cp.async, lse·log2(e) (+∞ past seq: P = 0) and
  // delta (0) by plain loads, visible after the barrier that follows the wait.
  const auto load_query_tile = [&](int qt, int stage) {
    const int q0 = qt * kMmaTile;
    T* q_dst = q_tiles + stage * 2 * kTileElems;
    load_tile_mma<kHeadDim>(q_dst, q_base + q0 * view.row_stride, view.row_stride, seq - q0);
    load_tile_mma<kHeadDim>(q_dst + kTileElems, dout + view.out + q0 * view.channels, view.channels, seq - q0);
    float* stat = stats + stage * 2 * kMmaTile;
    const int i = threadIdx.x % kMmaTile, q = q0 + i;
    if (threadIdx.x < kMmaTile) stat[i] = q < seq ? lse[view.stats + q] * kLog2e : INFINITY;
    else stat[kMmaTile + i] = q < seq ? delta[view.stats + q] : 0.0f;
  };
  load_tile_mma<kHeadDim>(k_tile, q_base + view.channels + k0 * view.row_stride, view.row_stride, seq - k0);
  load_tile_mma<kHeadDim>(v_tile, q_base + 2 * view.channels + k0 * view.row_stride, view.row_stride, seq - k0);
  load_query_tile(k_tile_index, 0);
  ptx::cp_async_commit();

  const int warp_row0 = warp * kMmaWarpRows;
  const LaneOffsets<kHeadDim> offsets;
  WarpRows<kHeadDim, kHold, T> k_rows(k_tile, warp_row0), v_rows(v_tile, warp_row0);
  const int key[2] = {k0 + warp_row0 + g, k0 + warp_row0 + g + 8};
  float dk[kHeadDim / 8][4], dv[kHeadDim / 8][4];
#pragma unroll
  for (int n = 0; n < kHeadDim / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[n][e] = dv[n][e] = 0.0f;

  for (int qt = k_tile_index; qt < q_tiles_total; ++qt) {
    const int stage = (qt - k_tile_index) % 2;
    if (qt + 1 < q_tiles_total) load_query_tile(qt + 1, 1 - stage);
    ptx::cp_async_commit();
    ptx::cp_async_wait<1>();
    __syncthreads();  // query tile qt (and, on the first pass, K and V) landed for every thread
    if (qt == k_tile_index) {
      k_rows.hold(offsets);
      v_rows.hold(offsets);
    }
    const T* q_tile = q_tiles + stage * 2 * kTileElems;
    const T* do_tile = q_tile + kTileElems;
    const float* lse_log2_tile = stats + stage * 2 * kMmaTile;
    const float* delta_tile = lse_log2_tile + kMmaTile;

    float p[kMmaTile / 8][4], ds[kMmaTile / 8][4];  // Pᵀ, then dPᵀ → dSᵀ: (16 keys, 64 queries)
    rows_times_tile_t<T, kHeadDim, kHold>(p, k_rows, q_tile, offsets);
    rows_times_tile_t<T, kHeadDim, kHold>(ds, v_rows, do_tile, offsets);
#pragma unroll
    for (int n = 0; n < kMmaTile / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = 8 * n + 2 * t + (e & 1);  // query q0 + col; key key[e / 2]
        p[n][e] = ptx::exp2_approx(fmaf(p[n][e], scale_log2, -lse_log2_tile[col]));
        ds[n][e] = p[n][e] * (ds[n][e] - delta_tile[col]);
      }
    if (qt == k_tile_index) {  // the diagonal tile: queries before the key see none of it
      const int q0 = qt * kMmaTile;
#pragma unroll
      for (int n = 0; n < kMmaTile / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (q0 + 8 * n + 2 * t + (e & 1) < key[e / 2]) p[n][e] = ds[n][e] = 0.0f;
    }
    accumulate_times_tile<T, kHeadDim, kSplit>(dv, p, do_tile, offsets);
    accumulate_times_tile<T, kHeadDim, kSplit>(dk, ds, q_tile, offsets);
    __syncthreads();  // every warp is done with this stage: the next pass may overwrite it
  }

  const int valid_rows = seq - (k0 + warp_row0);
  if (valid_rows <= 0) return;  // warp-uniform
  T* dk_rows = dqkv + view.qkv + view.channels + (k0 + warp_row0) * view.row_stride;
  store_warp_rows<T, kHeadDim>(dk, {scale, scale}, k_tile, warp_row0, dk_rows, view.row_stride, valid_rows);
  store_warp_rows<T, kHeadDim>(dv, {1.0f, 1.0f}, v_tile, warp_row0, dk_rows + view.channels, view.row_stride, valid_rows);
}

// Block: 64 queries at q0, warp w owning queries q0 + 16w …; walks the key tiles up to the
// diagonal: S = Q_w·Kᵀ and dP = dO_w·Vᵀ (16 queries × 64 keys), P and dS in registers, then
// dQ += dS·K.
template <typename T, int kHeadDim, bool kSplit>
__global__ void __launch_bounds__(kMmaThreads, 2)
    attention_mma_dq_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse, const float* delta, int seq,
                            int heads, float scale, float scale_log2) {
  constexpr int kTileElems = kMmaTile * kHeadDim;
  constexpr bool kHold = kHeadDim == 64;
  extern __shared__ __align__(128) unsigned char smem[];
  T* q_tile = reinterpret_cast<T*>(smem);  // (64, D) this block's queries; later its dQ rows
  T* do_tile = q_tile + kTileElems;         // (64, D) their output gradients
  T* kv_tiles = do_tile + kTileElems;       // K0, V0, K1, V1

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int q_tiles = (seq + kMmaTile - 1) / kMmaTile;
  const HeadView view = head_view<kHeadDim>(blockIdx.x / q_tiles, seq, heads);
  const int q_tile_index = q_tiles - 1 - blockIdx.x % q_tiles;  // longest rows of a head first
  const int q0 = q_tile_index * kMmaTile;
  const T* q_base = qkv + view.qkv;
  const auto load_key_tile = [&](int kt, int stage) {
    const int k0 = kt * kMmaTile;
    T* dst = kv_tiles + stage * 2 * kTileElems;
    load_tile_mma<kHeadDim>(dst, q_base + view.channels + k0 * view.row_stride, view.row_stride, seq - k0);
    load_tile_mma<kHeadDim>(dst + kTileElems, q_base + 2 * view.channels + k0 * view.row_stride, view.row_stride,
                            seq - k0);
  };
  load_tile_mma<kHeadDim>(q_tile, q_base + q0 * view.row_stride, view.row_stride, seq - q0);
  load_tile_mma<kHeadDim>(do_tile, dout + view.out + q0 * view.channels, view.channels, seq - q0);
  load_key_tile(0, 0);
  ptx::cp_async_commit();

  const int warp_row0 = warp * kMmaWarpRows;
  const LaneOffsets<kHeadDim> offsets;
  WarpRows<kHeadDim, kHold, T> q_rows(q_tile, warp_row0), do_rows(do_tile, warp_row0);
  const int query[2] = {q0 + warp_row0 + g, q0 + warp_row0 + g + 8};
  float row_lse_log2[2], row_delta[2];  // +∞ and 0 for padded queries: P = 0
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_lse_log2[r] = query[r] < seq ? lse[view.stats + query[r]] * kLog2e : INFINITY;
    row_delta[r] = query[r] < seq ? delta[view.stats + query[r]] : 0.0f;
  }
  float dq[kHeadDim / 8][4];
#pragma unroll
  for (int n = 0; n < kHeadDim / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) dq[n][e] = 0.0f;

  for (int kt = 0; kt <= q_tile_index; ++kt) {
    const int stage = kt % 2;
    if (kt < q_tile_index) load_key_tile(kt + 1, 1 - stage);
    ptx::cp_async_commit();
    ptx::cp_async_wait<1>();
    __syncthreads();  // key tile kt (and, on the first pass, Q and dO) landed for every thread
    if (kt == 0) {
      q_rows.hold(offsets);
      do_rows.hold(offsets);
    }
    const T* k_tile = kv_tiles + stage * 2 * kTileElems;
    const T* v_tile = k_tile + kTileElems;

    float p[kMmaTile / 8][4], ds[kMmaTile / 8][4];  // P, then dP → dS: (16 queries, 64 keys)
    rows_times_tile_t<T, kHeadDim, kHold>(p, q_rows, k_tile, offsets);
    rows_times_tile_t<T, kHeadDim, kHold>(ds, do_rows, v_tile, offsets);
#pragma unroll
    for (int n = 0; n < kMmaTile / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e / 2;
        ds[n][e] = ptx::exp2_approx(fmaf(p[n][e], scale_log2, -row_lse_log2[r])) * (ds[n][e] - row_delta[r]);
      }
    if (kt == q_tile_index) {  // the diagonal tile: keys after the query are masked
      const int k0 = kt * kMmaTile;
#pragma unroll
      for (int n = 0; n < kMmaTile / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (k0 + 8 * n + 2 * t + (e & 1) > query[e / 2]) ds[n][e] = 0.0f;
    }
    accumulate_times_tile<T, kHeadDim, kSplit>(dq, ds, k_tile, offsets);
    __syncthreads();  // every warp is done with this stage: the next pass may overwrite it
  }

  const int valid_rows = seq - (q0 + warp_row0);
  if (valid_rows <= 0) return;  // warp-uniform
  store_warp_rows<T, kHeadDim>(dq, {scale, scale}, q_tile, warp_row0, dqkv + view.qkv + (q0 + warp_row0) * view.row_stride,
                               view.row_stride, valid_rows);
}

template <typename T, int kHeadDim, bool kSplit>
cudaError_t launch_backward(void* dqkv, const void* dout, const void* qkv, const float* lse, const float* delta,
                            int64_t batch, int64_t seq, int64_t heads, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(batch * heads * attention_tiles(seq)));  // tiles of head 0, of head 1, …
  const double inv_sqrt = 1.0 / std::sqrt(static_cast<double>(kHeadDim));
  const float scale = static_cast<float>(inv_sqrt);
  const float scale_log2 = static_cast<float>(inv_sqrt * 1.4426950408889634);
  auto* dst = static_cast<T*>(dqkv);
  const auto* g = static_cast<const T*>(dout);
  const auto* x = static_cast<const T*>(qkv);
  const int s = static_cast<int>(seq), nh = static_cast<int>(heads);

  constexpr size_t dkdv_smem = dkdv_smem_bytes<kHeadDim>();
  auto dkdv = attention_mma_dkdv_kernel<T, kHeadDim, kSplit>;
  cudaError_t rc = cudaFuncSetAttribute(dkdv, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(dkdv_smem));
  if (rc != cudaSuccess) return rc;
  dkdv<<<grid, kMmaThreads, dkdv_smem, stream>>>(dst, g, x, lse, delta, s, nh, scale, scale_log2);
  rc = cudaGetLastError();
  if (rc != cudaSuccess) return rc;

  constexpr size_t dq_smem = dq_smem_bytes<kHeadDim>();
  auto dq = attention_mma_dq_kernel<T, kHeadDim, kSplit>;
  rc = cudaFuncSetAttribute(dq, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(dq_smem));
  if (rc != cudaSuccess) return rc;
  dq<<<grid, kMmaThreads, dq_smem, stream>>>(dst, g, x, lse, delta, s, nh, scale, scale_log2);
  return cudaGetLastError();
}

}  // namespace

cudaError_t attention_backward_mma(void* dqkv, const void* dout, const void* qkv, const float* lse,
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
