// Entry points of the emulated tensor-core attention (emu_attention.h): the kernels built from
// kernels/attention_mma_*.cu by transform_kernels.py into namespace strata::cuda_emulated, called
// with the host pointers the tests own.
#include "emu_attention.h"

#include "attention_mma.cuh"  // the transformed copy, next to the transformed kernels

namespace strata::emu {
namespace mutants {  // emu_mutant.cpp, one library per mutant
int forward_cp_async_wait(void* out, float* lse, const void* qkv, HalfType type, const AttentionShape& shape);
int forward_lane_mapping(void* out, float* lse, const void* qkv, HalfType type, const AttentionShape& shape);
}  // namespace mutants

namespace {

namespace kernels = ::strata::cuda_emulated;

kernels::ElemType elem_type(HalfType type) {
  return type == HalfType::BF16 ? kernels::ElemType::BF16 : kernels::ElemType::F16;
}

kernels::AttentionBf16Operands operands_of(Bf16Operands operands) {
  return operands == Bf16Operands::Split ? kernels::AttentionBf16Operands::Split
                                         : kernels::AttentionBf16Operands::Rounded;
}

}  // namespace

int attention_forward(void* out, float* lse, const void* qkv, HalfType type, const AttentionShape& shape,
                      Bf16Operands operands) {
  return kernels::detail::attention_forward_mma(out, lse, qkv, elem_type(type), shape.batch, shape.seq, shape.heads,
                                                shape.head_dim, operands_of(operands), nullptr);
}

int attention_backward(void* dqkv, const void* dout, const void* qkv, const float* lse, const float* delta,
                       HalfType type, const AttentionShape& shape, Bf16Operands operands) {
  return kernels::detail::attention_backward_mma(dqkv, dout, qkv, lse, delta, elem_type(type), shape.batch, shape.seq,
                                                 shape.heads, shape.head_dim, operands_of(operands), nullptr);
}

int mutant_attention_forward(Mutant mutant, void* out, float* lse, const void* qkv, HalfType type,
                             const AttentionShape& shape) {
  switch (mutant) {
    case Mutant::MmaMissingCpAsyncWait: return mutants::forward_cp_async_wait(out, lse, qkv, type, shape);
    case Mutant::MmaWrongLaneMapping: return mutants::forward_lane_mapping(out, lse, qkv, type, shape);
  }
  return -1;
}

}  // namespace strata::emu
