// Stand-in for kernels/device_helpers.cuh in the emulated build: the element conversions and
// 16-byte packs the tensor-core attention kernels use. transform_kernels.py copies it in place
// of the real header (renaming the namespace like every other kernel header).
#pragma once
#include <cuda_runtime.h>

#include "kernel_types.cuh"

namespace strata::cuda::detail {

inline float to_float(float v) { return v; }
inline float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
inline float to_float(__half v) { return __half2float(v); }

template <typename T>
T from_float(float v);
template <>
inline float from_float<float>(float v) { return v; }
template <>
inline __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
inline __half from_float<__half>(float v) { return __float2half_rn(v); }

template <typename T>
struct alignas(16) Pack {
  static constexpr int kSize = 16 / sizeof(T);
  T v[kSize];
};

}  // namespace strata::cuda::detail
