// Device-side helpers shared by the kernel .cu files: fp32 load/store of every element type,
// 16-byte packs and raw 16-byte words, fixed-order warp/block reductions, dtype dispatch and the two-pass column
// reduction. Device code: include from .cu files only (the public .cuh files stay host-safe).
#pragma once
#ifndef __CUDACC__
#error "device_helpers.cuh contains device code; include it from .cu files only"
#endif
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstring>
#include <type_traits>

#include "kernel_types.cuh"

namespace strata::cuda::detail {

// ---- element conversions (round to nearest even on store) ----
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }

// Run-time typed access for small tensors whose dtype varies independently of the hot data
// (gradient accumulators, saved statistics); the branch is uniform across the grid.
__device__ __forceinline__ float load_any(const void* p, ElemType type, int64_t i) {
  switch (type) {
    case ElemType::BF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case ElemType::F16: return __half2float(static_cast<const __half*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}
__device__ __forceinline__ void store_any(void* p, ElemType type, int64_t i, float v) {
  switch (type) {
    case ElemType::BF16: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v); break;
    case ElemType::F16: static_cast<__half*>(p)[i] = __float2half_rn(v); break;
    default: static_cast<float*>(p)[i] = v; break;
  }
}

// Reports an out-of-range id at `row` (see BadIdFlag): the smallest row, with its id, wins. A
// null flag (ids the host already checked) reports nothing.
__device__ __forceinline__ void report_bad_id(BadIdFlag* flag, int64_t row, int32_t id) {
  if (flag) atomicMin(flag, (static_cast<BadIdFlag>(row) << 32) | static_cast<uint32_t>(id));
}

// 16 bytes of T, loaded and stored with one vector instruction.
template <typename T>
struct alignas(16) Pack {
  static constexpr int kSize = 16 / sizeof(T);
  T v[kSize];
};

// ---- fixed-order reductions (no atomics, so results are reproducible) ----
template <typename V>
__device__ __forceinline__ V warp_sum(V v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// reduce(v) over a block of kThreads (a multiple of 32, ≤ 1024) in a fixed tree: warp_reduce
// within each warp, then the warps' results through `scratch` (at least 32 values, reusable
// after the call returns) and warp_reduce again; every thread gets the result.
template <int kThreads, typename V, typename WarpReduce>
__device__ V block_reduce(V v, V* scratch, V identity, WarpReduce warp_reduce) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "block size");
  constexpr int kWarps = kThreads / 32;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_reduce(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  V total = lane < kWarps ? scratch[lane] : identity;
  total = warp_reduce(total);
  __syncthreads();
  return total;
}
template <int kThreads, typename V>
__device__ V block_sum(V v, V* scratch) {
  return block_reduce<kThreads>(v, scratch, V(0), [](V x) { return warp_sum(x); });
}

// ---- raw 16-byte words ----
// A 16-byte word of T held as a plain uint4 (an array of 16-bit class types could go to local
// memory, where registers hold the uint4): part i of it, element e exactly widened to fp32, the
// bits of one value rounded to T, and a word made of kPerWord fp32 values rounded to T.
template <typename T>
constexpr int kPerWord = static_cast<int>(16 / sizeof(T));

__device__ __forceinline__ uint32_t part_of(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

template <typename T>
__device__ __forceinline__ float element_of(const uint4& v, int e) {
  if constexpr (sizeof(T) == 4 || std::is_same_v<T, __nv_bfloat16>) {
    // fp32 as is; bf16 is fp32's upper half, so a shift or a mask widens it.
    const uint32_t part = part_of(v, sizeof(T) == 4 ? e : e / 2);
    const uint32_t bits = sizeof(T) == 4 ? part : (e & 1) ? (part & 0xffff0000u) : (part << 16);
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
  } else {
    const auto bits = static_cast<uint16_t>(part_of(v, e / 2) >> (16 * (e & 1)));
    T h;
    memcpy(&h, &bits, sizeof(h));
    return to_float(h);
  }
}

template <typename T>
__device__ __forceinline__ uint32_t bits_of(float f) {
  const T v = from_float<T>(f);
  if constexpr (sizeof(T) == 4) {
    uint32_t bits;
    memcpy(&bits, &v, sizeof(bits));
    return bits;
  } else {
    uint16_t bits;
    memcpy(&bits, &v, sizeof(bits));
    return bits;
  }
}

template <typename T>
__device__ __forceinline__ uint4 word_of(const float (&f)[kPerWord<T>]) {
  uint32_t p[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (sizeof(T) == 4) {
      p[i] = bits_of<T>(f[i]);
    } else {
      p[i] = bits_of<T>(f[2 * i]) | (bits_of<T>(f[2 * i + 1]) << 16);
    }
  }
  return make_uint4(p[0], p[1], p[2], p[3]);
}

// ---- dtype dispatch ----
template <typename T>
struct TypeTag {
  using type = T;
};

// Calls fn(TypeTag<T>{}) with T the C++ type of `type`.
template <typename Fn>
auto dispatch_float(ElemType type, Fn&& fn) {
  switch (type) {
    case ElemType::BF16: return fn(TypeTag<__nv_bfloat16>{});
    case ElemType::F16: return fn(TypeTag<__half>{});
    default: return fn(TypeTag<float>{});
  }
}

// ---- two-pass deterministic column reduction ----
// Pass 1: block (col tile, chunk) of kColumnTile × kColumnRowLanes threads accumulates, in
// double, `Term::kOutputs` sums per column over its chunk of rows; lanes are combined in a
// fixed order and written to partials[(o · chunks + chunk) · cols + col].
template <typename Term>
__global__ void column_partials_kernel(Term term, int64_t rows, int64_t cols, int64_t rows_per_chunk,
                                       double* partials) {
  constexpr int kOut = Term::kOutputs;
  __shared__ double lanes[kColumnRowLanes][kColumnTile][kOut];
  const int64_t col = blockIdx.x * static_cast<int64_t>(kColumnTile) + threadIdx.x;
  const int64_t chunk = blockIdx.y;
  const int64_t row_begin = chunk * rows_per_chunk;
  const int64_t row_end = min(rows, row_begin + rows_per_chunk);
  double acc[kOut];
#pragma unroll
  for (int o = 0; o < kOut; ++o) acc[o] = 0.0;
  if (col < cols) {
    for (int64_t r = row_begin + threadIdx.y; r < row_end; r += kColumnRowLanes) term(r, col, acc);
  }
#pragma unroll
  for (int o = 0; o < kOut; ++o) lanes[threadIdx.y][threadIdx.x][o] = acc[o];
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    const int64_t chunks = gridDim.y;
#pragma unroll
    for (int o = 0; o < kOut; ++o) {
      double sum = 0.0;
      for (int lane = 0; lane < kColumnRowLanes; ++lane) sum += lanes[lane][threadIdx.x][o];
      partials[(o * chunks + chunk) * cols + col] = sum;
    }
  }
}

// Pass 2: out_o[col] = float(out_o[col] + Σ_chunks partials), chunks in order, one rounding
// (the CPU backend's add_column_sums does the same).
template <int kOut>
__global__ void column_finish_kernel(const double* partials, int64_t chunks, int64_t cols, void* out0,
                                     void* out1, ElemType out0_type, ElemType out1_type) {
  const int64_t col = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (col >= cols) return;
#pragma unroll
  for (int o = 0; o < kOut; ++o) {
    double sum = 0.0;
    for (int64_t c = 0; c < chunks; ++c) sum += partials[(o * chunks + c) * cols + col];
    void* out = o == 0 ? out0 : out1;
    const ElemType type = o == 0 ? out0_type : out1_type;
    if (out) store_any(out, type, col, static_cast<float>(static_cast<double>(load_any(out, type, col)) + sum));
  }
}

// Launches both passes for `term` over a (rows, cols) problem; partials must hold
// column_reduce_workspace_bytes(rows, cols, Term::kOutputs).
template <typename Term>
cudaError_t launch_column_reduce(const Term& term, int64_t rows, int64_t cols, double* partials, void* out0,
                                 ElemType out0_type, void* out1, ElemType out1_type, cudaStream_t stream) {
  if (cols <= 0) return cudaSuccess;
  const ColumnReduceShape shape = column_reduce_shape(rows, cols);
  const dim3 block(kColumnTile, kColumnRowLanes);
  const dim3 grid(static_cast<unsigned>(shape.col_tiles), static_cast<unsigned>(shape.chunks));
  column_partials_kernel<<<grid, block, 0, stream>>>(term, rows, cols, shape.rows_per_chunk, partials);
  const int64_t blocks = ceil_div(cols, 256);
  column_finish_kernel<Term::kOutputs><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(
      partials, shape.chunks, cols, out0, out1, out0_type, out1_type);
  return cudaGetLastError();
}

}  // namespace strata::cuda::detail
