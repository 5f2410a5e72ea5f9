// CPU backend, part 1: memory, whole-tensor ops, elementwise layers, embeddings and AdamW.
// Every float tensor goes through Fp32Span, so BF16/F16 storage is emulated uniformly.
#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

#include "backend/cpu/fp32_span.h"

namespace strata {
namespace cpu {

void require_host(const char* op, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    if (t->defined()) require(t->device == Device::CPU, op, "a tensor is not in host memory");
  }
}

namespace {

// Allocations carry their size in a 256-byte header in front of the data, so the release
// function (which gets the pointer only) can keep the counters exact.
constexpr size_t kHeaderBytes = 256;
std::atomic<size_t> g_allocated{0};
std::atomic<size_t> g_peak{0};

void release_host(void* p) {
  char* base = static_cast<char*>(p) - kHeaderBytes;
  g_allocated -= *reinterpret_cast<size_t*>(base);
  std::free(base);
}

}  // namespace

Buffer CpuBackend::allocate(size_t bytes) {
  const size_t rounded = (bytes + 255) / 256 * 256;
  char* base = static_cast<char*>(std::aligned_alloc(256, kHeaderBytes + rounded));
  if (!base) throw std::bad_alloc();
  *reinterpret_cast<size_t*>(base) = rounded;
  std::memset(base + kHeaderBytes, 0, rounded);
  const size_t now = g_allocated += rounded;
  size_t peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
  return Buffer(base + kHeaderBytes, bytes, Device::CPU, &release_host);
}

MemoryStats CpuBackend::memory_stats() const {
  MemoryStats stats;
  stats.allocated_bytes = g_allocated.load();
  stats.peak_allocated_bytes = g_peak.load();
  return stats;
}

void CpuBackend::reset_peak_memory() { g_peak = g_allocated.load(); }

void CpuBackend::copy(Tensor src, Tensor dst) {
  require_host("copy", {&src, &dst});
  require(src.dtype == dst.dtype && src.numel() == dst.numel(), "copy",
          "src " + src.shape_string() + " " + dtype_name(src.dtype) + " vs dst " + dst.shape_string() + " " +
              dtype_name(dst.dtype));
  if (src.data != dst.data) std::memmove(dst.data, src.data, src.bytes());
}

void CpuBackend::cast(Tensor src, Tensor dst) {
  require_host("cast", {&src, &dst});
  require(src.numel() == dst.numel(), "cast", "src " + src.shape_string() + " vs dst " + dst.shape_string());
  convert_elements(src.data, src.dtype, dst.data, dst.dtype, static_cast<size_t>(src.numel()));
}

void CpuBackend::zero(Tensor t) {
  require_host("zero", {&t});
  std::memset(t.data, 0, t.bytes());
}

void CpuBackend::fill(Tensor t, float value) {
  Fp32Span s(t, Access::Write);
  for (int64_t i = 0; i < s.size(); ++i) s[i] = value;
}

void CpuBackend::scale(Tensor t, float factor) {
  Fp32Span s(t, Access::ReadWrite);
  for (int64_t i = 0; i < s.size(); ++i) s[i] *= factor;
}

double CpuBackend::sum_squares(Tensor t) {
  Fp32Span s(t, Access::Read);
  double sum = 0.0;
  for (int64_t i = 0; i < s.size(); ++i) sum += static_cast<double>(s[i]) * s[i];
  return sum;
}

void CpuBackend::add(Tensor out, Tensor a, Tensor b) {
  require(out.numel() == a.numel() && out.numel() == b.numel(), "add",
          out.shape_string() + " = " + a.shape_string() + " + " + b.shape_string());
  Fp32Span sa(a, Access::Read), sb(b, Access::Read), so(out, Access::Write);
  for (int64_t i = 0; i < so.size(); ++i) so[i] = sa[i] + sb[i];
}

namespace {
constexpr float kGeluScale = 0.7978845608028654f;  // √(2/π)
constexpr float kGeluCubic = 0.044715f;
}  // namespace

void CpuBackend::gelu_forward(Tensor out, Tensor inp) {
  require(out.numel() == inp.numel(), "gelu_forward", out.shape_string() + " vs " + inp.shape_string());
  Fp32Span x(inp, Access::Read), y(out, Access::Write);
  for (int64_t i = 0; i < y.size(); ++i) {
    const float v = x[i];
    // Same operation order as HF's NewGELUActivation, so fp32 results agree closely.
    const float inner = kGeluScale * (v + kGeluCubic * (v * v * v));
    y[i] = (0.5f * v) * (1.0f + std::tanh(inner));
  }
}

void CpuBackend::gelu_backward(Tensor dinp, Tensor dout, Tensor inp) {
  require(dinp.numel() == inp.numel() && dout.numel() == inp.numel(), "gelu_backward",
          dinp.shape_string() + ", " + dout.shape_string() + ", " + inp.shape_string());
  Fp32Span x(inp, Access::Read), dy(dout, Access::Read), dx(dinp, Access::Write);
  for (int64_t i = 0; i < dx.size(); ++i) {
    const float v = x[i];
    const float t = std::tanh(kGeluScale * (v + kGeluCubic * (v * v * v)));
    const float dinner = kGeluScale * (1.0f + 3.0f * kGeluCubic * v * v);
    const float local = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * dinner;
    dx[i] = dy[i] * local;
  }
}

void CpuBackend::embedding_forward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe, int64_t vocab_start,
                                   int vocab_size) {
  const char* op = "embedding_forward";
  require_host(op, {&out, &tokens});
  const EmbeddingShape s = embedding_shape(op, out, tokens, wte, wpe, vocab_start, vocab_size);
  const int64_t B = s.batch, T = s.seq, C = s.channels, rows = s.rows;
  Fp32Span e(wte, Access::Read), p(wpe, Access::Read), o(out, Access::Write);
  const int32_t* tok = tokens.as<int32_t>();
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      const int32_t id = tok[b * T + t];
      if (id < 0 || id >= vocab_size) {
        throw UserError("token id " + std::to_string(id) + " at batch row " + std::to_string(b) + ", position " +
                        std::to_string(t) + " is outside the embedding table [0, " + std::to_string(vocab_size) +
                        "): the data was encoded with a larger vocabulary than model.vocab_size");
      }
      const int64_t local = int64_t{id} - vocab_start;
      const float* er = local >= 0 && local < rows ? e.data() + local * C : nullptr;
      const float* pr = p.defined() ? p.data() + t * C : nullptr;
      float* orow = o.data() + (b * T + t) * C;
      for (int64_t c = 0; c < C; ++c) orow[c] = (er ? er[c] : 0.0f) + (pr ? pr[c] : 0.0f);
    }
  }
}

namespace {

// table (rows, C) += the rows of grads (n, C) by row_of[i] (−1: skipped), in the order of
// kEmbeddingGradPiece (backend.h).
void add_rows_in_pieces(float* table, int64_t rows, int64_t channels, const float* grads,
                        const std::vector<int64_t>& row_of) {
  // A stable counting sort of the positions by row: `sorted` is the (row, position) order.
  std::vector<int64_t> first(static_cast<size_t>(rows) + 1, 0);
  for (int64_t row : row_of)
    if (row >= 0) ++first[static_cast<size_t>(row) + 1];
  for (int64_t r = 0; r < rows; ++r) first[static_cast<size_t>(r) + 1] += first[static_cast<size_t>(r)];
  std::vector<int64_t> sorted(static_cast<size_t>(first.back())), next(first.begin(), first.end() - 1);
  for (size_t i = 0; i < row_of.size(); ++i)
    if (row_of[i] >= 0) sorted[static_cast<size_t>(next[static_cast<size_t>(row_of[i])]++)] = static_cast<int64_t>(i);
  std::vector<float> piece(static_cast<size_t>(channels));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t begin = first[static_cast<size_t>(r)], end = first[static_cast<size_t>(r) + 1];
    float* row = table + r * channels;
    std::fill(piece.begin(), piece.end(), 0.0f);
    for (int64_t k = begin; k < end; ++k) {
      if (k > begin && k % kEmbeddingGradPiece == 0) {
        for (int64_t c = 0; c < channels; ++c) row[c] += piece[static_cast<size_t>(c)];
        std::fill(piece.begin(), piece.end(), 0.0f);
      }
      const float* grad = grads + sorted[static_cast<size_t>(k)] * channels;
      for (int64_t c = 0; c < channels; ++c) piece[static_cast<size_t>(c)] += grad[c];
    }
    if (end > begin)
      for (int64_t c = 0; c < channels; ++c) row[c] += piece[static_cast<size_t>(c)];
  }
}

}  // namespace

void CpuBackend::embedding_backward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens, int64_t vocab_start,
                                    int vocab_size) {
  const char* op = "embedding_backward";
  require_host(op, {&dout, &tokens});
  const EmbeddingShape s = embedding_shape(op, dout, tokens, dwte, dwpe, vocab_start, vocab_size);
  const int64_t B = s.batch, T = s.seq, C = s.channels, rows = s.rows;
  Fp32Span de(dwte, Access::ReadWrite), dp(dwpe, Access::ReadWrite), g(dout, Access::Read);
  const int32_t* tok = tokens.as<int32_t>();
  std::vector<int64_t> row_of(static_cast<size_t>(B * T));
  for (int64_t i = 0; i < B * T; ++i) {
    require(tok[i] >= 0 && tok[i] < vocab_size, op,
            "token id " + std::to_string(tok[i]) + " outside [0, " + std::to_string(vocab_size) + ")");
    const int64_t local = int64_t{tok[i]} - vocab_start;
    row_of[static_cast<size_t>(i)] = local >= 0 && local < rows ? local : -1;
  }
  add_rows_in_pieces(de.data(), rows, C, g.data(), row_of);
  if (!dp.defined()) return;
  for (int64_t b = 0; b < B; ++b) {  // dwpe: sequential over (b, t)
    for (int64_t t = 0; t < T; ++t) {
      const float* grow = g.data() + (b * T + t) * C;
      float* prow = dp.data() + t * C;
      for (int64_t c = 0; c < C; ++c) prow[c] += grow[c];
    }
  }
}

void CpuBackend::adamw_update(Tensor param, Tensor grad, Tensor exp_avg, Tensor exp_avg_sq, Tensor param_copy,
                              const AdamWArgs& args) {
  const int64_t n = param.numel();
  require(grad.numel() == n && exp_avg.numel() == n && exp_avg_sq.numel() == n &&
              (!param_copy.defined() || param_copy.numel() == n),
          "adamw_update",
          "param " + param.shape_string() + ", grad " + grad.shape_string() + ", exp_avg " +
              exp_avg.shape_string() + ", exp_avg_sq " + exp_avg_sq.shape_string() +
              (param_copy.defined() ? ", param_copy " + param_copy.shape_string() : std::string()));
  require(args.bias_correction1 > 0 && args.bias_correction2 > 0, "adamw_update",
          "bias corrections must be positive (1 − β^t with t ≥ 1)");
  const AdamWFloats f = adamw_floats(args);
  {  // the spans write param back when they close, before the copy below reads it
    Fp32Span p(param, Access::ReadWrite), g(grad, Access::Read);
    Fp32Span m(exp_avg, Access::ReadWrite), v(exp_avg_sq, Access::ReadWrite);
    for (int64_t i = 0; i < n; ++i) {
      float gi = g[i] * f.grad_scale;
      float pi = p[i];
      if (args.decoupled) {
        pi = pi * f.decay;                  // param.mul_(1 − lr·wd)
      } else {
        gi = std::fma(pi, f.l2, gi);        // grad.add(param, alpha=wd)
      }
      // torch's CPU kernels for add_(alpha) and addcmul_ are compiled with FMA contraction,
      // so the fused forms below are what torch.optim actually computes (bit for bit).
      const float mi = std::fma(gi, f.one_minus_beta1, m[i] * f.beta1);        // exp_avg.mul_(β1).add_(g, alpha=1 − β1)
      const float vi = std::fma(f.one_minus_beta2 * gi, gi, v[i] * f.beta2);  // exp_avg_sq.mul_(β2).addcmul_(g, g, value=1 − β2)
      const float denom = std::sqrt(vi) / f.bc2_sqrt + f.eps;
      p[i] = pi + -f.step_size * mi / denom;  // param.addcdiv_(exp_avg, denom, value=−step_size)
      m[i] = mi;
      v[i] = vi;
    }
  }
  if (param_copy.defined()) cast(param, param_copy);
}

}  // namespace cpu

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<cpu::CpuBackend>(); }

}  // namespace strata
