// Launchers for layernorm forward and backward over rows of `cols` elements (eps 1e-5, biased
// variance). Statistics are computed in double like the CPU reference; the weight and bias
// gradients go through the deterministic column reduction (no float atomics).
#pragma once
#include <cstdint>

#include "kernel_types.cuh"

namespace strata::cuda {

constexpr int kLayerNormRowsPerBlock = 8;  // one warp per row

inline int64_t layernorm_blocks(int64_t rows) { return std::max<int64_t>(1, ceil_div(rows, kLayerNormRowsPerBlock)); }

// out = (inp − mean) · rstd · weight + bias; inp, out, weight, bias share `type`.
// mean, rstd (rows) are optional (nullptr) fp32 outputs.
cudaError_t layernorm_forward(void* out, float* mean, float* rstd, const void* inp, const void* weight,
                              const void* bias, ElemType type, int64_t rows, int64_t cols, cudaStream_t stream);

// residual = a + b rounded to `type` (residual may alias a or b), then layernorm_forward of it,
// in one pass over each row; every tensor but mean/rstd shares `type`.
cudaError_t residual_layernorm_forward(void* residual, void* out, float* mean, float* rstd, const void* a,
                                       const void* b, const void* weight, const void* bias, ElemType type,
                                       int64_t rows, int64_t cols, cudaStream_t stream);

inline size_t layernorm_backward_workspace_bytes(int64_t rows, int64_t cols) {
  return column_reduce_workspace_bytes(rows, cols, 2);
}

// dinp += …, dweight += Σ dout · n̂, dbias += Σ dout; dinp, dout, inp, weight share `type`,
// dweight/dbias have their own types (fp32 gradient buffers with bf16 weights, say).
cudaError_t layernorm_backward(void* dinp, void* dweight, ElemType dweight_type, void* dbias, ElemType dbias_type,
                               const void* dout, const void* inp, const void* weight, const float* mean,
                               const float* rstd, ElemType type, int64_t rows, int64_t cols, double* partials,
                               cudaStream_t stream);

}  // namespace strata::cuda
