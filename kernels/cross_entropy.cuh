// Launcher for the fused softmax + cross-entropy over rows of padded logits: one block per
// row computes the row's max and exp-sum in a single online pass, then (optionally) overwrites
// the logits with dlogits; padding columns become zero.
#pragma once
#include <cstdint>

#include "kernel_types.cuh"

namespace strata::cuda {

constexpr int kCrossEntropyThreads = 512;

// logits (rows, padded_vocab) of `type`; only the first `vocab` columns are real.
// losses (rows), optional (nullptr), of losses_type: logsumexp − logit[target].
// write_dlogits: logits = dloss · (softmax − onehot(target)) over real columns, 0 over padding.
// A target outside [0, vocab) leaves its row untouched and lowers *bad_row (see kNoBadRow).
cudaError_t softmax_cross_entropy(void* logits, ElemType type, void* losses, ElemType losses_type,
                                  const int32_t* targets, int64_t rows, int64_t padded_vocab, int64_t vocab,
                                  bool write_dlogits, float dloss, int* bad_row, cudaStream_t stream);

}  // namespace strata::cuda
