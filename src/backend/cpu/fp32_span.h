// Mixed-precision emulation for the CPU backend, in one place: an op asks for fp32 access to
// each float tensor; F32 tensors are used in place, BF16/F16 ones go through an fp32 scratch
// copy that is loaded on entry and rounded back into the tensor when the span goes away.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace strata::cpu {

enum class Access { Read, Write, ReadWrite };

class Fp32Span {
 public:
  // An undefined tensor gives a null span (for optional arguments).
  Fp32Span(const Tensor& tensor, Access access);
  Fp32Span(const Fp32Span&) = delete;
  Fp32Span& operator=(const Fp32Span&) = delete;
  ~Fp32Span();

  float* data() const { return data_; }
  int64_t size() const { return size_; }
  bool defined() const { return data_ != nullptr; }
  float& operator[](int64_t i) const { return data_[i]; }

 private:
  Tensor tensor_;
  Access access_;
  std::vector<float> scratch_;
  float* data_ = nullptr;
  int64_t size_ = 0;
};

}  // namespace strata::cpu
