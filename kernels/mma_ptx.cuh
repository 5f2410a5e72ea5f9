// PTX building blocks of the mma.sync kernels (device code, .cu files only): m16n8k16 products
// (bf16/fp16 in, fp32 accumulate), ldmatrix (.x1/.x2/.x4, .trans), cp.async with zero fill and ex2.
// tests/gpu/emu/transform_kernels.py swaps each `ptx section` for emulator calls: keep them in step.
#pragma once
#ifndef __CUDACC__
#error "mma_ptx.cuh contains device code; include it from .cu files only"
#endif
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

// A nested namespace: the PTX wrappers (cp_async_16 & co.) stay apart from the rest of detail.
namespace strata::cuda::detail::ptx {

// ---- ptx section: mma.sync ----
// D = A·B + C for a 16×16 row-major A, a 16×8 column-major B and 16×8 fp32 C/D, one warp, every
// lane executing it (.sync.aligned). With groupID g = lane / 4 and t = lane % 4, register r of a
// holds two 16-bit elements (the lower-indexed one in the low half):
//   a[0]: A[g][2t, 2t+1]   a[1]: A[g+8][2t, 2t+1]   a[2]: A[g][2t+8, 2t+9]   a[3]: A[g+8][2t+8, 2t+9]
//   b[0]: B[2t, 2t+1][g]   b[1]: B[2t+8, 2t+9][g]
//   c[0], c[1]: C[g][2t, 2t+1]   c[2], c[3]: C[g+8][2t, 2t+1]   (d likewise; d may alias c)
__device__ __forceinline__ void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                                  const float (&c)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
        "f"(c[3]));
}
__device__ __forceinline__ void mma_m16n8k16_f16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                                 const float (&c)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
        "f"(c[3]));
}
// ---- end of ptx section: mma.sync ----

// ---- ptx section: ldmatrix ----
// Loads 1, 2 or 4 8×8 matrices of 16-bit elements from shared memory, one warp, every lane
// executing it. Lane 8i + j passes the address of row j of matrix i (16 contiguous bytes,
// 16-byte aligned); only lanes below 8 × count are read (sm_80+). Register i of lane l holds,
// from matrix i, row l / 4, columns 2(l % 4) and 2(l % 4) + 1; with .trans, column l / 4, rows
// 2(l % 4) and 2(l % 4) + 1 (the matrix read column-major). The asm needs no "memory" clobber:
// the barrier that must precede a read of other lanes' writes is a compiler barrier already.
__device__ __forceinline__ void ldmatrix_x1(uint32_t (&r)[1], const void* smem_row) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], const void* smem_row) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem_row) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x1_trans(uint32_t (&r)[1], const void* smem_row) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t (&r)[2], const void* smem_row) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem_row) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
// ---- end of ptx section: ldmatrix ----

// ---- ptx section: cp.async ----
// 16 bytes global → shared without passing through registers (.cg: cached in L2 only, the tile
// is read once from global). Both addresses 16-byte aligned.
__device__ __forceinline__ void cp_async_16(void* smem_dst, const void* gmem_src) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem_src) : "memory");
}
// The same reading only the first src_bytes (0…16) bytes and zero-filling the rest: the ragged
// edge of a tile loads without a branch around the copy.
__device__ __forceinline__ void cp_async_16_zfill(void* smem_dst, const void* gmem_src, int src_bytes) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem_src), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most kPending of this thread's committed groups are in flight; a __syncthreads()
// must follow before other threads read the data.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}
// ---- end of ptx section: cp.async ----

// ---- ptx section: ex2 ----
// 2^x by the special-function unit (ex2.approx.ftz.f32: one instruction, relative error within
// 2^-22, subnormal inputs and results flushed to zero, 2^-inf = 0) where exp2f costs four with its
// range handling: the softmax of the attention kernels takes one per score.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
// ---- end of ptx section: ex2 ----

// The product for a kernel templated on its element type (__nv_bfloat16 or __half).
template <typename T>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                             const float (&c)[4]) {
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>, "mma.sync takes bf16 or fp16");
  if constexpr (std::is_same_v<T, __nv_bfloat16>) mma_m16n8k16_bf16(d, a, b, c);
  else mma_m16n8k16_f16(d, a, b, c);
}

}  // namespace strata::cuda::detail::ptx
