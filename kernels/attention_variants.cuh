// The tensor-core attention kernel families (element type, head dim, bf16 operands split or
// rounded once) and the dispatch from run-time arguments to one of them, for the mma.sync
// kernels. Device code: include from the attention .cu files only.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "attention.cuh"

namespace strata::cuda::detail {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// One tensor-core kernel family: element type, head dim, and whether bf16 operands are split.
template <typename T, int kHeadDimValue, bool kSplitValue>
struct TensorCoreVariant {
  using type = T;
  static constexpr int kHeadDim = kHeadDimValue;
  static constexpr bool kSplit = kSplitValue;
};

// Calls launch(TensorCoreVariant<…>{}) for the family the arguments select: bf16 rounded once
// or split, fp16 never split; head_dim 64 or 128.
template <typename Launch>
cudaError_t dispatch_tensor_core_variant(ElemType type, int64_t head_dim, AttentionBf16Operands bf16_operands,
                                         const Launch& launch) {
  if (type == ElemType::BF16) {
    if (bf16_operands == AttentionBf16Operands::Rounded) {
      if (head_dim == 64) return launch(TensorCoreVariant<__nv_bfloat16, 64, false>{});
      return launch(TensorCoreVariant<__nv_bfloat16, 128, false>{});
    }
    if (head_dim == 64) return launch(TensorCoreVariant<__nv_bfloat16, 64, true>{});
    return launch(TensorCoreVariant<__nv_bfloat16, 128, true>{});
  }
  if (head_dim == 64) return launch(TensorCoreVariant<__half, 64, false>{});
  return launch(TensorCoreVariant<__half, 128, false>{});
}

}  // namespace strata::cuda::detail
