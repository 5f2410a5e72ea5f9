// CUDA backend, part 3: the ops tensor parallelism adds — the row-parallel bias (the bias
// kernel of the unfused GEMM path) and the vocab-parallel cross-entropy passes (the embedding
// ops of part 1 take a vocabulary slice too).
#ifdef STRATA_HAVE_CUDA
#include <algorithm>
#include <string>

#include "backend/cuda/cuda_args.h"
#include "backend/cuda/cuda_backend.h"
#include "cross_entropy.cuh"
#include "elementwise.cuh"

namespace strata::cuda {
namespace {

// Real columns of a logits slice starting at global column vocab_start: those below vocab_size.
int64_t real_columns(int64_t slice_columns, int64_t vocab_start, int64_t vocab_size) {
  return std::clamp<int64_t>(vocab_size - vocab_start, 0, slice_columns);
}

void check_slice(const char* op, const Tensor& logits, int64_t vocab_start, int vocab_size) {
  require(logits.defined() && cols_of(logits) > 0, op, "logits " + logits.shape_string());
  require(vocab_start >= 0 && vocab_size > 0, op,
          "vocab_start " + std::to_string(vocab_start) + ", vocab_size " + std::to_string(vocab_size));
}

void check_row_stats(const char* op, const Tensor& row_max, const Tensor* stats, int64_t rows) {
  require(row_max.dtype == DType::F32 && row_max.numel() == rows, op, "row_max " + row_max.shape_string());
  if (stats) require(stats->dtype == DType::F32 && stats->numel() == 2 * rows, op, "stats " + stats->shape_string());
}

// Shape and dtype; host ids are range-checked here (device ids by the kernel of pass 2).
void check_targets(const char* op, const Tensor& targets, int64_t rows, int vocab_size) {
  require(targets.dtype == DType::I32 && targets.numel() == rows, op,
          "targets must be I32 with " + std::to_string(rows) + " elements, got " + targets.shape_string());
  if (targets.device != Device::CPU) return;
  const int32_t* host = targets.as<int32_t>();
  for (int64_t i = 0; i < rows; ++i)
    if (host[i] < 0 || host[i] >= vocab_size) throw_target_error(host[i], i, vocab_size);
}

}  // namespace

void CudaBackend::add_bias(Tensor out, Tensor bias) {
  const char* op = "add_bias";
  require_device(op, {&out, &bias});
  require(bias.numel() == cols_of(out), op, "bias " + bias.shape_string() + " for out " + out.shape_string());
  CUDA_CHECK(add_row_bias(out.data, elem_type_of(out, op, "out"), bias.data, elem_type_of(bias, op, "bias"),
                          rows_of(out), cols_of(out), /*accumulate=*/true, stream_));
}

void CudaBackend::vocab_parallel_max(Tensor row_max, Tensor logits, int64_t vocab_start, int vocab_size) {
  const char* op = "vocab_parallel_max";
  require_device(op, {&row_max, &logits});
  check_slice(op, logits, vocab_start, vocab_size);
  const int64_t n = rows_of(logits), cols = cols_of(logits);
  check_row_stats(op, row_max, nullptr, n);
  CUDA_CHECK(cuda::vocab_parallel_max(row_max.f32(), logits.data, elem_type_of(logits, op, "logits"), n, cols,
                                      real_columns(cols, vocab_start, vocab_size), stream_));
}

void CudaBackend::vocab_parallel_sum_exp(Tensor stats, Tensor logits, Tensor row_max, Tensor targets,
                                         int64_t vocab_start, int vocab_size) {
  const char* op = "vocab_parallel_sum_exp";
  require_device(op, {&stats, &logits, &row_max});
  check_slice(op, logits, vocab_start, vocab_size);
  const int64_t n = rows_of(logits), cols = cols_of(logits);
  check_row_stats(op, row_max, &stats, n);
  check_targets(op, targets, n, vocab_size);
  const int32_t* ids = device_ids(targets, targets.device == Device::CPU ? scratch(targets.bytes()) : nullptr);
  BadIdFlag* bad_id = targets.device == Device::CPU ? nullptr : id_flag(/*targets=*/true, n, vocab_size);
  CUDA_CHECK(cuda::vocab_parallel_sum_exp(stats.f32(), logits.data, elem_type_of(logits, op, "logits"),
                                          row_max.f32(), ids, n, cols, real_columns(cols, vocab_start, vocab_size),
                                          vocab_start, vocab_size, bad_id, stream_));
}

void CudaBackend::vocab_parallel_cross_entropy(Tensor logits, Tensor losses, Tensor targets, Tensor row_max,
                                               Tensor stats, int64_t vocab_start, int vocab_size, bool write_dlogits,
                                               float dloss) {
  const char* op = "vocab_parallel_cross_entropy";
  require_device(op, {&logits, &losses, &row_max, &stats});
  check_slice(op, logits, vocab_start, vocab_size);
  const int64_t n = rows_of(logits), cols = cols_of(logits);
  check_row_stats(op, row_max, &stats, n);
  check_targets(op, targets, n, vocab_size);
  require(!losses.defined() || losses.numel() == n, op, "losses " + losses.shape_string());
  const ElemType losses_type = losses.defined() ? elem_type_of(losses, op, "losses") : ElemType::F32;
  // Device targets were range-checked by vocab_parallel_sum_exp, whose statistics this pass reads.
  const int32_t* ids = device_ids(targets, targets.device == Device::CPU ? scratch(targets.bytes()) : nullptr);
  CUDA_CHECK(cuda::vocab_parallel_cross_entropy(logits.data, elem_type_of(logits, op, "logits"), losses.data,
                                                losses_type, ids, row_max.f32(), stats.f32(), n, cols,
                                                real_columns(cols, vocab_start, vocab_size), vocab_start,
                                                write_dlogits, dloss, stream_));
}

}  // namespace strata::cuda
#endif  // STRATA_HAVE_CUDA
