// Stand-in for <cuda_runtime.h> when the kernel sources are compiled by the host compiler for
// the emulator: CUDA keywords, built-in variables, the intrinsics and 16-bit types the attention
// kernels use, and the launch API, all routed to strata::emu.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "emulator.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define threadIdx (::strata::emu::thread_index())
#define blockIdx (::strata::emu::block_index())
#define blockDim (::strata::emu::block_dim())
#define gridDim (::strata::emu::grid_dim())

// The CUDA names live in their own namespace, made visible below by a using-directive: the real
// CUDA headers define some of the same inline functions (e.g. __float2half_rn), and a build
// with CUDA links both into one test binary, so these must not share their mangled names.
namespace strata::emu::cuda_api {

using dim3 = ::strata::emu::Dim3;

struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }

enum cudaError_t { cudaSuccess = 0, cudaErrorInvalidValue = 1 };
struct EmulatedStream;
using cudaStream_t = EmulatedStream*;
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize };

template <typename Kernel>
cudaError_t cudaFuncSetAttribute(Kernel* kernel, cudaFuncAttribute, int value) {
  if (value < 0 || static_cast<size_t>(value) > kMaxDynamicSharedBytes) return cudaErrorInvalidValue;
  set_dynamic_shared_limit(reinterpret_cast<uintptr_t>(kernel), static_cast<size_t>(value));
  return cudaSuccess;
}
// Launch problems are raised as EmulationError when the launch happens, so nothing is pending.
inline cudaError_t cudaGetLastError() { return cudaSuccess; }

inline void __syncthreads() { block_barrier(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  if (mask != 0xffffffffu) fail("__syncwarp() with a partial mask (the emulator models full warps only)");
  warp_barrier();
}
template <typename V>
V __shfl_xor_sync(unsigned mask, V value, int lane_xor, int width = 32) {
  static_assert(sizeof(V) <= sizeof(uint64_t), "shuffled values are at most 8 bytes");
  if (mask != 0xffffffffu || width != 32) fail("__shfl_xor_sync() over part of a warp (not emulated)");
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(V));
  bits = warp_exchange_xor(bits, lane_xor);
  std::memcpy(&value, &bits, sizeof(V));
  return value;
}

// ---- 16-bit floating-point types (cuda_bf16.h / cuda_fp16.h) ----
struct __nv_bfloat16 {
  uint16_t bits;
};
struct __half {
  _Float16 value;
};
inline float __bfloat162float(__nv_bfloat16 v) {
  const uint32_t bits = static_cast<uint32_t>(v.bits) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  if (std::isnan(f)) return __nv_bfloat16{static_cast<uint16_t>((bits >> 16) | 0x40u)};  // stays a NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even
  return __nv_bfloat16{static_cast<uint16_t>(bits >> 16)};
}
// Through a table built once by the compiler's own conversion: without F16C that conversion is
// a library call, and the WMMA mock converts every operand element of every product.
inline const float* half_to_float_table() {
  static const std::vector<float> table = [] {
    std::vector<float> values(1u << 16);
    for (uint32_t bits = 0; bits < values.size(); ++bits) {
      const uint16_t pattern = static_cast<uint16_t>(bits);
      _Float16 half;
      std::memcpy(&half, &pattern, sizeof(half));
      values[bits] = static_cast<float>(half);
    }
    return values;
  }();
  return table.data();
}
inline float __half2float(__half v) {
  uint16_t bits;
  std::memcpy(&bits, &v.value, sizeof(bits));
  return half_to_float_table()[bits];
}
inline __half __float2half_rn(float f) { return __half{static_cast<_Float16>(f)}; }

}  // namespace strata::emu::cuda_api

using namespace strata::emu::cuda_api;  // the kernel sources use the CUDA names unqualified

namespace strata::emu {

// kernel<<<grid, block, shared_bytes, stream>>>(args) becomes launch(kernel, grid, block,
// shared_bytes, stream)(args): arguments are copied per thread as CUDA copies them.
template <typename Kernel>
auto launch(Kernel* kernel, Dim3 grid, Dim3 block, size_t shared_bytes = 0, cuda_api::cudaStream_t = nullptr) {
  const size_t limit = dynamic_shared_limit(reinterpret_cast<uintptr_t>(kernel));
  if (shared_bytes > limit)
    throw EmulationError("launch with " + std::to_string(shared_bytes) + " bytes of dynamic shared memory; the " +
                         "kernel allows " + std::to_string(limit) + " (see cudaFuncSetAttribute)");
  return [=](auto... args) { run_grid(grid, block, shared_bytes, [&] { kernel(args...); }); };
}

}  // namespace strata::emu
