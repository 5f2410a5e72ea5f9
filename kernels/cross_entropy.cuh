// Launchers for the fused softmax + cross-entropy over rows of padded logits: one block per
// row, an online (max, sum) pass and a second pass that (optionally) overwrites the logits with
// dlogits; padding columns become zero. And its vocab-parallel form, in three passes over one
// rank's slice of the columns around the caller's all-reduces.
#pragma once
#include <cstdint>

#include "kernel_types.cuh"

namespace strata::cuda {

constexpr int kCrossEntropyThreads = 512;

// logits (rows, padded_vocab) of `type`; only the first `vocab` columns are real.
// losses (rows), optional (nullptr), of losses_type: logsumexp − logit[target].
// write_dlogits: logits = dloss · (softmax − onehot(target)) over real columns, 0 over padding.
// A target outside [0, vocab) leaves its row untouched and is reported in *bad_id (see BadIdFlag).
cudaError_t softmax_cross_entropy(void* logits, ElemType type, void* losses, ElemType losses_type,
                                  const int32_t* targets, int64_t rows, int64_t padded_vocab, int64_t vocab,
                                  bool write_dlogits, float dloss, BadIdFlag* bad_id, cudaStream_t stream);

// ---- vocab-parallel cross-entropy (tensor parallelism) ----
// logits (rows, cols) of `type` are one rank's slice: columns [vocab_start, vocab_start + cols)
// of the full logits, of which the first `real` (those below the vocabulary size) are real.
// The caller all-reduces row_max (Max) after pass 1 and stats (Sum) after pass 2.
// 1. row_max (rows) fp32 = the maximum over the real columns; −inf when real is 0.
cudaError_t vocab_parallel_max(float* row_max, const void* logits, ElemType type, int64_t rows, int64_t cols,
                               int64_t real, cudaStream_t stream);
// 2. stats (2, rows) fp32: stats[row] = Σ exp(x − row_max[row]) over the real columns and
// stats[rows + row] = the target's logit when it falls inside the slice, else 0. A target
// outside [0, vocab_size) is reported in *bad_id (see BadIdFlag) and its row's stats are
// meaningless.
cudaError_t vocab_parallel_sum_exp(float* stats, const void* logits, ElemType type, const float* row_max,
                                   const int32_t* targets, int64_t rows, int64_t cols, int64_t real,
                                   int64_t vocab_start, int64_t vocab_size, BadIdFlag* bad_id,
                                   cudaStream_t stream);
// 3. losses (rows), optional, of losses_type: row_max + log(stats[row]) − stats[rows + row];
// write_dlogits: logits = dloss · (exp(x − row_max) / stats[row] − onehot(target)) over the real
// columns and 0 over the rest.
cudaError_t vocab_parallel_cross_entropy(void* logits, ElemType type, void* losses, ElemType losses_type,
                                         const int32_t* targets, const float* row_max, const float* stats,
                                         int64_t rows, int64_t cols, int64_t real, int64_t vocab_start,
                                         bool write_dlogits, float dloss, cudaStream_t stream);

}  // namespace strata::cuda
