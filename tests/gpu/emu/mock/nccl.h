// Stand-in for <nccl.h> in the emulated build: only the version query kernels/device_info.cu
// makes when a CUDA build found NCCL (collectives live in src/comm, which is not emulated).
#pragma once
#include "cuda_runtime.h"

namespace strata::emu::cuda_api {

enum ncclResult_t { ncclSuccess = 0, ncclInvalidArgument = 4 };
inline ncclResult_t ncclGetVersion(int* version) {
  if (!version) return ncclInvalidArgument;
  *version = 0;  // no NCCL behind the emulator
  return ncclSuccess;
}

}  // namespace strata::emu::cuda_api
