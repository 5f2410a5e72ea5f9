// Counted device allocations for the CUDA backend: every cudaMalloc the backend makes goes
// through here, so "allocated" and "peak" are exact for strata's own memory (cudaMemGetInfo
// adds what the context, cuBLASLt and other processes hold).
#pragma once
#ifdef STRATA_HAVE_CUDA
#include <cstddef>

namespace strata::cuda {

// cudaMalloc of `bytes` on the current device (256-byte aligned). Out of memory is a UserError
// naming the request and what is already in use.
void* device_alloc(size_t bytes);
// cudaFree of a pointer from device_alloc (null is ignored). Usable as a Buffer release function.
void device_free(void* p);

struct DeviceMemoryCounters {
  size_t allocated_bytes = 0;       // now, through device_alloc, all devices
  size_t peak_allocated_bytes = 0;  // high-water mark since start (or the last reset)
};
DeviceMemoryCounters device_memory_counters();
void reset_device_memory_peak();

}  // namespace strata::cuda
#endif  // STRATA_HAVE_CUDA
