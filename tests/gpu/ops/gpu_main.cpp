// Test main of gpu_ops: exits 77 (ctest's SKIP_RETURN_CODE) when no usable GPU is present, so
// the GPU tier shows as skipped rather than passed on CPU-only machines.
#define STRATA_CATCH_SESSION
#include "catch_compat.h"

#include <cuda_runtime.h>

#include <cstdio>
#include <memory>

#include "gpu_test_util.h"

namespace strata::gpu_test {
namespace {
std::unique_ptr<cuda::CudaBackend> g_gpu;
std::unique_ptr<Backend> g_cpu;
}  // namespace

cuda::CudaBackend& gpu() { return *g_gpu; }
Backend& cpu() { return *g_cpu; }

}  // namespace strata::gpu_test

int main(int argc, char** argv) {
  constexpr int kSkip = 77;
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess || count == 0) {
    std::printf("gpu_ops: skipped, no usable GPU (%s)\n", rc != cudaSuccess ? cudaGetErrorString(rc) : "0 devices");
    return kSkip;
  }
  strata::gpu_test::g_gpu = std::make_unique<strata::cuda::CudaBackend>(0);
  strata::gpu_test::g_cpu = strata::make_cpu_backend();
  // On stderr: test discovery (catch_discover_tests, every Catch2 version) reads stdout.
  std::fprintf(stderr, "gpu_ops: %s\n", strata::gpu_test::g_gpu->name().c_str());
  const int result = Catch::Session().run(argc, argv);
  strata::gpu_test::g_gpu.reset();
  return result;
}
