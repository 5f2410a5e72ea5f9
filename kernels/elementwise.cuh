// Launchers for the elementwise kernels: fill, scale, residual add, tanh-GELU forward and
// backward, dtype casts and a row-broadcast bias. Every tensor is a flat run of n elements;
// out may alias an input. Each returns the launch status (cudaGetLastError).
#pragma once
#include <cstdint>

#include "kernel_types.cuh"

namespace strata::cuda {

cudaError_t fill(void* x, ElemType type, int64_t n, float value, cudaStream_t stream);
cudaError_t scale(void* x, ElemType type, int64_t n, float factor, cudaStream_t stream);
// out = a + b, all of `type`.
cudaError_t add(void* out, const void* a, const void* b, ElemType type, int64_t n, cudaStream_t stream);
// out = ½x(1 + tanh(√(2/π)(x + 0.044715x³))), same operation order as the CPU backend.
cudaError_t gelu_forward(void* out, const void* inp, ElemType type, int64_t n, cudaStream_t stream);
// dinp = dout · gelu'(inp); dinp may alias dout.
cudaError_t gelu_backward(void* dinp, const void* dout, const void* inp, ElemType type, int64_t n,
                          cudaStream_t stream);
// dst = src converted (round to nearest even); src and dst must not overlap unless identical.
cudaError_t cast(const void* src, ElemType src_type, void* dst, ElemType dst_type, int64_t n, cudaStream_t stream);
// out (rows, cols) = (accumulate ? out : 0) + bias (cols), broadcast over rows.
cudaError_t add_row_bias(void* out, ElemType out_type, const void* bias, ElemType bias_type, int64_t rows,
                         int64_t cols, bool accumulate, cudaStream_t stream);

}  // namespace strata::cuda
