// Layernorm kernels. Forward and the input gradient use one warp per row with row statistics in
// double (the rows are re-read from L1/L2 rather than held in registers, so any width works);
// the parameter gradients are column sums through the shared two-pass reduction.
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

// dx = rstd · (dn − mean(dn) − n̂ · mean(dn · n̂)) with dn = dout · weight, accumulated into dinp.
template <typename T>
__global__ void layernorm_dinp_kernel(T* dinp, const T* dout, const T* inp, const T* weight, const float* mean,
                                      const float* rstd, int64_t rows, int64_t cols) {
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kLayerNormRowsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const T* x = inp + row * cols;
  const T* g = dout + row * cols;
  const double mu = mean[row], rs = rstd[row];
  double dn_sum = 0.0, dn_dot = 0.0;
  for (int64_t j = lane; j < cols; j += 32) {
    const double normed = (to_float(x[j]) - mu) * rs;
    const double dn = static_cast<double>(to_float(g[j])) * to_float(weight[j]);
    dn_sum += dn;
    dn_dot += dn * normed;
  }
  const double dn_mean = warp_sum(dn_sum) / static_cast<double>(cols);
  const double dn_dot_mean = warp_sum(dn_dot) / static_cast<double>(cols);
  T* dx = dinp + row * cols;
  for (int64_t j = lane; j < cols; j += 32) {
    const double normed = (to_float(x[j]) - mu) * rs;
    const double dn = static_cast<double>(to_float(g[j])) * to_float(weight[j]);
    const double d = (dn - dn_mean - normed * dn_dot_mean) * rs;
    dx[j] = from_float<T>(static_cast<float>(to_float(dx[j]) + d));
  }
}

// Column terms: output 0 is dweight (dout · n̂), output 1 is dbias (dout).
template <typename T>
struct LayerNormParamTerm {
  static constexpr int kOutputs = 2;
  const T* dout;
  const T* inp;
  const float* mean;
  const float* rstd;
  int64_t cols;
  __device__ void operator()(int64_t row, int64_t col, double (&acc)[2]) const {
    const double g = to_float(dout[row * cols + col]);
    const double normed = (to_float(inp[row * cols + col]) - static_cast<double>(mean[row])) * rstd[row];
    acc[0] += g * normed;
    acc[1] += g;
  }
};

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

cudaError_t layernorm_backward(void* dinp, void* dweight, ElemType dweight_type, void* dbias, ElemType dbias_type,
                               const void* dout, const void* inp, const void* weight, const float* mean,
                               const float* rstd, ElemType type, int64_t rows, int64_t cols, double* partials,
                               cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  return detail::dispatch_float(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    layernorm_dinp_kernel<T><<<static_cast<unsigned>(layernorm_blocks(rows)), 32 * kLayerNormRowsPerBlock, 0,
                               stream>>>(static_cast<T*>(dinp), static_cast<const T*>(dout),
                                         static_cast<const T*>(inp), static_cast<const T*>(weight), mean, rstd, rows,
                                         cols);
    const cudaError_t rc = cudaGetLastError();
    if (rc != cudaSuccess) return rc;
    const LayerNormParamTerm<T> term{static_cast<const T*>(dout), static_cast<const T*>(inp), mean, rstd, cols};
    return detail::launch_column_reduce(term, rows, cols, partials, dweight, dweight_type, dbias, dbias_type,
                                        stream);
  });
}

}  // namespace strata::cuda
