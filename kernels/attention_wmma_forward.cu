// Causal flash-attention forward on tensor cores (bf16/fp16, head_dim 64 or 128): one block of
// 4 warps per (batch·head, 64-query tile), each warp owning 16 query rows, walks the key tiles up
// to the diagonal with an online softmax. S = Q·Kᵀ and O += P·V are WMMA GEMMs.
#include "attention_wmma.cuh"

namespace strata::cuda::detail {
namespace {

template <typename T, int kHeadDim, bool kSplit>
__global__ void __launch_bounds__(kWmmaThreads, kHeadDim == 64 ? 3 : 2)
    attention_wmma_forward_kernel(T* out, float* lse, const T* qkv, int seq, int heads, float scale_log2) {
  using Layout = WmmaAttentionLayout<kHeadDim>;
  constexpr int kTileLd = Layout::kTileLd, kScoreLd = Layout::kScoreLd, kProbLd = Layout::kProbLd;
  constexpr int kChunkLd = Layout::kChunkLd;
  constexpr int kDimSteps = kHeadDim / kWmmaFragment;
  constexpr int kKeySteps = kWmmaTile / kWmmaFragment;
  constexpr int kParts = kSplit ? 2 : 1;  // bf16 probabilities as hi + lo (see AttentionBf16Operands)
  constexpr int kColumnsPerLane = kWmmaTile / 2;

  extern __shared__ __align__(128) unsigned char smem[];
  T* q_tile = reinterpret_cast<T*>(smem + Layout::kFwdQ);  // (64, D) this block's queries
  T* k_tile = reinterpret_cast<T*>(smem + Layout::kFwdK);  // (64, D) current keys
  T* v_tile = reinterpret_cast<T*>(smem + Layout::kFwdV);  // (64, D) current values
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* scores = reinterpret_cast<float*>(smem + Layout::kFwdScores + warp * Layout::kWarpScoreBytes);  // (16, 64)
  T* probs_hi = reinterpret_cast<T*>(smem + Layout::kFwdProbsHi + warp * Layout::kWarpProbBytes);      // (16, 64)
  T* probs_lo = reinterpret_cast<T*>(smem + Layout::kFwdProbsLo + warp * Layout::kWarpProbBytes);      // (16, 64)
  float* row_scale = reinterpret_cast<float*>(smem + Layout::kFwdRowScale + warp * Layout::kChunkBytes);  // (16, 16)

  const int bh = blockIdx.x, b = bh / heads, h = bh % heads;
  const int q_tile_index = gridDim.y - 1 - blockIdx.y;  // longest rows first
  const int q0 = q_tile_index * kWmmaTile;
  const int64_t channels = static_cast<int64_t>(heads) * kHeadDim;
  const int64_t row_stride = 3 * channels;
  const T* q_base = qkv + static_cast<int64_t>(b) * seq * row_stride + static_cast<int64_t>(h) * kHeadDim;
  const T* k_base = q_base + channels;
  const T* v_base = q_base + 2 * channels;

  // Copy groups: Q, then per key tile K and V. In the loop the two newest groups are always
  // "K then V" or "V then next K", so waiting for all but one lands the older of the two.
  load_tile_async<kHeadDim>(q_tile, q_base + q0 * row_stride, row_stride, seq - q0);
  cp_async_commit();
  load_tile_async<kHeadDim>(k_tile, k_base, row_stride, seq);
  cp_async_commit();
  load_tile_async<kHeadDim>(v_tile, v_base, row_stride, seq);
  cp_async_commit();
  cp_async_wait<2>();
  __syncthreads();
  RowOperand<T> q_frag[kDimSteps];  // this warp's 16 query rows, held for the whole walk
#pragma unroll
  for (int d = 0; d < kDimSteps; ++d)
    wmma::load_matrix_sync(q_frag[d], q_tile + warp * kWmmaWarpRows * kTileLd + d * kWmmaFragment, kTileLd);

  // Lane l does the softmax of its warp's row l / 2, over the key columns of parity l % 2.
  const int row = lane / 2, parity = lane % 2;
  const int qi = q0 + warp * kWmmaWarpRows + row;
  float row_max = -INFINITY;  // running max of s · scale · log2(e)
  float row_sum = 0.0f;       // running Σ 2^(that − row_max)
  Accumulator o[kDimSteps];
#pragma unroll
  for (int d = 0; d < kDimSteps; ++d) wmma::fill_fragment(o[d], 0.0f);

  for (int kt = 0; kt <= q_tile_index; ++kt) {
    const int k0 = kt * kWmmaTile;
    cp_async_wait<1>();
    __syncthreads();  // this key tile landed for every thread
    {
      Accumulator s[kKeySteps];  // S (16, 64) = Q_warp · Kᵀ
#pragma unroll
      for (int n = 0; n < kKeySteps; ++n) wmma::fill_fragment(s[n], 0.0f);
#pragma unroll
      for (int d = 0; d < kDimSteps; ++d) {
#pragma unroll
        for (int n = 0; n < kKeySteps; ++n) {
          TransposedB<T> k_frag;
          wmma::load_matrix_sync(k_frag, k_tile + n * kWmmaFragment * kTileLd + d * kWmmaFragment, kTileLd);
          wmma::mma_sync(s[n], q_frag[d], k_frag, s[n]);
        }
      }
#pragma unroll
      for (int n = 0; n < kKeySteps; ++n)
        wmma::store_matrix_sync(scores + n * kWmmaFragment, s[n], kScoreLd, wmma::mem_row_major);
    }
    __syncthreads();  // every warp is done with K: stream the next key tile in behind the softmax
    if (kt < q_tile_index)
      load_tile_async<kHeadDim>(k_tile, k_base + (k0 + kWmmaTile) * row_stride, row_stride, seq - k0 - kWmmaTile);
    cp_async_commit();

    // Online softmax in fp32, the fp32 kernels' definition in base 2.
    const float* srow = scores + row * kScoreLd;
    float s2[kColumnsPerLane];
    float tile_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < kColumnsPerLane; ++j) {
      const int c = 2 * j + parity;
      s2[j] = k0 + c <= qi ? srow[c] * scale_log2 : -INFINITY;
      tile_max = fmaxf(tile_max, s2[j]);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    const float new_max = fmaxf(row_max, tile_max);  // finite: key k0 ≤ qi in every visited tile
    const float rescale = exp2f(row_max - new_max);  // 0 on the first tile
    float tile_sum = 0.0f;
    T* prow_hi = probs_hi + row * kProbLd;
    T* prow_lo = probs_lo + row * kProbLd;
#pragma unroll
    for (int j = 0; j < kColumnsPerLane; ++j) {
      const float p = exp2f(s2[j] - new_max);
      tile_sum += p;
      store_operand<T, kParts == 2>(prow_hi, prow_lo, 2 * j + parity, p);
    }
    tile_sum += __shfl_xor_sync(0xffffffffu, tile_sum, 1);
    row_sum = row_sum * rescale + tile_sum;
    row_max = new_max;
    // O's fragment layout is opaque, but a fragment loaded from memory shares the layout of the
    // MMA result (mma_sync adds them element by element), so a (16, 16) tile whose row r holds
    // row r's factor scales O's rows through elementwise products.
#pragma unroll
    for (int e = 0; e < 8; ++e) row_scale[row * kChunkLd + parity * 8 + e] = rescale;
    __syncwarp();
    {
      Accumulator scale_frag;
      wmma::load_matrix_sync(scale_frag, row_scale, kChunkLd, wmma::mem_row_major);
#pragma unroll
      for (int d = 0; d < kDimSteps; ++d)
#pragma unroll
        for (int i = 0; i < scale_frag.num_elements; ++i) o[d].x[i] *= scale_frag.x[i];
    }

    cp_async_wait<1>();
    __syncthreads();  // V landed for every thread (and every warp's probabilities are written)
#pragma unroll
    for (int kk = 0; kk < kKeySteps; ++kk) {  // O (16, D) += P (16, 64) · V (64, D)
      RowOperand<T> p_frag[kParts];
      wmma::load_matrix_sync(p_frag[0], probs_hi + kk * kWmmaFragment, kProbLd);
      if constexpr (kParts == 2) wmma::load_matrix_sync(p_frag[1], probs_lo + kk * kWmmaFragment, kProbLd);
#pragma unroll
      for (int d = 0; d < kDimSteps; ++d) {
        RowMajorB<T> v_frag;
        wmma::load_matrix_sync(v_frag, v_tile + kk * kWmmaFragment * kTileLd + d * kWmmaFragment, kTileLd);
#pragma unroll
        for (int part = 0; part < kParts; ++part) wmma::mma_sync(o[d], p_frag[part], v_frag, o[d]);
      }
    }
    __syncthreads();  // every warp is done with V, its probabilities and its row scales
    if (kt < q_tile_index)
      load_tile_async<kHeadDim>(v_tile, v_base + (k0 + kWmmaTile) * row_stride, row_stride, seq - k0 - kWmmaTile);
    cp_async_commit();
  }

  const int warp_row0 = q0 + warp * kWmmaWarpRows;
  const int valid_rows = seq - warp_row0;
  if (valid_rows <= 0) return;  // warp-uniform: the whole warp leaves together
  T* out_rows = out + (static_cast<int64_t>(b) * seq + warp_row0) * channels + static_cast<int64_t>(h) * kHeadDim;
  const float inv_sum = 1.0f / row_sum;
#pragma unroll
  for (int d = 0; d < kDimSteps; ++d)
    store_accumulator_rows<T, kScoreLd>(o[d], scores, out_rows + d * kWmmaFragment, channels, valid_rows, inv_sum);
  if (parity == 0 && qi < seq) lse[static_cast<int64_t>(bh) * seq + qi] = row_max * kLn2 + logf(row_sum);
}

template <typename T, int kHeadDim, bool kSplit>
cudaError_t launch_forward(void* out, float* lse, const void* qkv, int64_t batch, int64_t seq, int64_t heads,
                           cudaStream_t stream) {
  const size_t smem = WmmaAttentionLayout<kHeadDim>::kFwdBytes;
  auto kernel = attention_wmma_forward_kernel<T, kHeadDim, kSplit>;
  const cudaError_t rc =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (rc != cudaSuccess) return rc;
  const dim3 grid(static_cast<unsigned>(batch * heads), static_cast<unsigned>(attention_tiles(seq)));
  const float scale_log2 = static_cast<float>(1.4426950408889634 / std::sqrt(static_cast<double>(kHeadDim)));
  kernel<<<grid, kWmmaThreads, smem, stream>>>(static_cast<T*>(out), lse, static_cast<const T*>(qkv),
                                               static_cast<int>(seq), static_cast<int>(heads), scale_log2);
  return cudaGetLastError();
}

}  // namespace

cudaError_t attention_forward_wmma(void* out, float* lse, const void* qkv, ElemType type, int64_t batch, int64_t seq,
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
