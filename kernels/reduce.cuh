// Launchers for the deterministic reductions: the sum of squares behind the gradient norm and
// the bias gradient (column sums). Both use fixed, shape-derived splits and a fixed-order second
// pass in double, so repeated runs give identical bits.
#pragma once
#include <cstdint>

#include "kernel_types.cuh"

namespace strata::cuda {

// Blocks of the first sum-of-squares pass for n elements (the partials it needs).
constexpr int kSumSquaresThreads = 256;
constexpr int64_t kSumSquaresMaxBlocks = 1024;
inline int64_t sum_squares_blocks(int64_t n) {
  return std::clamp<int64_t>(ceil_div(n, kSumSquaresThreads * 8), 1, kSumSquaresMaxBlocks);
}
inline size_t sum_squares_workspace_bytes(int64_t n) {
  return static_cast<size_t>(sum_squares_blocks(n)) * sizeof(double);
}

// *result (device) = Σ x², accumulated in double; partials holds sum_squares_workspace_bytes(n).
cudaError_t sum_squares(const void* x, ElemType type, int64_t n, double* partials, double* result,
                        cudaStream_t stream);

// dbias (cols) += Σ over rows of dout (rows, cols); partials holds
// column_reduce_workspace_bytes(rows, cols, 1).
cudaError_t bias_backward(void* dbias, ElemType dbias_type, const void* dout, ElemType dout_type, int64_t rows,
                          int64_t cols, double* partials, cudaStream_t stream);

}  // namespace strata::cuda
