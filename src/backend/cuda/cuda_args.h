// Pure helpers of the CUDA backend: tensor checks, dtype mapping and host-side scalar
// derivations. No CUDA calls happen here, so all of it is unit-tested on machines without a GPU.
#pragma once
#ifdef STRATA_HAVE_CUDA
#include <initializer_list>
#include <string>

#include "adamw.cuh"
#include "backend/backend.h"
#include "kernel_types.cuh"

namespace strata::cuda {

// Every defined tensor lives in device memory.
void require_device(const char* op, std::initializer_list<const Tensor*> tensors);
// The kernels' element type for a float dtype; throws for integer dtypes.
ElemType elem_type_of(DType dtype, const char* op, const char* what);
ElemType elem_type_of(const Tensor& t, const char* op, const char* what);
// Every defined tensor has the dtype of the first; returns its element type.
ElemType common_elem_type(const char* op, std::initializer_list<const Tensor*> tensors);
// The F32 tensor's data, or nullptr when undefined; throws when defined with another dtype.
float* f32_or_null(const Tensor& t, const char* op, const char* what);

// The UserError for a target id outside [0, vocab) at `row` (as the CPU backend words it).
[[noreturn]] void throw_target_error(int64_t target, int64_t row, int64_t vocab);
// The UserError for a token id outside the embedding table [0, vocab) at flat `row` of rows of
// `seq` positions.
[[noreturn]] void throw_token_error(int64_t id, int64_t row, int64_t seq, int64_t vocab);

// The fp32 scalars of an AdamW step, rounded exactly as the CPU backend rounds them.
AdamWScalars adamw_scalars(const AdamWArgs& args);

// (B, T, C, n_head, head_dim) of an attention call, checked; qkv must be (B, T, 3C).
struct AttentionShape {
  int64_t batch, seq, channels, heads, head_dim;
};
AttentionShape attention_shape(const char* op, const Tensor& qkv, int n_head);

}  // namespace strata::cuda
#endif  // STRATA_HAVE_CUDA
