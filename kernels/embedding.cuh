// Launchers for the token + position embedding forward and its deterministic backward: the
// backward groups positions by token id with a stable radix sort, then adds each row's gradients
// in pieces of kEmbeddingPieceRows sorted positions (a block per piece group, then one block per
// long row joining its pieces in order), with no float atomics; a frequent token's thousands of
// positions spread over many blocks.
#pragma once
#include <cstdint>

#include "kernel_types.cuh"

namespace strata::cuda {

// Bits the radix sort must look at for ids in [0, vocab] (vocab itself marks bad ids).
inline int embedding_sort_bits(int64_t vocab) {
  int bits = 1;
  while ((int64_t{1} << bits) <= vocab) ++bits;
  return bits;
}

// out (B·T, C) = wte[tokens − vocab_start] + wpe[t]; out, wte, wpe share `type`; wte holds rows
// [vocab_start, vocab_start + table_rows) of the table: the whole table (vocab_start 0) or a rank's
// vocabulary slice. A row whose id is outside [0, vocab_size) is left unwritten and reported in
// *bad_id (see BadIdFlag; bad_id is null when the host checked the ids); a row whose id is in the
// vocabulary but outside the slice (another rank holds it) is written as 0 plus its position.
// wpe may be null: no position added.
cudaError_t embedding_forward(void* out, const int32_t* tokens, const void* wte, const void* wpe, ElemType type,
                              int64_t batch, int64_t seq, int64_t channels, int64_t table_rows,
                              int64_t vocab_start, int64_t vocab_size, BadIdFlag* bad_id, cudaStream_t stream);

// Sorted positions per piece: the embedding backward's order (src/backend/backend.h,
// kEmbeddingGradPiece, which the CUDA backend checks equal): a row's positions are cut wherever
// their index in the (row, position) sort of the table's ids is a multiple of this; each piece is
// summed from zero in order and the pieces are added to the row in order.
constexpr int64_t kEmbeddingPieceRows = 64;

// Scratch the backward needs for batch·seq tokens (sort buffers, CUB's temporary storage and
// the pieces of rows that span several piece groups: 2 · ⌈tokens / kEmbeddingPieceRows⌉ · channels floats).
size_t embedding_backward_workspace_bytes(int64_t tokens, int64_t vocab, int64_t channels);

// dwte (V, C) (rows [vocab_start, vocab_start + V) of the table) and dwpe (≥T, C) accumulate dout
// (B·T, C), dwte in pieces (kEmbeddingPieceRows) and dwpe over b in order; ids outside those
// rows are skipped (embedding_forward reports them, or another rank holds them). dwpe may be
// null. dout has `dout_type`; the gradients their own.
cudaError_t embedding_backward(void* dwte, ElemType dwte_type, void* dwpe, ElemType dwpe_type, const void* dout,
                               ElemType dout_type, const int32_t* tokens, int64_t batch, int64_t seq,
                               int64_t channels, int64_t vocab, int64_t vocab_start, void* workspace,
                               size_t workspace_bytes, cudaStream_t stream);

}  // namespace strata::cuda
