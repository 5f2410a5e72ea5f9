// The CUDA runtime API of the emulator (mock/cuda_runtime.h): one device that describes itself
// as an H100 (sm_90) on the CPU emulator, device memory as registered host allocations, and
// streams on which every operation has completed by the time the call returns.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>

namespace strata::emu {
namespace {

constexpr size_t kDeviceBytes = size_t{80} << 30;       // an H100's 80 GiB
constexpr size_t kContextBytes = size_t{512} << 20;     // what a CUDA context itself holds
constexpr unsigned char kUnwrittenByte = 0xFF;          // NaN in every float type

struct Runtime {
  std::mutex mutex;
  std::map<uintptr_t, size_t> device;  // base → bytes of each live cudaMalloc
  std::set<void*> pinned;
  std::set<cuda_api::EmulatedStream*> streams;
  std::set<cuda_api::EmulatedEvent*> events;
  size_t device_allocated = 0;
  int current_device = 0;
};

Runtime& runtime() {
  static Runtime* r = new Runtime();  // never destroyed: buffers may be freed during exit
  return *r;
}

thread_local cuda_api::cudaError_t last_error = cuda_api::cudaSuccess;

cuda_api::cudaError_t record(cuda_api::cudaError_t rc) {
  if (rc != cuda_api::cudaSuccess) last_error = rc;
  return rc;
}

// The allocation holding p, or end(); the caller holds the mutex.
std::map<uintptr_t, size_t>::const_iterator allocation_of(const Runtime& r, const void* p) {
  const auto at = reinterpret_cast<uintptr_t>(p);
  auto it = r.device.upper_bound(at);
  if (it == r.device.begin()) return r.device.end();
  --it;
  return at - it->first < std::max<size_t>(it->second, 1) ? it : r.device.end();
}

bool device_range_locked(const Runtime& r, const void* p, size_t bytes) {
  const auto it = allocation_of(r, p);
  if (it == r.device.end()) return false;
  return reinterpret_cast<uintptr_t>(p) - it->first + bytes <= it->second;
}

bool is_device_pointer(const void* p) {
  Runtime& r = runtime();
  std::lock_guard<std::mutex> lock(r.mutex);
  return allocation_of(r, p) != r.device.end();
}

size_t round_up_256(size_t bytes) { return (std::max<size_t>(bytes, 1) + 255) / 256 * 256; }

// A side of a copy or memset: device memory must lie inside one allocation; host memory must
// not be device memory when the kind says host.
bool side_ok(const void* p, size_t bytes, bool device_side) {
  if (device_side) return in_device_memory(p, bytes);
  return !is_device_pointer(p);
}

}  // namespace

bool in_device_memory(const void* p, size_t bytes) {
  Runtime& r = runtime();
  std::lock_guard<std::mutex> lock(r.mutex);
  return device_range_locked(r, p, bytes);
}

namespace cuda_api {

cudaError_t cudaGetLastError() {
  const cudaError_t rc = last_error;
  last_error = cudaSuccess;
  return rc;
}

cudaError_t cudaPeekAtLastError() { return last_error; }

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorCudartUnloading: return "driver shutting down";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
  }
  return "unrecognized error code";
}

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorCudartUnloading: return "cudaErrorCudartUnloading";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
  }
  return "cudaErrorUnknown";
}

cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return record(cudaErrorInvalidValue);
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device != 0) return record(cudaErrorInvalidDevice);
  runtime().current_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (!device) return record(cudaErrorInvalidValue);
  *device = runtime().current_device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (!prop) return record(cudaErrorInvalidValue);
  if (device != 0) return record(cudaErrorInvalidDevice);
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof(prop->name), "strata CPU emulator (sm_90, H100-like)");
  prop->totalGlobalMem = kDeviceBytes;
  prop->sharedMemPerBlock = kDefaultDynamicSharedBytes;
  prop->sharedMemPerBlockOptin = kMaxDynamicSharedBytes;
  prop->regsPerBlock = 65536;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = 1024;
  prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 0x7fffffff;
  prop->maxGridSize[1] = 65535;
  prop->maxGridSize[2] = 65535;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 132;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char* bus_id, int length, int device) {
  if (!bus_id || length <= 0) return record(cudaErrorInvalidValue);
  if (device != 0) return record(cudaErrorInvalidDevice);
  std::snprintf(bus_id, static_cast<size_t>(length), "0000:00:00.0");
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* version) {
  if (!version) return record(cudaErrorInvalidValue);
  *version = 13000;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* version) {
  if (!version) return record(cudaErrorInvalidValue);
  *version = 13000;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  if (!ptr) return record(cudaErrorInvalidValue);
  Runtime& r = runtime();
  std::lock_guard<std::mutex> lock(r.mutex);
  const size_t rounded = round_up_256(bytes);
  if (r.device_allocated + rounded > kDeviceBytes - kContextBytes) return record(cudaErrorMemoryAllocation);
  void* p = std::aligned_alloc(256, rounded);
  if (!p) return record(cudaErrorMemoryAllocation);
  std::memset(p, kUnwrittenByte, rounded);
  r.device[reinterpret_cast<uintptr_t>(p)] = bytes;
  r.device_allocated += rounded;
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  if (!ptr) return cudaSuccess;
  Runtime& r = runtime();
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto it = r.device.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == r.device.end()) return record(cudaErrorInvalidValue);
  r.device_allocated -= round_up_256(it->second);
  r.device.erase(it);
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, size_t bytes) {
  if (!ptr) return record(cudaErrorInvalidValue);
  void* p = std::aligned_alloc(256, round_up_256(bytes));
  if (!p) return record(cudaErrorMemoryAllocation);
  Runtime& r = runtime();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.pinned.insert(p);
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* ptr) {
  if (!ptr) return cudaSuccess;
  Runtime& r = runtime();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.pinned.erase(ptr) == 0) return record(cudaErrorInvalidValue);
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  if (!free_bytes || !total_bytes) return record(cudaErrorInvalidValue);
  Runtime& r = runtime();
  std::lock_guard<std::mutex> lock(r.mutex);
  *total_bytes = kDeviceBytes;
  *free_bytes = kDeviceBytes - kContextBytes - r.device_allocated;
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (bytes == 0) return cudaSuccess;
  if (!dst || !src) return record(cudaErrorInvalidValue);
  bool ok = true;
  switch (kind) {
    case cudaMemcpyHostToHost: ok = side_ok(dst, bytes, false) && side_ok(src, bytes, false); break;
    case cudaMemcpyHostToDevice: ok = side_ok(dst, bytes, true) && side_ok(src, bytes, false); break;
    case cudaMemcpyDeviceToHost: ok = side_ok(dst, bytes, false) && side_ok(src, bytes, true); break;
    case cudaMemcpyDeviceToDevice: ok = side_ok(dst, bytes, true) && side_ok(src, bytes, true); break;
    case cudaMemcpyDefault:  // unified addressing: each side is whatever it points into
      ok = (!is_device_pointer(dst) || in_device_memory(dst, bytes)) &&
           (!is_device_pointer(src) || in_device_memory(src, bytes));
      break;
    default: ok = false;
  }
  if (!ok) return record(cudaErrorInvalidValue);
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  check_stream(stream, "cudaMemcpyAsync");
  return cudaMemcpy(dst, src, bytes, kind);
}

cudaError_t cudaMemset(void* ptr, int value, size_t bytes) {
  if (bytes == 0) return cudaSuccess;
  if (!in_device_memory(ptr, bytes)) return record(cudaErrorInvalidValue);
  std::memset(ptr, value, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream) {
  check_stream(stream, "cudaMemsetAsync");
  return cudaMemset(ptr, value, bytes);
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  if (!stream || (flags & ~cudaStreamNonBlocking) != 0) return record(cudaErrorInvalidValue);
  // One byte per stream: the handle only has to be unique and checkable.
  auto* handle = reinterpret_cast<EmulatedStream*>(new char(0));
  Runtime& r = runtime();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.streams.insert(handle);
  *stream = handle;
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  Runtime& r = runtime();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!stream || r.streams.erase(stream) == 0) return record(cudaErrorInvalidResourceHandle);
  delete reinterpret_cast<char*>(stream);
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  check_stream(stream, "cudaStreamSynchronize");
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  if (!event || (flags & ~cudaEventDisableTiming) != 0) return record(cudaErrorInvalidValue);
  auto* handle = reinterpret_cast<EmulatedEvent*>(new char(0));
  Runtime& r = runtime();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.events.insert(handle);
  *event = handle;
  return cudaSuccess;
}

namespace {
cudaError_t check_event(cudaEvent_t event) {
  Runtime& r = runtime();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.events.count(event) ? cudaSuccess : record(cudaErrorInvalidResourceHandle);
}
}  // namespace

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  check_stream(stream, "cudaEventRecord");
  return check_event(event);
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) { return check_event(event); }

cudaError_t cudaEventQuery(cudaEvent_t event) { return check_event(event); }

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  Runtime& r = runtime();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!event || r.events.erase(event) == 0) return record(cudaErrorInvalidResourceHandle);
  delete reinterpret_cast<char*>(event);
  return cudaSuccess;
}

void check_stream(cudaStream_t stream, const char* what) {
  if (!stream) return;  // the legacy default stream
  Runtime& r = runtime();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.streams.count(stream) == 0)
    throw EmulationError(std::string(what) + " on a stream that was never created or was destroyed");
}

}  // namespace cuda_api
}  // namespace strata::emu
