// Layernorm forward kernels (the backward is in layernorm_backward.cu): one warp per row with row
// statistics in double (the rows are re-read from L1/L2 rather than held in registers, so any
// width works).
#include "device_helpers.cuh"
#include "layernorm.cuh"

namespace strata::cuda {
namespace {

using detail::from_float;
using detail::to_float;
using detail::warp_sum;

constexpr double kEps = 1e-5;

// One warp normalizes row x into y: statistics in double (x is re-read from L1/L2 rather
// than held in registers, so any width works), the affine part in fp32 round-to-nearest.
template <typename T>
__device__ void layernorm_row(T* y, float* mean, float* rstd, const T* x, const T* weight, const T* bias,
                              int64_t row, int64_t cols, int lane, double sum) {
  const double mu = warp_sum(sum) / static_cast<double>(cols);
  double sq = 0.0;
  for (int64_t j = lane; j < cols; j += 32) {
    const double d = to_float(x[j]) - mu;
    sq += d * d;
  }
  const double rs = 1.0 / sqrt(warp_sum(sq) / static_cast<double>(cols) + kEps);
  for (int64_t j = lane; j < cols; j += 32) {
    const float normed = static_cast<float>((to_float(x[j]) - mu) * rs);
    y[j] = from_float<T>(__fadd_rn(__fmul_rn(normed, to_float(weight[j])), to_float(bias[j])));
  }
  if (lane == 0) {
    if (mean) mean[row] = static_cast<float>(mu);
    if (rstd) rstd[row] = static_cast<float>(rs);
  }
}

template <typename T>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* inp, const T* weight,
                                         const T* bias, int64_t rows, int64_t cols) {
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kLayerNormRowsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const T* x = inp + row * cols;
  double sum = 0.0;
  for (int64_t j = lane; j < cols; j += 32) sum += to_float(x[j]);
  layernorm_row(out + row * cols, mean, rstd, x, weight, bias, row, cols, lane, sum);
}

// residual = a + b rounded to T (as the add kernel rounds it), then the layernorm of that
// rounded row. Each lane reads back only elements it wrote itself, so residual may alias a or b.
template <typename T>
__global__ void residual_layernorm_forward_kernel(T* residual, T* out, float* mean, float* rstd, const T* a,
                                                  const T* b, const T* weight, const T* bias, int64_t rows,
                                                  int64_t cols) {
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kLayerNormRowsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const T* ar = a + row * cols;
  const T* br = b + row * cols;
  T* x = residual + row * cols;
  double sum = 0.0;
  for (int64_t j = lane; j < cols; j += 32) {
    const T v = from_float<T>(__fadd_rn(to_float(ar[j]), to_float(br[j])));
    x[j] = v;
    sum += to_float(v);
  }
  layernorm_row(out + row * cols, mean, rstd, x, weight, bias, row, cols, lane, sum);
}

}  // namespace

cudaError_t layernorm_forward(void* out, float* mean, float* rstd, const void* inp, const void* weight,
                              const void* bias, ElemType type, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  return detail::dispatch_float(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    layernorm_forward_kernel<T><<<static_cast<unsigned>(layernorm_blocks(rows)), 32 * kLayerNormRowsPerBlock, 0,
                                  stream>>>(static_cast<T*>(out), mean, rstd, static_cast<const T*>(inp),
                                            static_cast<const T*>(weight), static_cast<const T*>(bias), rows, cols);
    return cudaGetLastError();
  });
}

cudaError_t residual_layernorm_forward(void* residual, void* out, float* mean, float* rstd, const void* a,
                                       const void* b, const void* weight, const void* bias, ElemType type,
                                       int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  return detail::dispatch_float(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    residual_layernorm_forward_kernel<T><<<static_cast<unsigned>(layernorm_blocks(rows)), 32 * kLayerNormRowsPerBlock,
                                           0, stream>>>(
        static_cast<T*>(residual), static_cast<T*>(out), mean, rstd, static_cast<const T*>(a),
        static_cast<const T*>(b), static_cast<const T*>(weight), static_cast<const T*>(bias), rows, cols);
    return cudaGetLastError();
  });
}

}  // namespace strata::cuda
