// Deterministic reductions: two-pass sum of squares in double and the bias gradient through
// the shared column reduction (device_helpers.cuh).
#include "device_helpers.cuh"
#include "reduce.cuh"

namespace strata::cuda {
namespace {

using detail::to_float;

template <typename T>
__global__ void sum_squares_partials_kernel(const T* x, int64_t n, double* partials) {
  __shared__ double scratch[32];
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kSumSquaresThreads;
  double acc = 0.0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kSumSquaresThreads + threadIdx.x; i < n; i += stride) {
    const double v = to_float(x[i]);
    acc += v * v;
  }
  acc = detail::block_sum<kSumSquaresThreads>(acc, scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

constexpr int kFinishThreads = 1024;

__global__ void sum_partials_kernel(const double* partials, int64_t count, double* result) {
  __shared__ double scratch[32];
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += kFinishThreads) acc += partials[i];
  acc = detail::block_sum<kFinishThreads>(acc, scratch);
  if (threadIdx.x == 0) *result = acc;
}

template <typename T>
struct BiasTerm {
  static constexpr int kOutputs = 1;
  const T* dout;
  int64_t cols;
  __device__ void operator()(int64_t row, int64_t col, double (&acc)[1]) const {
    acc[0] += static_cast<double>(to_float(dout[row * cols + col]));
  }
};

}  // namespace

cudaError_t sum_squares(const void* x, ElemType type, int64_t n, double* partials, double* result,
                        cudaStream_t stream) {
  const int64_t blocks = sum_squares_blocks(n);
  const cudaError_t rc = detail::dispatch_float(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    sum_squares_partials_kernel<T><<<static_cast<unsigned>(blocks), kSumSquaresThreads, 0, stream>>>(
        static_cast<const T*>(x), n, partials);
    return cudaGetLastError();
  });
  if (rc != cudaSuccess) return rc;
  sum_partials_kernel<<<1, kFinishThreads, 0, stream>>>(partials, blocks, result);
  return cudaGetLastError();
}

cudaError_t bias_backward(void* dbias, ElemType dbias_type, const void* dout, ElemType dout_type, int64_t rows,
                          int64_t cols, double* partials, cudaStream_t stream) {
  return detail::dispatch_float(dout_type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const BiasTerm<T> term{static_cast<const T*>(dout), cols};
    return detail::launch_column_reduce(term, rows, cols, partials, dbias, dbias_type, nullptr, dbias_type, stream);
  });
}

}  // namespace strata::cuda
