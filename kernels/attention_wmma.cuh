// Device building blocks of the tensor-core (WMMA) attention kernels: cp.async tile loads with
// zero-filled tails, WMMA fragment types, and the write-back of an accumulator fragment through
// a per-warp fp32 chunk. Also declares the two host entry points the launchers dispatch to.
// Device code: include from the attention .cu files only.
#pragma once
#ifndef __CUDACC__
#error "attention_wmma.cuh contains device code; include it from .cu files only"
#endif
#include <mma.h>

#include <cmath>

#include "attention.cuh"
#include "attention_variants.cuh"
#include "device_helpers.cuh"

namespace strata::cuda::detail {

// Tensor-core forward: same contract as attention_forward, for the case
// attention_uses_tensor_cores(type, head_dim, aligned) accepts.
cudaError_t attention_forward_wmma(void* out, float* lse, const void* qkv, ElemType type, int64_t batch, int64_t seq,
                                   int64_t heads, int64_t head_dim, AttentionBf16Operands bf16_operands,
                                   cudaStream_t stream);

// Tensor-core backward: dK/dV and dQ kernels; delta holds rowsum(dO ∘ O) per (b, h, t).
cudaError_t attention_backward_wmma(void* dqkv, const void* dout, const void* qkv, const float* lse,
                                    const float* delta, ElemType type, int64_t batch, int64_t seq, int64_t heads,
                                    int64_t head_dim, AttentionBf16Operands bf16_operands, cudaStream_t stream);

namespace wmma = nvcuda::wmma;

template <typename T>
using RowOperand = wmma::fragment<wmma::matrix_a, kWmmaFragment, kWmmaFragment, kWmmaFragment, T, wmma::row_major>;
template <typename T>
using RowMajorB = wmma::fragment<wmma::matrix_b, kWmmaFragment, kWmmaFragment, kWmmaFragment, T, wmma::row_major>;
// B = Xᵀ for a row-major X in shared memory: X's rows become B's columns.
template <typename T>
using TransposedB = wmma::fragment<wmma::matrix_b, kWmmaFragment, kWmmaFragment, kWmmaFragment, T, wmma::col_major>;
using Accumulator = wmma::fragment<wmma::accumulator, kWmmaFragment, kWmmaFragment, kWmmaFragment, float>;

// ---- cp.async (sm_80+): global → shared without passing through registers ----
__device__ __forceinline__ void cp_async_16(void* smem_dst, const void* gmem_src) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem_src) : "memory");
}
__device__ __forceinline__ void cp_async_4(void* smem_dst, const void* gmem_src) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(gmem_src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most `kPending` of this thread's committed groups are still in flight; a
// __syncthreads() must follow before other threads read the data.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// dst (64 rows, row stride kTileLd) ← src rows r < valid_rows (row stride src_stride elements,
// kHeadDim elements each); rows ≥ valid_rows are zero so padded products stay finite. Issued by
// the whole block; src and every row start must be 16-byte aligned.
template <int kHeadDim, typename T>
__device__ __forceinline__ void load_tile_async(T* dst, const T* src, int64_t src_stride, int valid_rows) {
  constexpr int kTileLd = WmmaAttentionLayout<kHeadDim>::kTileLd;
  constexpr int kVectorsPerRow = kHeadDim * static_cast<int>(sizeof(T)) / 16;
  constexpr int kElementsPerVector = 16 / static_cast<int>(sizeof(T));
  for (int idx = threadIdx.x; idx < kWmmaTile * kVectorsPerRow; idx += kWmmaThreads) {
    const int r = idx / kVectorsPerRow, c = (idx % kVectorsPerRow) * kElementsPerVector;
    T* d = dst + r * kTileLd + c;
    if (r < valid_rows) cp_async_16(d, src + r * src_stride + c);
    else *reinterpret_cast<uint4*>(d) = make_uint4(0u, 0u, 0u, 0u);
  }
}

// dst[i] ← src[i] for i < valid, else `fill` (64 entries): lse (fill +∞, so exp(s − lse) = 0
// for padded queries) or delta (fill 0).
__device__ __forceinline__ void load_row_stats_async(float* dst, const float* src, int valid, float fill) {
  for (int i = threadIdx.x; i < kWmmaTile; i += kWmmaThreads) {
    if (i < valid) cp_async_4(dst + i, src + i);
    else dst[i] = fill;
  }
}

// Writes the 16×16 accumulator `frag` · factor as T into dst rows r < valid_rows (row stride
// dst_ld elements), going through `chunk` (16 × kChunkLd floats of this warp). Lane l handles
// row l / 2, columns (l % 2)·8 … +7, so `factor` may differ per row (pass the lane's row's).
// dst must be 16-byte aligned, as must dst_ld · sizeof(T).
template <typename T, int kChunkLd>
__device__ __forceinline__ void store_accumulator_rows(const Accumulator& frag, float* chunk, T* dst, int64_t dst_ld,
                                                       int valid_rows, float factor) {
  wmma::store_matrix_sync(chunk, frag, kChunkLd, wmma::mem_row_major);
  __syncwarp();
  const int lane = threadIdx.x % 32, r = lane / 2, c0 = (lane % 2) * 8;
  if (r < valid_rows) {
    Pack<T> pack;
#pragma unroll
    for (int e = 0; e < 8; ++e) pack.v[e] = from_float<T>(chunk[r * kChunkLd + c0 + e] * factor);
    *reinterpret_cast<Pack<T>*>(dst + r * dst_ld + c0) = pack;
  }
  __syncwarp();  // the chunk is reused by the next call
}

// Rounds v to T, writing the rounded value to hi and, when kSplit, the rounding error to lo, so
// hi + lo carries about twice T's significant bits into a pair of MMAs.
template <typename T, bool kSplit>
__device__ __forceinline__ void store_operand(T* hi, T* lo, int at, float v) {
  const T rounded = from_float<T>(v);
  hi[at] = rounded;
  if constexpr (kSplit) lo[at] = from_float<T>(v - to_float(rounded));
}


}  // namespace strata::cuda::detail
