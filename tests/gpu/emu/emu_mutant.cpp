// Entry point of the mutant forward kernel (emu_attention.h): kernels/attention_wmma_forward.cu
// transformed with --mutant into namespace strata::cuda_emulated_mutant, which lacks the
// barrier that makes a key tile visible to every thread before it is read.
#include "emu_attention.h"

#include "attention_wmma.cuh"  // the transformed copy, next to the mutant kernel

namespace strata::emu {

int mutant_attention_forward(void* out, float* lse, const void* qkv, HalfType type, const AttentionShape& shape) {
  namespace kernels = ::strata::cuda_emulated_mutant;
  const kernels::ElemType elem = type == HalfType::BF16 ? kernels::ElemType::BF16 : kernels::ElemType::F16;
  return kernels::detail::attention_forward_wmma(out, lse, qkv, elem, shape.batch, shape.seq, shape.heads,
                                                 shape.head_dim, kernels::AttentionBf16Operands::Split, nullptr);
}

}  // namespace strata::emu
