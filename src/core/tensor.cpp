// Tensor view helpers.
#include "core/tensor.h"

#include <stdexcept>

namespace strata {

const char* device_name(Device device) {
  switch (device) {
    case Device::CPU: return "cpu";
    case Device::CUDA: return "cuda";
    case Device::Simulated: return "simulated";
  }
  return "unknown";
}

Tensor::Tensor(void* data_, DType dtype_, std::initializer_list<int64_t> dims, Device device_)
    : data(data_), dtype(dtype_), device(device_), ndim(static_cast<int>(dims.size())) {
  if (dims.size() > shape.size()) throw std::logic_error("Tensor: at most 4 dimensions");
  size_t i = 0;
  for (int64_t d : dims) shape[i++] = d;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[static_cast<size_t>(i)];
  return n;
}

std::string Tensor::shape_string() const {
  std::string s = "(";
  for (int i = 0; i < ndim; ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[static_cast<size_t>(i)]);
  }
  return s + ")";
}

float* Tensor::f32() const {
  if (dtype != DType::F32) throw std::logic_error("Tensor::f32 on a " + std::string(dtype_name(dtype)) + " tensor");
  return static_cast<float*>(data);
}

}  // namespace strata
