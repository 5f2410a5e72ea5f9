// Types and launch-shape arithmetic shared by every kernel launcher. Host-only C++ (no device
// code), so the CUDA backend and CPU-side unit tests can include it without nvcc; launch shapes
// depend on problem sizes only, never on the device, which keeps reductions deterministic.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace strata::cuda {

// Floating-point element types the kernels read and write.
enum class ElemType : int { F32 = 0, BF16 = 1, F16 = 2 };

inline size_t elem_size(ElemType type) { return type == ElemType::F32 ? 4 : 2; }

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A device flag naming the first out-of-range token or target id an op met: (row << 32) | the
// id's 32 bits, lowered with a 64-bit atomicMin, so the smallest row wins and brings its id
// along (the host reads the flag once per step, when the ids may already be overwritten).
using BadIdFlag = unsigned long long;
constexpr BadIdFlag kNoBadId = ~BadIdFlag{0};  // every id was in range (the host memsets 0xff)
inline int64_t bad_id_row(BadIdFlag flag) { return static_cast<int64_t>(flag >> 32); }
inline int32_t bad_id_value(BadIdFlag flag) { return static_cast<int32_t>(static_cast<uint32_t>(flag)); }

// Threads per block and the largest grid used by the grid-stride elementwise kernels.
constexpr int kElementwiseThreads = 256;
constexpr int64_t kElementwiseMaxBlocks = 8192;

// Blocks for `work_items` independent items handled by a grid-stride loop (at least one).
inline int64_t elementwise_blocks(int64_t work_items) {
  return std::clamp<int64_t>(ceil_div(work_items, kElementwiseThreads), 1, kElementwiseMaxBlocks);
}

// Elements moved per 16-byte vector access.
inline int pack_width(ElemType type) { return static_cast<int>(16 / elem_size(type)); }

// True when every pointer is 16-byte aligned, so the vectorized path may be used.
inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Column reductions (bias and layernorm parameter gradients) split the rows into chunks; each
// (column tile, chunk) block writes one partial sum per column and a second pass adds the
// chunks in order. The split depends on the shape only, so results are bit-reproducible.
constexpr int kColumnTile = 32;     // columns per block (one warp wide)
constexpr int kColumnRowLanes = 8;  // rows processed side by side in a block
constexpr int64_t kColumnTargetBlocks = 1024;
constexpr int64_t kColumnMinRowsPerChunk = 32;

struct ColumnReduceShape {
  int64_t col_tiles = 0;
  int64_t chunks = 0;
  int64_t rows_per_chunk = 0;
};

inline ColumnReduceShape column_reduce_shape(int64_t rows, int64_t cols) {
  ColumnReduceShape s;
  s.col_tiles = std::max<int64_t>(1, ceil_div(cols, kColumnTile));
  if (rows <= 0) {
    s.chunks = 1;
    s.rows_per_chunk = 0;
    return s;
  }
  const int64_t wanted = std::max<int64_t>(1, ceil_div(kColumnTargetBlocks, s.col_tiles));
  const int64_t most = std::max<int64_t>(1, rows / kColumnMinRowsPerChunk);
  const int64_t chunks = std::min(wanted, most);
  s.rows_per_chunk = ceil_div(rows, chunks);
  s.chunks = ceil_div(rows, s.rows_per_chunk);  // no empty trailing chunk
  return s;
}

// Double partial sums a column reduction of `outputs` results per column needs.
inline size_t column_reduce_workspace_bytes(int64_t rows, int64_t cols, int outputs) {
  const ColumnReduceShape s = column_reduce_shape(rows, cols);
  return static_cast<size_t>(s.chunks * cols * outputs) * sizeof(double);
}

}  // namespace strata::cuda
