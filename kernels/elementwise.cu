// Elementwise kernels: one grid-stride map over 16-byte packs (with a scalar tail) serves
// fill, scale, add and GELU; arithmetic uses explicit round-to-nearest intrinsics where the
// CPU backend's expression order matters, so nvcc's FMA contraction does not drift from it.
#include "device_helpers.cuh"
#include "elementwise.cuh"

namespace strata::cuda {
namespace {

using detail::from_float;
using detail::Pack;
using detail::to_float;

constexpr float kGeluScale = 0.7978845608028654f;  // √(2/π)
constexpr float kGeluCubic = 0.044715f;

struct FillOp {
  static constexpr int kInputs = 0;
  float value;
  __device__ float operator()(float, float) const { return value; }
};

struct ScaleOp {
  static constexpr int kInputs = 1;
  float factor;
  __device__ float operator()(float x, float) const { return __fmul_rn(x, factor); }
};

struct AddOp {
  static constexpr int kInputs = 2;
  __device__ float operator()(float a, float b) const { return __fadd_rn(a, b); }
};

__device__ __forceinline__ float gelu_inner(float v) {
  return __fmul_rn(kGeluScale, __fadd_rn(v, __fmul_rn(kGeluCubic, __fmul_rn(__fmul_rn(v, v), v))));
}

struct GeluOp {
  static constexpr int kInputs = 1;
  __device__ float operator()(float v, float) const {
    return __fmul_rn(__fmul_rn(0.5f, v), __fadd_rn(1.0f, tanhf(gelu_inner(v))));
  }
};

struct GeluBackwardOp {
  static constexpr int kInputs = 2;
  __device__ float operator()(float dy, float v) const {
    const float t = tanhf(gelu_inner(v));
    constexpr float kThreeCubic = 3.0f * kGeluCubic;
    const float dinner = __fmul_rn(kGeluScale, __fadd_rn(1.0f, __fmul_rn(__fmul_rn(kThreeCubic, v), v)));
    const float left = __fmul_rn(0.5f, __fadd_rn(1.0f, t));
    const float right = __fmul_rn(__fmul_rn(__fmul_rn(0.5f, v), __fsub_rn(1.0f, __fmul_rn(t, t))), dinner);
    return __fmul_rn(dy, __fadd_rn(left, right));
  }
};

// out[i] = op(in0[i], in1[i]) over `packs` 16-byte packs, then the scalar tail [packs·k, n).
template <typename T, typename Op>
__global__ void map_kernel(T* out, const T* in0, const T* in1, int64_t n, int64_t packs, Op op) {
  using P = Pack<T>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t p = first; p < packs; p += stride) {
    P x0{}, x1{}, y;
    if constexpr (Op::kInputs > 0) x0 = reinterpret_cast<const P*>(in0)[p];
    if constexpr (Op::kInputs > 1) x1 = reinterpret_cast<const P*>(in1)[p];
#pragma unroll
    for (int k = 0; k < P::kSize; ++k) y.v[k] = from_float<T>(op(to_float(x0.v[k]), to_float(x1.v[k])));
    reinterpret_cast<P*>(out)[p] = y;
  }
  for (int64_t i = packs * P::kSize + first; i < n; i += stride) {
    float a = 0.0f, b = 0.0f;
    if constexpr (Op::kInputs > 0) a = to_float(in0[i]);
    if constexpr (Op::kInputs > 1) b = to_float(in1[i]);
    out[i] = from_float<T>(op(a, b));
  }
}

template <typename Op>
cudaError_t launch_map(void* out, const void* in0, const void* in1, ElemType type, int64_t n, Op op,
                       cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return detail::dispatch_float(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const bool vector_ok = aligned16(out) && (Op::kInputs < 1 || aligned16(in0)) && (Op::kInputs < 2 || aligned16(in1));
    const int64_t packs = vector_ok ? n / Pack<T>::kSize : 0;
    const int64_t tail = n - packs * Pack<T>::kSize;
    const int64_t blocks = elementwise_blocks(packs > tail ? packs : tail);
    map_kernel<T, Op><<<static_cast<unsigned>(blocks), kElementwiseThreads, 0, stream>>>(
        static_cast<T*>(out), static_cast<const T*>(in0), static_cast<const T*>(in1), n, packs, op);
    return cudaGetLastError();
  });
}

template <typename Src, typename Dst>
__global__ void cast_kernel(const Src* src, Dst* dst, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    dst[i] = from_float<Dst>(to_float(src[i]));
  }
}

__global__ void add_row_bias_kernel(void* out, ElemType out_type, const void* bias, ElemType bias_type, int64_t rows,
                                    int64_t cols, bool accumulate) {
  const int64_t n = rows * cols;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float base = accumulate ? detail::load_any(out, out_type, i) : 0.0f;
    detail::store_any(out, out_type, i, __fadd_rn(base, detail::load_any(bias, bias_type, i % cols)));
  }
}

}  // namespace

cudaError_t fill(void* x, ElemType type, int64_t n, float value, cudaStream_t stream) {
  return launch_map(x, nullptr, nullptr, type, n, FillOp{value}, stream);
}

cudaError_t scale(void* x, ElemType type, int64_t n, float factor, cudaStream_t stream) {
  return launch_map(x, x, nullptr, type, n, ScaleOp{factor}, stream);
}

cudaError_t add(void* out, const void* a, const void* b, ElemType type, int64_t n, cudaStream_t stream) {
  return launch_map(out, a, b, type, n, AddOp{}, stream);
}

cudaError_t gelu_forward(void* out, const void* inp, ElemType type, int64_t n, cudaStream_t stream) {
  return launch_map(out, inp, nullptr, type, n, GeluOp{}, stream);
}

cudaError_t gelu_backward(void* dinp, const void* dout, const void* inp, ElemType type, int64_t n,
                          cudaStream_t stream) {
  return launch_map(dinp, dout, inp, type, n, GeluBackwardOp{}, stream);
}

cudaError_t cast(const void* src, ElemType src_type, void* dst, ElemType dst_type, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (src_type == dst_type) {
    if (src == dst) return cudaSuccess;
    return cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * elem_size(src_type), cudaMemcpyDeviceToDevice, stream);
  }
  const int64_t blocks = elementwise_blocks(n);
  return detail::dispatch_float(src_type, [&](auto src_tag) {
    using Src = typename decltype(src_tag)::type;
    return detail::dispatch_float(dst_type, [&](auto dst_tag) {
      using Dst = typename decltype(dst_tag)::type;
      cast_kernel<Src, Dst><<<static_cast<unsigned>(blocks), kElementwiseThreads, 0, stream>>>(
          static_cast<const Src*>(src), static_cast<Dst*>(dst), n);
      return cudaGetLastError();
    });
  });
}

cudaError_t add_row_bias(void* out, ElemType out_type, const void* bias, ElemType bias_type, int64_t rows,
                         int64_t cols, bool accumulate, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  const int64_t blocks = elementwise_blocks(rows * cols);
  add_row_bias_kernel<<<static_cast<unsigned>(blocks), kElementwiseThreads, 0, stream>>>(
      out, out_type, bias, bias_type, rows, cols, accumulate);
  return cudaGetLastError();
}

}  // namespace strata::cuda
