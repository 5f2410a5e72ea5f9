// Helpers of the GPU op tests: the shared CUDA backend, tensors mirrored on the CPU and the GPU
// backend with identical (dtype-rounded) contents, and a relative-error comparison.
#pragma once
#include "catch_compat.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "tolerances.h"
#include "ulp_compare.h"

namespace strata::gpu_test {

// The backends every test uses; created once by the test main after it found a GPU.
cuda::CudaBackend& gpu();
Backend& cpu();

// One logical tensor held twice: in host memory for the CPU backend and in device memory for
// the CUDA backend.
class Mirrored {
 public:
  Mirrored(std::initializer_list<int64_t> dims, DType dtype);
  Mirrored(const Mirrored&) = delete;
  Mirrored& operator=(const Mirrored&) = delete;

  // Normal(0, scale) values (or uniform integers for I32 in [0, int_range)), rounded to the
  // dtype, written to both copies.
  void randomize(uint64_t seed, float scale = 1.0f, int32_t int_range = 0);
  void set(const std::vector<float>& values);
  void set_ints(const std::vector<int32_t>& values);
  // Copies the CPU copy's contents to the GPU copy (after a CPU op changed only the CPU side).
  void sync_to_gpu();
  std::vector<float> cpu_values() const;
  std::vector<float> gpu_values() const;
  std::vector<uint8_t> gpu_bytes() const;
  int64_t numel() const { return cpu_tensor.numel(); }

  Tensor cpu_tensor;
  Tensor gpu_tensor;

 private:
  std::vector<uint8_t> host_;
  Buffer device_;
};

// max_i |actual_i − expected_i| / max(|expected_i|, mean |expected|) ≤ tol. Judging tiny
// elements against the tensor's typical magnitude keeps cancellation near zero from reading as
// a large relative error. Fails when expected is all zeros (a test must never compare zeros).
void check_relative(const std::vector<float>& actual, const std::vector<float>& expected, double tol,
                    const std::string& what);

// A tensor of `dims` placed one element into `storage` (either copy of a Mirrored), so its data
// is not 16-byte aligned.
inline Tensor shifted_view(const Tensor& storage, std::initializer_list<int64_t> dims) {
  return Tensor(static_cast<char*>(storage.data) + dtype_size(storage.dtype), storage.dtype, dims, storage.device);
}

// worst_ulp_error(actual, expected, format) ≤ max_ulps, the worst printed on stdout either way
// (the figures a GPU run records). Fails when expected is all zeros.
void check_ulps(const std::vector<float>& actual, const std::vector<float>& expected, DType format, double max_ulps,
                const std::string& what);

// An op's output in `dtype`: fp32 within 1e-5 relative, bf16 and fp16 within max_ulps.
void check_output(const std::vector<float>& actual, const std::vector<float>& expected, DType dtype, double max_ulps,
                  const std::string& what);

}  // namespace strata::gpu_test
