// AdamW kernel. Every operation is spelled with an explicit rounding intrinsic so that nvcc's
// FMA contraction cannot change results: the only fused steps are the two the CPU backend
// (and torch's CPU kernels) fuse, written as __fmaf_rn.
#include "adamw.cuh"
#include "device_helpers.cuh"

namespace strata::cuda {
namespace {

using detail::from_float;
using detail::to_float;

template <typename P, typename G>
__global__ void adamw_kernel(P* param, const G* grad, float* exp_avg, float* exp_avg_sq, void* param_copy,
                             ElemType copy_type, int64_t n, AdamWScalars s) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    float g = __fmul_rn(to_float(grad[i]), s.grad_scale);
    float p = to_float(param[i]);
    if (s.decoupled) {
      p = __fmul_rn(p, s.decay);
    } else {
      g = __fmaf_rn(p, s.l2, g);
    }
    const float m = __fmaf_rn(g, s.one_minus_beta1, __fmul_rn(exp_avg[i], s.beta1));
    const float v = __fmaf_rn(__fmul_rn(s.one_minus_beta2, g), g, __fmul_rn(exp_avg_sq[i], s.beta2));
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), s.bc2_sqrt), s.eps);
    p = __fadd_rn(p, __fdiv_rn(__fmul_rn(-s.step_size, m), denom));
    param[i] = from_float<P>(p);
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    if (param_copy) detail::store_any(param_copy, copy_type, i, p);
  }
}

}  // namespace

cudaError_t adamw_update(void* param, ElemType param_type, const void* grad, ElemType grad_type, float* exp_avg,
                         float* exp_avg_sq, void* param_copy, ElemType copy_type, int64_t n, const AdamWScalars& s,
                         cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const int64_t blocks = elementwise_blocks(n);
  return detail::dispatch_float(param_type, [&](auto ptag) {
    using P = typename decltype(ptag)::type;
    return detail::dispatch_float(grad_type, [&](auto gtag) {
      using G = typename decltype(gtag)::type;
      adamw_kernel<P, G><<<static_cast<unsigned>(blocks), kElementwiseThreads, 0, stream>>>(
          static_cast<P*>(param), static_cast<const G*>(grad), exp_avg, exp_avg_sq, param_copy, copy_type, n, s);
      return cudaGetLastError();
    });
  });
}

}  // namespace strata::cuda
