// Argument checks and scalar derivations for the CUDA backend (see cuda_args.h).
#ifdef STRATA_HAVE_CUDA
#include "backend/cuda/cuda_args.h"

#include <cmath>
#include <stdexcept>

#include "attention.cuh"

namespace strata::cuda {

void throw_target_error(int64_t target, int64_t row, int64_t vocab) {
  throw UserError("target token id " + std::to_string(target) + " at row " + std::to_string(row) +
                  " is outside the vocabulary [0, " + std::to_string(vocab) +
                  "): the data was encoded with a larger vocabulary than model.vocab_size");
}

void throw_token_error(int64_t id, int64_t row, int64_t seq, int64_t vocab) {
  throw UserError("token id " + std::to_string(id) + " at batch row " + std::to_string(row / seq) + ", position " +
                  std::to_string(row % seq) + " is outside the embedding table [0, " + std::to_string(vocab) +
                  "): the data was encoded with a larger vocabulary than model.vocab_size");
}

void require_device(const char* op, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    if (t->defined()) require(t->device == Device::CUDA, op, "a tensor is not in CUDA device memory");
  }
}

ElemType elem_type_of(DType dtype, const char* op, const char* what) {
  switch (dtype) {
    case DType::F32: return ElemType::F32;
    case DType::BF16: return ElemType::BF16;
    case DType::F16: return ElemType::F16;
    default:
      throw std::invalid_argument(std::string(op) + ": " + what + " must be a float tensor, got " +
                                  dtype_name(dtype));
  }
}

ElemType elem_type_of(const Tensor& t, const char* op, const char* what) { return elem_type_of(t.dtype, op, what); }

ElemType common_elem_type(const char* op, std::initializer_list<const Tensor*> tensors) {
  const Tensor* first = *tensors.begin();
  const ElemType type = elem_type_of(*first, op, "tensor");
  for (const Tensor* t : tensors) {
    if (!t->defined()) continue;
    require(t->dtype == first->dtype, op,
            std::string("the CUDA backend needs these tensors to share one dtype, got ") + dtype_name(first->dtype) +
                " and " + dtype_name(t->dtype));
  }
  return type;
}

float* f32_or_null(const Tensor& t, const char* op, const char* what) {
  if (!t.defined()) return nullptr;
  require(t.dtype == DType::F32, op, std::string(what) + " must be F32 on the CUDA backend, got " + dtype_name(t.dtype));
  return t.as<float>();
}

AdamWScalars adamw_scalars(const AdamWArgs& args) {
  // The CPU backend's roundings (torch derives these in Python, in double).
  const AdamWFloats f = adamw_floats(args);
  AdamWScalars s;
  s.decay = f.decay;
  s.l2 = f.l2;
  s.beta1 = f.beta1;
  s.one_minus_beta1 = f.one_minus_beta1;
  s.beta2 = f.beta2;
  s.one_minus_beta2 = f.one_minus_beta2;
  s.step_size = f.step_size;
  s.bc2_sqrt = f.bc2_sqrt;
  s.eps = f.eps;
  s.grad_scale = f.grad_scale;
  s.decoupled = args.decoupled;
  return s;
}

AttentionShape attention_shape(const char* op, const Tensor& qkv, int n_head) {
  require(qkv.ndim == 3 && qkv.dim(2) % 3 == 0, op, "qkv must be (B, T, 3C), got " + qkv.shape_string());
  const int64_t c = qkv.dim(2) / 3;
  require(n_head > 0 && c % n_head == 0, op,
          std::to_string(c) + " channels do not split into " + std::to_string(n_head) + " heads");
  const int64_t head_dim = c / n_head;
  require(attention_head_dim_supported(head_dim), op,
          "head_dim " + std::to_string(head_dim) + " is not supported by the CUDA kernels (a multiple of 16 up to 128)");
  return {qkv.dim(0), qkv.dim(1), c, n_head, head_dim};
}

}  // namespace strata::cuda
#endif  // STRATA_HAVE_CUDA
