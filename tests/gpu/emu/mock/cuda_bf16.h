// Stand-in for <cuda_bf16.h> in the emulated build: __nv_bfloat16 and its conversions live in the mock
// cuda_runtime.h, which real CUDA code includes alongside this header anyway.
#pragma once
#include "cuda_runtime.h"
