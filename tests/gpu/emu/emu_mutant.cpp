// Entry point of one mutant forward kernel (emu_attention.h), built once per mutant with
// STRATA_EMU_MUTANT=<name>: the kernel transformed with --mutant into namespace
// strata::cuda_emulated_mutant_<name>, called through emu::mutants::forward_<name>.
#include "emu_attention.h"

#if !defined(STRATA_EMU_MUTANT)
#error "build emu_mutant.cpp with STRATA_EMU_MUTANT=<mutant name>"
#endif
#define STRATA_EMU_JOIN2(a, b) a##b
#define STRATA_EMU_JOIN(a, b) STRATA_EMU_JOIN2(a, b)

#include "attention_mma.cuh"  // the transformed copy, next to the mutant kernel

namespace strata::emu::mutants {

int STRATA_EMU_JOIN(forward_, STRATA_EMU_MUTANT)(void* out, float* lse, const void* qkv, HalfType type,
                                                 const AttentionShape& shape) {
  namespace kernels = ::strata::STRATA_EMU_JOIN(cuda_emulated_mutant_, STRATA_EMU_MUTANT);
  const kernels::ElemType elem = type == HalfType::BF16 ? kernels::ElemType::BF16 : kernels::ElemType::F16;
  return kernels::detail::attention_forward_mma(out, lse, qkv, elem, shape.batch, shape.seq, shape.heads,
                                                shape.head_dim, kernels::AttentionBf16Operands::Split, nullptr);
}

}  // namespace strata::emu::mutants
