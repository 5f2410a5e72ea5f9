// CPU backend, part 3: the ops tensor parallelism adds — the row-parallel bias and the
// vocab-parallel cross-entropy, in which each rank holds a slice of the vocabulary (the embedding
// ops take a slice too). Sums feeding one value accumulate in double, as elsewhere in this backend.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/fp32_span.h"

namespace strata::cpu {
namespace {

// Real columns of a slice starting at global column vocab_start: those below vocab_size.
int64_t real_columns(int64_t slice_columns, int64_t vocab_start, int64_t vocab_size) {
  return std::clamp<int64_t>(vocab_size - vocab_start, 0, slice_columns);
}

void check_targets(const Tensor& targets, int64_t rows, int vocab_size, const char* op) {
  require(targets.dtype == DType::I32 && targets.numel() == rows, op,
          "targets must be I32 with " + std::to_string(rows) + " elements, got " + targets.shape_string());
  const int32_t* tgt = targets.as<int32_t>();
  for (int64_t i = 0; i < rows; ++i) {
    if (tgt[i] < 0 || tgt[i] >= vocab_size) {
      throw UserError("target token id " + std::to_string(tgt[i]) + " at row " + std::to_string(i) +
                      " is outside the vocabulary [0, " + std::to_string(vocab_size) +
                      "): the data was encoded with a larger vocabulary than model.vocab_size");
    }
  }
}

void check_slice(const Tensor& logits, int64_t vocab_start, int vocab_size, const char* op) {
  require(vocab_start >= 0 && vocab_size > 0, op,
          "vocab_start " + std::to_string(vocab_start) + ", vocab_size " + std::to_string(vocab_size));
  require(logits.defined() && cols_of(logits) > 0, op, "logits " + logits.shape_string());
}

}  // namespace

void CpuBackend::add_bias(Tensor out, Tensor bias) {
  const int64_t n = cols_of(out), m = rows_of(out);
  require(bias.numel() == n, "add_bias", "bias " + bias.shape_string() + " for out " + out.shape_string());
  Fp32Span o(out, Access::ReadWrite), b(bias, Access::Read);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) o[i * n + j] += b[j];
}

void CpuBackend::vocab_parallel_max(Tensor row_max, Tensor logits, int64_t vocab_start, int vocab_size) {
  const char* op = "vocab_parallel_max";
  check_slice(logits, vocab_start, vocab_size, op);
  const int64_t n = rows_of(logits), vs = cols_of(logits), real = real_columns(vs, vocab_start, vocab_size);
  require(row_max.dtype == DType::F32 && row_max.numel() == n, op, "row_max " + row_max.shape_string());
  Fp32Span x(logits, Access::Read), m(row_max, Access::Write);
  for (int64_t i = 0; i < n; ++i) {
    const float* row = x.data() + i * vs;
    m[i] = real > 0 ? *std::max_element(row, row + real) : -std::numeric_limits<float>::infinity();
  }
}

void CpuBackend::vocab_parallel_sum_exp(Tensor stats, Tensor logits, Tensor row_max, Tensor targets,
                                        int64_t vocab_start, int vocab_size) {
  const char* op = "vocab_parallel_sum_exp";
  require_host(op, {&targets});
  check_slice(logits, vocab_start, vocab_size, op);
  const int64_t n = rows_of(logits), vs = cols_of(logits), real = real_columns(vs, vocab_start, vocab_size);
  require(row_max.dtype == DType::F32 && row_max.numel() == n, op, "row_max " + row_max.shape_string());
  require(stats.dtype == DType::F32 && stats.numel() == 2 * n, op, "stats " + stats.shape_string());
  check_targets(targets, n, vocab_size, op);
  Fp32Span x(logits, Access::Read), m(row_max, Access::Read), s(stats, Access::Write);
  const int32_t* tgt = targets.as<int32_t>();
  for (int64_t i = 0; i < n; ++i) {
    const float* row = x.data() + i * vs;
    double sum = 0.0;
    for (int64_t j = 0; j < real; ++j) sum += std::exp(row[j] - m[i]);
    s[i] = static_cast<float>(sum);
    const int64_t local = int64_t{tgt[i]} - vocab_start;
    s[n + i] = local >= 0 && local < real ? row[local] : 0.0f;
  }
}

void CpuBackend::vocab_parallel_cross_entropy(Tensor logits, Tensor losses, Tensor targets, Tensor row_max,
                                              Tensor stats, int64_t vocab_start, int vocab_size, bool write_dlogits,
                                              float dloss) {
  const char* op = "vocab_parallel_cross_entropy";
  require_host(op, {&targets});
  check_slice(logits, vocab_start, vocab_size, op);
  const int64_t n = rows_of(logits), vs = cols_of(logits), real = real_columns(vs, vocab_start, vocab_size);
  require(row_max.dtype == DType::F32 && row_max.numel() == n, op, "row_max " + row_max.shape_string());
  require(stats.dtype == DType::F32 && stats.numel() == 2 * n, op, "stats " + stats.shape_string());
  require(!losses.defined() || losses.numel() == n, op, "losses " + losses.shape_string());
  check_targets(targets, n, vocab_size, op);
  Fp32Span x(logits, write_dlogits ? Access::ReadWrite : Access::Read), m(row_max, Access::Read);
  Fp32Span s(stats, Access::Read), sloss(losses, Access::Write);
  const int32_t* tgt = targets.as<int32_t>();
  for (int64_t i = 0; i < n; ++i) {
    const double sum = s[i];
    if (sloss.defined()) sloss[i] = static_cast<float>((m[i] + std::log(sum)) - s[n + i]);
    if (!write_dlogits) continue;
    float* row = x.data() + i * vs;
    const int64_t target = int64_t{tgt[i]} - vocab_start;
    for (int64_t j = 0; j < real; ++j) {
      const float prob = static_cast<float>(std::exp(row[j] - m[i]) / sum);
      row[j] = dloss * (j == target ? prob - 1.0f : prob);
    }
    std::fill(row + real, row + vs, 0.0f);
  }
}

}  // namespace strata::cpu
