// Tensor view helpers and the host arena.
#include "core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

namespace strata {

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

Arena::~Arena() { std::free(base_); }

size_t Arena::reserve(size_t bytes) {
  if (base_) throw std::logic_error("Arena::reserve after allocate");
  const size_t offset = size_;
  size_ += (bytes + 255) / 256 * 256;
  return offset;
}

void Arena::allocate() {
  if (base_) throw std::logic_error("Arena::allocate twice");
  const size_t n = size_ ? size_ : 256;
  base_ = std::aligned_alloc(256, n);
  if (!base_) throw std::bad_alloc();
  std::memset(base_, 0, n);
}

}  // namespace strata
