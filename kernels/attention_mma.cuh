// Device building blocks of the mma.sync attention kernels (FlashAttention-2's algorithm on PTX
// m16n8k16, fragments named by the PTX ISA's tables): XOR-swizzled shared-memory tiles, cp.async
// tile loads, ldmatrix fragment loads, and the conversion of fp32 accumulators into 16-bit A
// operands in registers. Declares the host entry points. Device code: .cu files only.
#pragma once
#ifndef __CUDACC__
#error "attention_mma.cuh contains device code; include it from .cu files only"
#endif
#include <cstring>

#include "attention.cuh"
#include "attention_variants.cuh"
#include "device_helpers.cuh"
#include "mma_ptx.cuh"

namespace strata::cuda::detail {

// mma.sync forward: same contract as attention_forward, for the case
// attention_uses_tensor_cores(type, head_dim, aligned) accepts.
cudaError_t attention_forward_mma(void* out, float* lse, const void* qkv, ElemType type, int64_t batch, int64_t seq,
                                  int64_t heads, int64_t head_dim, AttentionBf16Operands bf16_operands,
                                  cudaStream_t stream);

// mma.sync backward: dK/dV and dQ kernels; delta holds rowsum(dO ∘ O) per (b, h, t).
cudaError_t attention_backward_mma(void* dqkv, const void* dout, const void* qkv, const float* lse,
                                   const float* delta, ElemType type, int64_t batch, int64_t seq, int64_t heads,
                                   int64_t head_dim, AttentionBf16Operands bf16_operands, cudaStream_t stream);

// A block of 4 warps owns 64 rows (queries in the forward); each warp owns 16 of them, one m16
// fragment tall. Key tiles are 64 rows too, so the causal diagonal falls inside one tile.
constexpr int kMmaTile = 64;
constexpr int kMmaWarps = 4;
constexpr int kMmaThreads = 32 * kMmaWarps;
constexpr int kMmaWarpRows = 16;
static_assert(kMmaWarps * kMmaWarpRows == kMmaTile, "the warps of a block cover its tile");
static_assert(kMmaTile == kAttentionTile, "all attention paths share the tile grid of attention_tiles");

// ---- swizzled (64, D) tiles of 16-bit elements ----
// Rows are D elements with no padding; the 16-byte chunk c of row r sits at chunk c ^ (r % 8).
// ldmatrix reads 8 rows at one chunk column and cp.async writes whole rows, so with the XOR the
// 8 addresses of every phase fall in 8 different 16-byte bank groups: no bank conflicts.
template <int kHeadDim>
__device__ __forceinline__ int swizzled(int row, int col) {
  static_assert(kHeadDim % 64 == 0, "a swizzled row holds a multiple of 8 chunks");
  return row * kHeadDim + ((((col >> 3) ^ row) & 7) | ((col >> 3) & ~7)) * 8 + (col & 7);
}
template <int kHeadDim>
constexpr size_t mma_tile_bytes() {
  return size_t{kMmaTile} * kHeadDim * 2;
}

// dst ← the 64 rows of src from row 0 (row stride src_stride elements), rows ≥ valid_rows zero
// (cp.async's zero fill, reading nothing), so padded products stay finite. Issued by the whole
// block as one group's worth of copies; src and every row start 16-byte aligned.
template <int kHeadDim, typename T>
__device__ __forceinline__ void load_tile_mma(T* dst, const T* src, int64_t src_stride, int valid_rows) {
  constexpr int kChunksPerRow = kHeadDim / 8;
#pragma unroll
  for (int idx = threadIdx.x; idx < kMmaTile * kChunksPerRow; idx += kMmaThreads) {
    const int r = idx / kChunksPerRow, c = (idx % kChunksPerRow) * 8;
    const bool valid = r < valid_rows;
    // A zero-byte copy still takes a source address: an in-range one (row 0 always exists).
    ptx::cp_async_16_zfill(dst + swizzled<kHeadDim>(r, c), src + (valid ? r : 0) * src_stride + c, valid ? 16 : 0);
  }
}

// ---- fragments (PTX ISA, mma.m16n8k16 and ldmatrix; g = lane / 4, t = lane % 4) ----
// ldmatrix.x4: lane 8i + j passes the address of row j of 8×8 matrix i. Every fragment below
// starts at a row and a column that are multiples of 16, so the row a lane passes has row % 8 = j
// and its swizzled offset is (8·row_half + j)·D + ((2·step + col_half) ^ j)·8 plus row0·D: the
// first part depends only on the lane and the 16-column step, and is computed once per thread
// (LaneOffsets); row0·D is a compile-time constant in the unrolled loops, so each load is one
// address add with an immediate instead of a swizzle computed afresh.
template <int kHeadDim>
struct LaneOffsets {
  static constexpr int kSteps = kHeadDim / 16;
  int rows_first[kSteps];  // matrix i at rows 8(i % 2), columns 8(i / 2): A, and V read .trans
  int keys_first[kSteps];  // matrix i at rows 8(i / 2), columns 8(i % 2): Kᵀ
  __device__ __forceinline__ LaneOffsets() {
    const int lane = threadIdx.x % 32, i = lane / 8, j = lane % 8;
#pragma unroll
    for (int step = 0; step < kSteps; ++step) {
      rows_first[step] = (8 * (i & 1) + j) * kHeadDim + ((2 * step + (i >> 1)) ^ j) * 8;
      keys_first[step] = (8 * (i >> 1) + j) * kHeadDim + ((2 * step + (i & 1)) ^ j) * 8;
    }
  }
};

// A (16 × 16, row-major) from rows row0…row0+15, columns 16·step… of a swizzled tile: a[0] rows
// 0-7 cols 0-7, a[1] rows 8-15 cols 0-7, a[2] rows 0-7 cols 8-15, a[3] rows 8-15 cols 8-15.
template <int kHeadDim, typename T>
__device__ __forceinline__ void load_a_fragment(uint32_t (&a)[4], const T* tile, int row0, int step,
                                                const LaneOffsets<kHeadDim>& offsets) {
  ptx::ldmatrix_x4(a, tile + row0 * kHeadDim + offsets.rows_first[step]);
}

// B fragments of two n8 tiles for S = Q · Kᵀ: B[k][n] = K[n][k] over keys key0…key0+15 and dims
// 16·step…+15. b[n][0] holds K[key0 + 8n + g][dim 2t, +1] and b[n][1] the same 8 dims on: K's rows
// read as stored (no .trans); matrix i is keys 8(i / 2)…, dims 8(i % 2)….
template <int kHeadDim, typename T>
__device__ __forceinline__ void load_kt_fragments(uint32_t (&b)[2][2], const T* k_tile, int key0, int step,
                                                  const LaneOffsets<kHeadDim>& offsets) {
  uint32_t r[4];
  ptx::ldmatrix_x4(r, k_tile + key0 * kHeadDim + offsets.keys_first[step]);
  b[0][0] = r[0];
  b[0][1] = r[1];
  b[1][0] = r[2];
  b[1][1] = r[3];
}

// B fragments of two n8 tiles for O = P · V: B[k][n] = V[k][n] over keys key0…key0+15 and dims
// 16·step…+15. b[n][0] holds V[key0 + 2t, +1][dim 8n + g]: two rows of one column, which
// ldmatrix.trans delivers from V's rows; matrix i is keys 8(i % 2)…, dims 8(i / 2)….
template <int kHeadDim, typename T>
__device__ __forceinline__ void load_v_fragments(uint32_t (&b)[2][2], const T* v_tile, int key0, int step,
                                                 const LaneOffsets<kHeadDim>& offsets) {
  uint32_t r[4];
  ptx::ldmatrix_x4_trans(r, v_tile + key0 * kHeadDim + offsets.rows_first[step]);
  b[0][0] = r[0];
  b[0][1] = r[1];
  b[1][0] = r[2];
  b[1][1] = r[3];
}

// Two 16-bit values in one register, the lower-indexed element in the low half (the fragment
// tables' order).
template <typename T>
__device__ __forceinline__ uint32_t pack_pair(T lo, T hi) {
  uint16_t lo_bits, hi_bits;
  memcpy(&lo_bits, &lo, 2);
  memcpy(&hi_bits, &hi, 2);
  return static_cast<uint32_t>(lo_bits) | (static_cast<uint32_t>(hi_bits) << 16);
}

// An A fragment (16 × 16) from the fp32 accumulators of two adjacent n8 tiles c0 (columns 0-7)
// and c1 (columns 8-15): the C layout of an n8 tile pair is the A layout of one k16 step, so
// scores become the next product's operand without leaving registers. Each value is rounded to
// T into `hi`; with kSplit the rounding error goes, rounded again, into `lo` (hi + lo carries
// about twice T's bits; see AttentionBf16Operands).
template <typename T, bool kSplit>
__device__ __forceinline__ void accumulators_to_a(uint32_t (&hi)[4], uint32_t (&lo)[4], const float (&c0)[4],
                                                  const float (&c1)[4]) {
  const float* halves[4][2] = {{&c0[0], &c0[1]}, {&c0[2], &c0[3]}, {&c1[0], &c1[1]}, {&c1[2], &c1[3]}};
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const float x = *halves[r][0], y = *halves[r][1];
    const T x_hi = from_float<T>(x), y_hi = from_float<T>(y);
    hi[r] = pack_pair(x_hi, y_hi);
    if constexpr (kSplit) lo[r] = pack_pair(from_float<T>(x - to_float(x_hi)), from_float<T>(y - to_float(y_hi)));
  }
}

// The products of one k16 step over two n8 tiles: acc0 += a · b[0], acc1 += a · b[1].
template <typename T>
__device__ __forceinline__ void mma_pair(float (&acc0)[4], float (&acc1)[4], const uint32_t (&a)[4],
                                         const uint32_t (&b)[2][2]) {
  ptx::mma_m16n8k16<T>(acc0, a, b[0], acc0);
  ptx::mma_m16n8k16<T>(acc1, a, b[1], acc1);
}

// The A fragments of a warp's 16 rows of a tile, all kHeadDim / 16 k-steps: held in registers
// (kHold: the forward's Q; the backward's operands at head_dim 64) or re-read from shared memory
// at each use (the backward at head_dim 128, where registers are short). hold() after the tile
// has landed.
template <int kHeadDim, bool kHold, typename T>
struct WarpRows {
  uint32_t held[kHold ? kHeadDim / 16 : 1][4];
  const T* tile;
  int row0;
  __device__ __forceinline__ WarpRows(const T* tile_, int row0_) : tile(tile_), row0(row0_) {}
  __device__ __forceinline__ void hold(const LaneOffsets<kHeadDim>& offsets) {
    if constexpr (kHold) {
#pragma unroll
      for (int d = 0; d < kHeadDim / 16; ++d) load_a_fragment<kHeadDim>(held[d], tile, row0, d, offsets);
    }
  }
  __device__ __forceinline__ void get(uint32_t (&a)[4], int d, const LaneOffsets<kHeadDim>& offsets) const {
    if constexpr (kHold) {
#pragma unroll
      for (int r = 0; r < 4; ++r) a[r] = held[d][r];
    } else {
      load_a_fragment<kHeadDim>(a, tile, row0, d, offsets);
    }
  }
};

// acc (16 × 64) = A (the warp's 16 rows, k = head dims) · Bᵀ, B's 64 rows a swizzled tile.
template <typename T, int kHeadDim, bool kHold>
__device__ __forceinline__ void rows_times_tile_t(float (&acc)[kMmaTile / 8][4], const WarpRows<kHeadDim, kHold, T>& a,
                                                  const T* tile, const LaneOffsets<kHeadDim>& offsets) {
#pragma unroll
  for (int n = 0; n < kMmaTile / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[n][e] = 0.0f;
#pragma unroll
  for (int d = 0; d < kHeadDim / 16; ++d) {
    uint32_t a_frag[4];
    a.get(a_frag, d, offsets);
#pragma unroll
    for (int p = 0; p < kMmaTile / 16; ++p) {
      uint32_t b_frag[2][2];
      load_kt_fragments<kHeadDim>(b_frag, tile, p * 16, d, offsets);
      mma_pair<T>(acc[2 * p], acc[2 * p + 1], a_frag, b_frag);
    }
  }
}

// out (16 × D) += X (16 × 64, fp32 accumulators, rounded — and split when kSplit — into A
// operands) · tile (64 × D, swizzled).
template <typename T, int kHeadDim, bool kSplit>
__device__ __forceinline__ void accumulate_times_tile(float (&out)[kHeadDim / 8][4], const float (&x)[kMmaTile / 8][4],
                                                      const T* tile, const LaneOffsets<kHeadDim>& offsets) {
#pragma unroll
  for (int kk = 0; kk < kMmaTile / 16; ++kk) {
    uint32_t hi[4], lo[4];
    accumulators_to_a<T, kSplit>(hi, lo, x[2 * kk], x[2 * kk + 1]);
#pragma unroll
    for (int p = 0; p < kHeadDim / 16; ++p) {
      uint32_t b_frag[2][2];
      load_v_fragments<kHeadDim>(b_frag, tile, kk * 16, p, offsets);
      mma_pair<T>(out[2 * p], out[2 * p + 1], hi, b_frag);
      if constexpr (kSplit) mma_pair<T>(out[2 * p], out[2 * p + 1], lo, b_frag);
    }
  }
}

// Writes acc (16 × D, this warp's rows row0…), each lane's row g scaled by factor[0] and row
// g + 8 by factor[1], as T: through the warp's own rows of `stage` (a swizzled tile only this
// warp reads), then 16-byte stores of the rows < valid_rows to dst (row stride dst_stride).
template <typename T, int kHeadDim>
__device__ __forceinline__ void store_warp_rows(const float (&acc)[kHeadDim / 8][4], const float (&factor)[2],
                                                T* stage, int row0, T* dst, int64_t dst_stride, int valid_rows) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int n = 0; n < kHeadDim / 8; ++n)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const uint32_t pair =
          pack_pair(from_float<T>(acc[n][2 * r] * factor[r]), from_float<T>(acc[n][2 * r + 1] * factor[r]));
      memcpy(stage + swizzled<kHeadDim>(row0 + g + 8 * r, 8 * n + 2 * t), &pair, 4);
    }
  __syncwarp();
  constexpr int kChunksPerRow = kHeadDim / 8;
#pragma unroll
  for (int idx = lane; idx < kMmaWarpRows * kChunksPerRow; idx += 32) {
    const int r = idx / kChunksPerRow, c = (idx % kChunksPerRow) * 8;
    if (r < valid_rows)
      *reinterpret_cast<Pack<T>*>(dst + r * dst_stride + c) =
          *reinterpret_cast<const Pack<T>*>(stage + swizzled<kHeadDim>(row0 + r, c));
  }
}

// Sum and max over the 4 lanes of a quad (the lanes holding one accumulator row).
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

}  // namespace strata::cuda::detail
