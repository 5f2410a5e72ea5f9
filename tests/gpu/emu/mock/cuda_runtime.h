// Stand-in for <cuda_runtime.h> when CUDA sources are compiled by the host compiler for the
// emulator: CUDA keywords, built-in variables, the intrinsics and 16-bit types the kernels use,
// the launch syntax, and the runtime API (memory, streams, device queries; mock_runtime.cpp).
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
#define __align__(n) alignas(n)
#define __restrict__ __restrict
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

// ---- runtime API: types ----
enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorCudartUnloading = 4,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
};
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};
// cuda_runtime.h reaches library_types.h; its element types are needed by cuBLASLt users.
enum cudaDataType_t { CUDA_R_32F = 0, CUDA_R_64F = 1, CUDA_R_16F = 2, CUDA_R_16BF = 14 };
struct EmulatedStream;
using cudaStream_t = EmulatedStream*;
constexpr unsigned cudaStreamDefault = 0x00;
constexpr unsigned cudaStreamNonBlocking = 0x01;
struct EmulatedEvent;
using cudaEvent_t = EmulatedEvent*;
constexpr unsigned cudaEventDefault = 0x00;
constexpr unsigned cudaEventDisableTiming = 0x02;
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize };

// The fields strata reads, plus the launch limits, as an H100 SXM (sm_90) reports them.
struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  size_t sharedMemPerBlock;
  size_t sharedMemPerBlockOptin;
  int regsPerBlock;
  int warpSize;
  int maxThreadsPerBlock;
  int maxThreadsDim[3];
  int maxGridSize[3];
  int major;
  int minor;
  int multiProcessorCount;
  int pciDomainID;
  int pciBusID;
  int pciDeviceID;
};

// ---- runtime API: functions (mock_runtime.cpp). Emulation is synchronous: an async call has
// finished when it returns, and every stream is already synchronized. ----
cudaError_t cudaGetLastError();   // returns and clears the last error of an API call
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorString(cudaError_t error);
const char* cudaGetErrorName(cudaError_t error);
cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaDeviceGetPCIBusId(char* bus_id, int length, int device);
cudaError_t cudaRuntimeGetVersion(int* version);
cudaError_t cudaDriverGetVersion(int* version);
cudaError_t cudaDeviceSynchronize();
// Device memory is 256-byte aligned host memory, filled with 0xFF (NaN in every float type)
// so reads of memory nobody wrote show up; copies and memsets check that their device ranges
// lie inside one live allocation and that the kind names the sides correctly.
cudaError_t cudaMalloc(void** ptr, size_t bytes);
cudaError_t cudaFree(void* ptr);
cudaError_t cudaMallocHost(void** ptr, size_t bytes);
cudaError_t cudaFreeHost(void* ptr);
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream = nullptr);
cudaError_t cudaMemset(void* ptr, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream = nullptr);
cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
// Events: every operation recorded before one has completed when the record returns, so
// synchronizing on or querying a recorded event succeeds at once; the handle is checked.
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventDestroy(cudaEvent_t event);
// Throws EmulationError for a stream that was never created or already destroyed.
void check_stream(cudaStream_t stream, const char* what);
template <typename T>
cudaError_t cudaMalloc(T** ptr, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(ptr), bytes);
}

template <typename Kernel>
cudaError_t cudaFuncSetAttribute(Kernel* kernel, cudaFuncAttribute, int value) {
  if (value < 0 || static_cast<size_t>(value) > kMaxDynamicSharedBytes) return cudaErrorInvalidValue;
  set_dynamic_shared_limit(reinterpret_cast<uintptr_t>(kernel), static_cast<size_t>(value));
  return cudaSuccess;
}

// ---- device code: synchronization, shuffles, atomics ----
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
// Threads switch only at barriers, so a read-modify-write is atomic here.
template <typename V>
inline V emulated_atomic_min(V* address, V value) {
  const V old = *address;
  if (value < old) *address = value;
  return old;
}
inline int atomicMin(int* address, int value) { return emulated_atomic_min(address, value); }
inline unsigned long long atomicMin(unsigned long long* address, unsigned long long value) {
  return emulated_atomic_min(address, value);
}

// ---- device code: IEEE single-precision arithmetic with round-to-nearest-even, never
// contracted (the emulated sources are compiled with -ffp-contract=off) ----
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }

// CUDA's math headers overload min and max for every arithmetic type.
#define STRATA_EMU_MIN_MAX(T)                 \
  inline T min(T a, T b) { return b < a ? b : a; } \
  inline T max(T a, T b) { return a < b ? b : a; }
STRATA_EMU_MIN_MAX(int)
STRATA_EMU_MIN_MAX(unsigned)
STRATA_EMU_MIN_MAX(long)
STRATA_EMU_MIN_MAX(unsigned long)
STRATA_EMU_MIN_MAX(long long)
STRATA_EMU_MIN_MAX(unsigned long long)
#undef STRATA_EMU_MIN_MAX
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }
inline double min(double a, double b) { return std::fmin(a, b); }
inline double max(double a, double b) { return std::fmax(a, b); }

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
// a library call, and the emulated kernels and mock cuBLASLt convert every fp16 element they read.
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

using namespace strata::emu::cuda_api;  // the sources use the CUDA names unqualified

namespace strata::emu {

// Whether [p, p + bytes) lies inside one live cudaMalloc allocation (the emulated device memory).
bool in_device_memory(const void* p, size_t bytes);

// kernel<<<grid, block, shared_bytes, stream>>>(args) becomes launch(kernel, grid, block,
// shared_bytes, stream)(args): arguments are copied per thread as CUDA copies them.
template <typename Kernel>
auto launch(Kernel* kernel, Dim3 grid, Dim3 block, size_t shared_bytes = 0, cuda_api::cudaStream_t stream = nullptr) {
  cuda_api::check_stream(stream, "kernel launch");
  const size_t limit = dynamic_shared_limit(reinterpret_cast<uintptr_t>(kernel));
  if (shared_bytes > limit)
    throw EmulationError("launch with " + std::to_string(shared_bytes) + " bytes of dynamic shared memory; the " +
                         "kernel allows " + std::to_string(limit) + " (see cudaFuncSetAttribute)");
  return [=](auto... args) { run_grid(grid, block, shared_bytes, [&] { kernel(args...); }); };
}

// The same for a kernel template whose arguments are deduced from the call: `call` invokes it.
// Such a kernel has no address before the call, so it gets the default dynamic shared limit.
template <typename Call>
auto launch_deduced(Call call, Dim3 grid, Dim3 block, size_t shared_bytes = 0, cuda_api::cudaStream_t stream = nullptr) {
  cuda_api::check_stream(stream, "kernel launch");
  if (shared_bytes > kDefaultDynamicSharedBytes)
    throw EmulationError("launch of a deduced kernel template with " + std::to_string(shared_bytes) +
                         " bytes of dynamic shared memory (more than the default needs cudaFuncSetAttribute)");
  return [=](auto... args) { run_grid(grid, block, shared_bytes, [&] { call(args...); }); };
}

}  // namespace strata::emu
