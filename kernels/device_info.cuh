// Device and library queries for `strata info` and device setup. Host-callable; the
// implementation is compiled by nvcc so host code needs no CUDA headers.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace strata::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int compute_major = 0;
  int compute_minor = 0;
  int multiprocessors = 0;
  size_t total_memory_bytes = 0;
  std::string pci_bus_id;
};

// Lists visible GPUs. Returns an empty list (and the driver's reason in *why) when none
// are usable; never aborts, since "no GPU" is a normal state for CPU runs.
std::vector<DeviceInfo> query_devices(std::string* why);

int runtime_version();   // e.g. 13000
int driver_version();    // 0 when no driver is installed
size_t cublaslt_version();
int nccl_version();      // 0 when built without NCCL

}  // namespace strata::cuda
