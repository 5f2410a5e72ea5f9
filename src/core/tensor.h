// Tensor: a non-owning view (pointer, dtype, shape, device). Memory belongs to buffers
// owned by the model or engine; views are cheap to copy and never free anything.
#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/dtype.h"

namespace strata {

// Where a tensor's memory lives. Simulated is host memory that only its backend may touch
// (the guarded CPU backend, see backend.h): code outside the backend must treat it exactly like
// GPU memory, which lets CPU-only tests prove that the training path never dereferences
// device memory on the host.
enum class Device : uint8_t { CPU, CUDA, Simulated };
const char* device_name(Device device);  // "cpu", "cuda", "simulated"


struct Tensor {
  void* data = nullptr;
  DType dtype = DType::F32;
  Device device = Device::CPU;
  int ndim = 0;
  std::array<int64_t, 4> shape{};

  Tensor() = default;
  Tensor(void* data_, DType dtype_, std::initializer_list<int64_t> dims, Device device_ = Device::CPU);

  int64_t numel() const;
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  int64_t dim(int i) const { return shape[static_cast<size_t>(i < 0 ? ndim + i : i)]; }
  bool defined() const { return data != nullptr; }
  std::string shape_string() const;  // e.g. "(4, 64, 768)"

  template <typename T>
  T* as() const { return static_cast<T*>(data); }
  float* f32() const;  // throws std::logic_error unless dtype is F32
};

}  // namespace strata
