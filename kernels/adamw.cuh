// Launcher for the fused AdamW step over a contiguous range, bit-compatible with the CPU
// backend (same fp32 scalars, same operation order, the same two FMAs), optionally writing a
// rounded copy of the updated parameters (the bf16 working weights of mixed precision).
#pragma once
#include <cstdint>

#include "kernel_types.cuh"

namespace strata::cuda {

// The fp32 scalars of one step, derived on the host exactly as the CPU backend derives them.
struct AdamWScalars {
  float decay = 1.0f;       // 1 − lr·wd (decoupled)
  float l2 = 0.0f;          // wd (L2 mode)
  float beta1 = 0.9f;
  float one_minus_beta1 = 0.1f;
  float beta2 = 0.999f;
  float one_minus_beta2 = 0.001f;
  float step_size = 1e-3f;  // lr / (1 − β1^t)
  float bc2_sqrt = 1.0f;    // √(1 − β2^t)
  float eps = 1e-8f;
  float grad_scale = 1.0f;
  bool decoupled = true;
};

// param (param_type) and the fp32 moments are updated in place; grad (grad_type) is read.
// param_copy (copy_type), optional, receives the updated parameters rounded to its type.
cudaError_t adamw_update(void* param, ElemType param_type, const void* grad, ElemType grad_type, float* exp_avg,
                         float* exp_avg_sq, void* param_copy, ElemType copy_type, int64_t n, const AdamWScalars& s,
                         cudaStream_t stream);

}  // namespace strata::cuda
