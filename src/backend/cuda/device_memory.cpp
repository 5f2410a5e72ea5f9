// Counted cudaMalloc/cudaFree (see device_memory.h). Sizes are kept per pointer because a
// Buffer's release function receives only the pointer.
#ifdef STRATA_HAVE_CUDA
#include "backend/cuda/device_memory.h"

#include <cuda_runtime.h>

#include <mutex>
#include <string>
#include <unordered_map>

#include "core/check.h"
#include "core/error.h"

namespace strata::cuda {
namespace {

struct Registry {
  std::mutex mutex;
  std::unordered_map<void*, size_t> sizes;
  size_t allocated = 0;
  size_t peak = 0;
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: buffers may be freed during exit
  return *r;
}

std::string mib(size_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

}  // namespace

void* device_alloc(size_t bytes) {
  void* p = nullptr;
  const cudaError_t rc = cudaMalloc(&p, bytes ? bytes : 1);
  if (rc == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear it, the process goes on to report the error
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    throw UserError("CUDA out of memory: allocating " + mib(bytes) + " with " + mib(device_memory_counters().allocated_bytes) +
                    " already allocated by strata and " + mib(free_bytes) + " of " + mib(total_bytes) +
                    " free on the device; lower train_micro_batch_size_per_gpu, set model.recompute "
                    "or a higher zero_optimization.stage");
  }
  CUDA_CHECK(rc);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.sizes[p] = bytes;
  r.allocated += bytes;
  if (r.allocated > r.peak) r.peak = r.allocated;
  return p;
}

void device_free(void* p) {
  if (!p) return;
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    auto it = r.sizes.find(p);
    if (it != r.sizes.end()) {
      r.allocated -= it->second;
      r.sizes.erase(it);
    }
  }
  const cudaError_t rc = cudaFree(p);
  // At process exit the runtime may already be gone; the memory goes with it.
  if (rc != cudaSuccess && rc != cudaErrorCudartUnloading) CUDA_CHECK(rc);
}

DeviceMemoryCounters device_memory_counters() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return {r.allocated, r.peak};
}

void reset_device_memory_peak() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.peak = r.allocated;
}

}  // namespace strata::cuda
#endif  // STRATA_HAVE_CUDA
