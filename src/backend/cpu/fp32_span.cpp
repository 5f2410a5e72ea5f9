// Load/store of BF16/F16 tensors through an fp32 scratch copy (see fp32_span.h).
#include "backend/cpu/fp32_span.h"

#include <stdexcept>
#include <string>

namespace strata::cpu {

Fp32Span::Fp32Span(const Tensor& tensor, Access access) : tensor_(tensor), access_(access) {
  if (!tensor.defined()) return;
  if (tensor.device != Device::CPU) throw std::invalid_argument("cpu backend: tensor is not in host memory");
  size_ = tensor.numel();
  switch (tensor.dtype) {
    case DType::F32:
      data_ = static_cast<float*>(tensor.data);
      return;
    case DType::BF16:
    case DType::F16:
      scratch_.resize(static_cast<size_t>(size_));
      if (access != Access::Write) {
        convert_elements(tensor.data, tensor.dtype, scratch_.data(), DType::F32, static_cast<size_t>(size_));
      }
      data_ = scratch_.data();
      return;
    default:
      throw std::invalid_argument(std::string("cpu backend: expected a float tensor, got ") +
                                  dtype_name(tensor.dtype));
  }
}

Fp32Span::~Fp32Span() {
  if (!scratch_.empty() && access_ != Access::Read) {
    convert_elements(scratch_.data(), DType::F32, tensor_.data, tensor_.dtype, scratch_.size());
  }
}

}  // namespace strata::cpu
