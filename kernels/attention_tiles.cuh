// Device building blocks of the flash-attention kernels: tile loads into padded fp32 shared
// memory, the 4×4-per-thread score product and the 4×(D/16)-per-thread value product, both
// accumulated in double (see attention_forward.cu for why).
// Thread (ty, tx) = (tid / 16, tid % 16) owns rows ty·4 … ty·4+3 and columns tx + 16·c.
// Device code: include from the attention .cu files only.
#pragma once
#ifndef __CUDACC__
#error "attention_tiles.cuh contains device code; include it from .cu files only"
#endif
#include "attention.cuh"
#include "device_helpers.cuh"

namespace strata::cuda::detail {

constexpr int kRowsPerThread = 4;
constexpr int kColGroups = 16;  // threads across a tile row

// dst[r][d] (row stride `stride`) = src[r · src_stride + d] for r < valid_rows, else 0.
template <typename T>
__device__ __forceinline__ void load_tile(float* dst, int stride, const T* src, int64_t src_stride, int valid_rows,
                                          int head_dim) {
  for (int idx = threadIdx.x; idx < kAttentionTile * head_dim; idx += kAttentionThreads) {
    const int r = idx / head_dim, d = idx % head_dim;
    dst[r * stride + d] = r < valid_rows ? to_float(src[r * src_stride + d]) : 0.0f;
  }
}

// acc[a][c] = Σ_d A[ty·4+a][d] · B[tx+16c][d] over the first head_dim columns.
__device__ __forceinline__ void score_tile(const float* A, const float* B, int stride, int head_dim,
                                           double (&acc)[kRowsPerThread][kRowsPerThread]) {
  const int ty = threadIdx.x / kColGroups, tx = threadIdx.x % kColGroups;
#pragma unroll
  for (int a = 0; a < kRowsPerThread; ++a)
#pragma unroll
    for (int c = 0; c < kRowsPerThread; ++c) acc[a][c] = 0.0;
  const float* arow = A + ty * kRowsPerThread * stride;
  const float* brow = B + tx * stride;
#pragma unroll 4
  for (int d = 0; d < head_dim; ++d) {
    double av[kRowsPerThread], bv[kRowsPerThread];
#pragma unroll
    for (int a = 0; a < kRowsPerThread; ++a) av[a] = arow[a * stride + d];
#pragma unroll
    for (int c = 0; c < kRowsPerThread; ++c) bv[c] = brow[c * kColGroups * stride + d];
#pragma unroll
    for (int a = 0; a < kRowsPerThread; ++a)
#pragma unroll
      for (int c = 0; c < kRowsPerThread; ++c) acc[a][c] = fma(av[a], bv[c], acc[a][c]);
  }
}

// acc[a][c] += Σ_j P[ty·4+a][j] · V[j][tx+16c] over the tile's key (or query) index j,
// for the column groups c < head_dim / 16.
template <int kMaxDim>
__device__ __forceinline__ void value_tile(const float* P, const float* V, int stride, int head_dim,
                                           double (&acc)[kRowsPerThread][kMaxDim / kColGroups]) {
  constexpr int kGroups = kMaxDim / kColGroups;
  const int ty = threadIdx.x / kColGroups, tx = threadIdx.x % kColGroups;
  const int groups = head_dim / kColGroups;
  const float* prow = P + ty * kRowsPerThread * kAttentionScoreStride;
#pragma unroll 2
  for (int j = 0; j < kAttentionTile; ++j) {
    double pv[kRowsPerThread], vv[kGroups];
#pragma unroll
    for (int a = 0; a < kRowsPerThread; ++a) pv[a] = prow[a * kAttentionScoreStride + j];
#pragma unroll
    for (int c = 0; c < kGroups; ++c) vv[c] = c < groups ? V[j * stride + tx + c * kColGroups] : 0.0f;
#pragma unroll
    for (int a = 0; a < kRowsPerThread; ++a)
#pragma unroll
      for (int c = 0; c < kGroups; ++c) acc[a][c] = fma(pv[a], vv[c], acc[a][c]);
  }
}

// Reductions over the 16 threads sharing a row strip (lanes differing in their low 4 bits).
__device__ __forceinline__ double strip_max(double v) {
#pragma unroll
  for (int offset = kColGroups / 2; offset > 0; offset >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}
__device__ __forceinline__ double strip_sum(double v) {
#pragma unroll
  for (int offset = kColGroups / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

}  // namespace strata::cuda::detail
