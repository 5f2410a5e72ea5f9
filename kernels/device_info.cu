// Device and library version queries used by `strata info`.
#include <cublasLt.h>
#include <cuda_runtime.h>
#ifdef STRATA_HAVE_NCCL
#include <nccl.h>
#endif

#include "device_info.cuh"

namespace strata::cuda {

std::vector<DeviceInfo> query_devices(std::string* why) {
  std::vector<DeviceInfo> devices;
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess) {
    if (why) *why = cudaGetErrorString(rc);
    cudaGetLastError();  // clear the sticky error so later queries start clean
    return devices;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    DeviceInfo d;
    d.index = i;
    d.name = prop.name;
    d.compute_major = prop.major;
    d.compute_minor = prop.minor;
    d.multiprocessors = prop.multiProcessorCount;
    d.total_memory_bytes = prop.totalGlobalMem;
    char bus[32] = {0};
    if (cudaDeviceGetPCIBusId(bus, sizeof(bus), i) == cudaSuccess) d.pci_bus_id = bus;
    devices.push_back(d);
  }
  return devices;
}

int runtime_version() {
  int v = 0;
  cudaRuntimeGetVersion(&v);
  return v;
}

int driver_version() {
  int v = 0;
  if (cudaDriverGetVersion(&v) != cudaSuccess) return 0;
  return v;
}

size_t cublaslt_version() { return cublasLtGetVersion(); }

int nccl_version() {
#ifdef STRATA_HAVE_NCCL
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return 0;
  return v;
#else
  return 0;
#endif
}

}  // namespace strata::cuda
