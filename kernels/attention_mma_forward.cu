// Causal flash-attention forward on mma.sync (bf16/fp16, head_dim 64 or 128), after
// FlashAttention-2: one block of 4 warps per (batch·head, 64-query tile); each warp holds its 16
// query rows as A fragments, and S = Q·Kᵀ, the online softmax (fp32 running max and sum) and
// O += P·V all stay in registers: P goes from S's accumulators to A operands without touching
// shared memory. K and V tiles are double-buffered with cp.async, tiles past the diagonal are
// skipped and the diagonal tile is masked. The grid walks the query tiles of one head before the
// next head's, so the blocks running at once share their heads' K and V in L2.
// Floors at B = 32, NH = 12, T = 1024, D = 64, causal: 4·B·NH·T²·D/2 ≈ 52 GFLOP (what FLOP/s
// figures count), about 0.2 ms at 230 TFLOP/s; bytes are not the limit (qkv and out: 0.3 GB).
#include "attention_mma.cuh"

namespace strata::cuda::detail {
namespace {

// Shared memory: Q, then K and V, two buffers each.
template <int kHeadDim>
constexpr size_t forward_smem_bytes() {
  return 5 * mma_tile_bytes<kHeadDim>();
}

template <typename T, int kHeadDim, bool kSplit>
__global__ void __launch_bounds__(kMmaThreads, kHeadDim == 64 ? 4 : 2)
    attention_mma_forward_kernel(T* out, float* lse, const T* qkv, int seq, int heads, float scale_log2) {
  constexpr int kKeyTiles8 = kMmaTile / 8;  // n8 tiles of S
  constexpr int kDimTiles8 = kHeadDim / 8;  // n8 tiles of O
  constexpr int kTileElems = kMmaTile * kHeadDim;

  extern __shared__ __align__(128) unsigned char smem[];
  T* q_tile = reinterpret_cast<T*>(smem);  // (64, D) swizzled; later this block's output rows
  T* kv_tiles = q_tile + kTileElems;       // K0, V0, K1, V1: (64, D) swizzled each

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int q_tiles = (seq + kMmaTile - 1) / kMmaTile;
  const int bh = blockIdx.x / q_tiles, b = bh / heads, h = bh % heads;
  const int q_tile_index = q_tiles - 1 - blockIdx.x % q_tiles;  // longest rows of a head first
  const int q0 = q_tile_index * kMmaTile;
  const int64_t channels = static_cast<int64_t>(heads) * kHeadDim;
  const int64_t row_stride = 3 * channels;
  const T* q_base = qkv + static_cast<int64_t>(b) * seq * row_stride + static_cast<int64_t>(h) * kHeadDim;
  const T* k_base = q_base + channels;
  const T* v_base = q_base + 2 * channels;

  // Copy group 0: Q with the first K and V.
  load_tile_mma<kHeadDim>(q_tile, q_base + q0 * row_stride, row_stride, seq - q0);
  load_tile_mma<kHeadDim>(kv_tiles, k_base, row_stride, seq);
  load_tile_mma<kHeadDim>(kv_tiles + kTileElems, v_base, row_stride, seq);
  ptx::cp_async_commit();

  const int warp_row0 = warp * kMmaWarpRows;
  const int qi[2] = {q0 + warp_row0 + g, q0 + warp_row0 + g + 8};  // this lane's two query rows
  const LaneOffsets<kHeadDim> offsets;
  WarpRows<kHeadDim, true, T> q_rows(q_tile, warp_row0);
  float o[kDimTiles8][4];
#pragma unroll
  for (int n = 0; n < kDimTiles8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[n][e] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY};  // running max of s · scale · log2(e), per row
  float row_sum[2] = {0.0f, 0.0f};            // this lane's part of Σ 2^(that − row_max)

  for (int kt = 0; kt <= q_tile_index; ++kt) {
    const T* k_tile = kv_tiles + (kt % 2) * 2 * kTileElems;
    const T* v_tile = k_tile + kTileElems;
    // Group kt + 1: the next K and V into the other buffers (an empty group past the diagonal
    // keeps the count uniform), then wait for every group but that one.
    if (kt < q_tile_index) {
      T* next = kv_tiles + ((kt + 1) % 2) * 2 * kTileElems;
      const int k_next = (kt + 1) * kMmaTile;
      load_tile_mma<kHeadDim>(next, k_base + k_next * row_stride, row_stride, seq - k_next);
      load_tile_mma<kHeadDim>(next + kTileElems, v_base + k_next * row_stride, row_stride, seq - k_next);
    }
    ptx::cp_async_commit();
    ptx::cp_async_wait<1>();
    __syncthreads();  // tile kt (and, on the first pass, Q) landed for every thread
    if (kt == 0) q_rows.hold(offsets);

    float s[kKeyTiles8][4];  // S (16, 64) = Q_warp · Kᵀ; s[n][2r + e] is row qi[r], key k0 + 8n + 2t + e
    rows_times_tile_t<T, kHeadDim, true>(s, q_rows, k_tile, offsets);
    if (kt == q_tile_index) {  // the diagonal tile: keys after the query are masked
      const int k0 = kt * kMmaTile;
#pragma unroll
      for (int n = 0; n < kKeyTiles8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (k0 + 8 * n + 2 * t + (e & 1) > qi[e / 2]) s[n][e] = -INFINITY;
    }

    // Online softmax in base 2. The max is taken over raw scores (scale > 0 keeps the order, and
    // rounding is monotonic, so max(s)·scale = max(s·scale)): one FFMA per score then scales and
    // shifts it for ex2.
    float rescale[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float tile_max = -INFINITY;
#pragma unroll
      for (int n = 0; n < kKeyTiles8; ++n) tile_max = fmaxf(tile_max, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
      // Finite: key k0 ≤ qi[r] in every visited tile.
      const float new_max = fmaxf(row_max[r], quad_max(tile_max) * scale_log2);
      rescale[r] = ptx::exp2_approx(row_max[r] - new_max);  // 0 on the first tile
      float tile_sum = 0.0f;
#pragma unroll
      for (int n = 0; n < kKeyTiles8; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = s[n][2 * r + e];
          x = ptx::exp2_approx(fmaf(x, scale_log2, -new_max));
          tile_sum += x;
        }
      row_sum[r] = row_sum[r] * rescale[r] + tile_sum;
      row_max[r] = new_max;
    }
#pragma unroll
    for (int n = 0; n < kDimTiles8; ++n) {
      o[n][0] *= rescale[0];
      o[n][1] *= rescale[0];
      o[n][2] *= rescale[1];
      o[n][3] *= rescale[1];
    }

    accumulate_times_tile<T, kHeadDim, kSplit>(o, s, v_tile, offsets);  // O += P·V, P straight from S's registers
    __syncthreads();  // every warp is done with this K and V: the next pass may overwrite them
  }

  // Row sums over the quad; O / sum goes out through this warp's own rows of the Q tile.
  float inv_sum[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_sum[r] = quad_sum(row_sum[r]);
    inv_sum[r] = 1.0f / row_sum[r];
  }
  T* out_rows = out + (static_cast<int64_t>(b) * seq + q0 + warp_row0) * channels + static_cast<int64_t>(h) * kHeadDim;
  store_warp_rows<T, kHeadDim>(o, inv_sum, q_tile, warp_row0, out_rows, channels, seq - (q0 + warp_row0));
  if (t == 0) {
#pragma unroll
    for (int r = 0; r < 2; ++r)
      if (qi[r] < seq) lse[static_cast<int64_t>(bh) * seq + qi[r]] = row_max[r] * kLn2 + logf(row_sum[r]);
  }
}

template <typename T, int kHeadDim, bool kSplit>
cudaError_t launch_forward(void* out, float* lse, const void* qkv, int64_t batch, int64_t seq, int64_t heads,
                           cudaStream_t stream) {
  constexpr size_t smem = forward_smem_bytes<kHeadDim>();
  auto kernel = attention_mma_forward_kernel<T, kHeadDim, kSplit>;
  const cudaError_t rc =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (rc != cudaSuccess) return rc;
  const dim3 grid(static_cast<unsigned>(batch * heads * attention_tiles(seq)));  // tiles of head 0, of head 1, …
  const float scale_log2 = static_cast<float>(1.4426950408889634 / std::sqrt(static_cast<double>(kHeadDim)));
  kernel<<<grid, kMmaThreads, smem, stream>>>(static_cast<T*>(out), lse, static_cast<const T*>(qkv),
                                              static_cast<int>(seq), static_cast<int>(heads), scale_log2);
  return cudaGetLastError();
}

}  // namespace

cudaError_t attention_forward_mma(void* out, float* lse, const void* qkv, ElemType type, int64_t batch, int64_t seq,
                                  int64_t heads, int64_t head_dim, AttentionBf16Operands bf16_operands,
                                  cudaStream_t stream) {
  if (!attention_uses_tensor_cores(type, head_dim, aligned16(out) && aligned16(qkv))) return cudaErrorInvalidValue;
  if (batch * heads <= 0 || seq <= 0) return cudaSuccess;
  return dispatch_tensor_core_variant(type, head_dim, bf16_operands, [&](auto variant) {
    using V = decltype(variant);
    return launch_forward<typename V::type, V::kHeadDim, V::kSplit>(out, lse, qkv, batch, seq, heads, stream);
  });
}

}  // namespace strata::cuda::detail
