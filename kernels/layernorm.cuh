// Launchers for layernorm forward and backward over rows of `cols` elements (eps 1e-5, biased
// variance). The forward (layernorm.cu) holds each row in registers and computes its statistics in
// double like the CPU reference; the backward (layernorm_backward.cu) makes one pass with fp32
// statistics and writes per-block parameter gradient partials that one small kernel adds in a
// fixed order (no float atomics).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernel_types.cuh"

namespace strata::cuda {

constexpr int kLayerNormRowsPerBlock = 8;  // one warp per row

inline int64_t layernorm_blocks(int64_t rows) { return std::max<int64_t>(1, ceil_div(rows, kLayerNormRowsPerBlock)); }

// The one-pass forward: one warp per row, the row held in registers as 16-byte words, `words`
// per lane (a compile-time count: 2, 4, 8 or 16, so rows up to 4096 bf16/fp16 or 2048 fp32
// columns). 0 when the row is wider or cols · elem_bytes is not a multiple of 16: such rows, and
// rows whose pointers are not 16-byte aligned, take the scalar kernel (layernorm.cu).
constexpr int kLayerNormForwardMaxWords = 16;

inline int layernorm_forward_words(int64_t cols, size_t elem_bytes) {
  const int64_t bytes = cols * static_cast<int64_t>(elem_bytes);
  if (cols <= 0 || bytes % 16 != 0) return 0;
  const int64_t needed = ceil_div(bytes / 16, 32);
  for (int words = 2; words <= kLayerNormForwardMaxWords; words *= 2)
    if (needed <= words) return words;
  return 0;
}

// out = (inp − mean) · rstd · weight + bias; inp, out, weight, bias share `type`.
// mean, rstd (rows) are optional (nullptr) fp32 outputs.
cudaError_t layernorm_forward(void* out, float* mean, float* rstd, const void* inp, const void* weight,
                              const void* bias, ElemType type, int64_t rows, int64_t cols, cudaStream_t stream);

// residual = a + b rounded to `type` (residual may alias a or b), then layernorm_forward of it,
// in one pass over each row; every tensor but mean/rstd shares `type`.
cudaError_t residual_layernorm_forward(void* residual, void* out, float* mean, float* rstd, const void* a,
                                       const void* b, const void* weight, const void* bias, ElemType type,
                                       int64_t rows, int64_t cols, cudaStream_t stream);

// The one-pass backward: blocks of `warps` warps, each warp owning one row at a time and
// striding over rows by blocks · warps. Each warp keeps its own fp32 dweight/dbias sums in
// shared memory (2 · cols floats), within the 48 KiB every block may use without opting in;
// rows wider than that (cols > 6144) take the wide-row kernel (warps == 0; layernorm_backward.cu).
// The grid depends on the shape only, so the sums' order, and so their bits, do not depend on
// the device.
constexpr int kLayerNormBackwardMaxWarps = 8;
constexpr int64_t kLayerNormBackwardTargetWarps = 2048;  // about 16 per SM on an H100's 132
constexpr size_t kLayerNormBackwardSharedBytes = 48 * 1024;

struct LayerNormBackwardShape {
  int warps = 0;  // per block; 0: the row is too wide for the one-pass kernel
  int64_t blocks = 0;
};

inline LayerNormBackwardShape layernorm_backward_shape(int64_t rows, int64_t cols) {
  LayerNormBackwardShape s;
  if (rows <= 0 || cols <= 0) return s;
  const int64_t per_warp = 2 * cols * static_cast<int64_t>(sizeof(float));
  s.warps = static_cast<int>(std::min<int64_t>(kLayerNormBackwardMaxWarps,
                                               static_cast<int64_t>(kLayerNormBackwardSharedBytes) / per_warp));
  if (s.warps == 0) return s;
  s.blocks = std::clamp<int64_t>(ceil_div(rows, s.warps), 1, ceil_div(kLayerNormBackwardTargetWarps, s.warps));
  return s;
}

// Enough for either backward: the one-pass kernel's fp32 partials (blocks × 2 × cols) or the
// wide-row kernel's double column-reduction partials.
inline size_t layernorm_backward_workspace_bytes(int64_t rows, int64_t cols) {
  const LayerNormBackwardShape s = layernorm_backward_shape(rows, cols);
  const size_t one_pass = static_cast<size_t>(s.blocks * 2 * std::max<int64_t>(cols, 0)) * sizeof(float);
  return std::max(one_pass, column_reduce_workspace_bytes(rows, cols, 2));
}

// dinp += …, dweight += Σ dout · n̂, dbias += Σ dout; dinp, dout, inp, weight share `type`,
// dweight/dbias have their own types (fp32 gradient buffers with bf16 weights, say).
cudaError_t layernorm_backward(void* dinp, void* dweight, ElemType dweight_type, void* dbias, ElemType dbias_type,
                               const void* dout, const void* inp, const void* weight, const float* mean,
                               const float* rstd, ElemType type, int64_t rows, int64_t cols, double* partials,
                               cudaStream_t stream);

}  // namespace strata::cuda
