// Launchers for causal flash attention forward and backward over qkv (B, T, 3C) laid out
// [q | k | v] with heads of head_dim contiguous elements. No T×T matrix is stored: the forward
// saves lse (B, NH, T) and the backward recomputes probabilities tile by tile. Kernel families
// behind the launchers: tensor-core kernels for bf16/fp16 at head_dim 64 and 128 (mma.sync,
// attention_mma.cuh) and fp32 CUDA-core kernels for everything else; this header holds the
// host-side shape arithmetic.
#pragma once
#include <cstdint>

#include "kernel_types.cuh"

namespace strata::cuda {

constexpr int kAttentionTile = 64;      // query rows and key rows per tile
constexpr int kAttentionThreads = 256;  // 16 × 16 threads, each owning a 4-row strip
constexpr int kAttentionScoreStride = kAttentionTile + 4;  // padded row of a score tile (floats)

// head_dim must be a multiple of 16 up to 128; kernels are built for two register budgets.
inline bool attention_head_dim_supported(int64_t head_dim) {
  return head_dim > 0 && head_dim <= 128 && head_dim % 16 == 0;
}
inline int attention_dim_class(int64_t head_dim) { return head_dim <= 64 ? 64 : 128; }

// Padded row of a (tile, head_dim) tile in shared memory, in floats.
inline int64_t attention_row_stride(int dim_class) { return dim_class + 1; }

// Dynamic shared memory of each kernel for a head-dim class.
inline size_t attention_forward_smem_bytes(int dim_class) {
  return sizeof(float) * static_cast<size_t>(2 * kAttentionTile * attention_row_stride(dim_class) +
                                             kAttentionTile * kAttentionScoreStride);
}
inline size_t attention_dkdv_smem_bytes(int dim_class) {
  return sizeof(float) * static_cast<size_t>(4 * kAttentionTile * attention_row_stride(dim_class) +
                                             2 * kAttentionTile * kAttentionScoreStride + 2 * kAttentionTile);
}
inline size_t attention_dq_smem_bytes(int dim_class) {
  return sizeof(float) * static_cast<size_t>(4 * kAttentionTile * attention_row_stride(dim_class) +
                                             kAttentionTile * kAttentionScoreStride + 2 * kAttentionTile);
}

// Query (or key) tiles of one head: every attention path works in 64-row tiles.
inline int64_t attention_tiles(int64_t seq) { return ceil_div(seq, kAttentionTile); }

// Scratch of the backward: rowsum(dout ∘ out) for each (b, h, t).
inline size_t attention_backward_workspace_bytes(int64_t batch, int64_t heads, int64_t seq) {
  return static_cast<size_t>(batch * heads * seq) * sizeof(float);
}

// ---- tensor-core path for bf16 / fp16 with head_dim 64 or 128 ----
// How bf16 probabilities and dS enter the tensor-core products (model.attention_probabilities
// in training). bf16 keeps 8 significant bits, so a probability (or dS) rounded to one bf16
// value errs by up to 2⁻⁹; summed over a thousand keys that exceeds the 1e-2 the op tests hold
// bf16 to. Split: the operand goes in as hi + lo, two bf16 values and two MMAs, which brings it to
// ~2⁻¹⁷. Rounded: once, as FlashAttention and PyTorch's SDPA do, for a third fewer MMAs (the
// H100 times it at about 3/4 of the split's backward) and errors up to ~5e-2 of a typical
// element, which training curves absorb. fp16 (11 bits) is never split.
enum class AttentionBf16Operands : uint8_t { Split = 0, Rounded = 1 };

// The tensor-core kernels serve 16-bit types, head_dim 64 or 128, and 16-byte aligned tensors
// (every row of a head is then 16-byte aligned, so tiles move as 16-byte vectors).
inline bool attention_uses_tensor_cores(ElemType type, int64_t head_dim, bool aligned) {
  return (type == ElemType::BF16 || type == ElemType::F16) && (head_dim == 64 || head_dim == 128) && aligned;
}

// out (B, T, C) and lse (B, NH, T) are overwritten; qkv and out share `type`. bf16_operands
// applies to the tensor-core kernels in bf16.
cudaError_t attention_forward(void* out, float* lse, const void* qkv, ElemType type, int64_t batch, int64_t seq,
                              int64_t heads, int64_t head_dim, AttentionBf16Operands bf16_operands,
                              cudaStream_t stream);

// dqkv (B, T, 3C) is overwritten; dqkv, dout, qkv, out share `type`; workspace holds
// attention_backward_workspace_bytes. Deterministic: dK/dV and dQ come from separate kernels,
// each output element owned by one block.
cudaError_t attention_backward(void* dqkv, const void* dout, const void* qkv, const void* out, const float* lse,
                               ElemType type, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                               AttentionBf16Operands bf16_operands, float* workspace, cudaStream_t stream);

}  // namespace strata::cuda
