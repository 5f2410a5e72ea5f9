// CPU backend, part 2: the GEMM-shaped layers. GEMMs (including attention per (batch, head))
// go through OpenBLAS; reductions that feed a single value (means, variances, softmax sums,
// bias and LN parameter gradients) accumulate in double for a tight fp32 reference.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/fp32_span.h"

namespace strata::cpu {
namespace {

constexpr double kLayerNormEps = 1e-5;

CBLAS_TRANSPOSE blas_trans(bool t) { return t ? CblasTrans : CblasNoTrans; }

// Row-major sgemm on raw pointers with explicit leading dimensions.
void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, blas_trans(trans_a), blas_trans(trans_b), static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta, c,
              static_cast<int>(ldc));
}

// Adds a double per-column sum into a float vector with a single rounding.
void add_column_sums(float* dst, const std::vector<double>& sums) {
  for (size_t j = 0; j < sums.size(); ++j) dst[j] = static_cast<float>(dst[j] + sums[j]);
}

}  // namespace

void CpuBackend::matmul(Tensor out, Tensor a, Tensor b, Tensor bias, bool trans_a, bool trans_b, bool accumulate) {
  const char* op = "matmul";
  const int64_t m = rows_of(out), n = cols_of(out);
  const int64_t a_rows = rows_of(a), a_cols = cols_of(a), b_rows = rows_of(b), b_cols = cols_of(b);
  const int64_t op_a_rows = trans_a ? a_cols : a_rows, k = trans_a ? a_rows : a_cols;
  const int64_t op_b_rows = trans_b ? b_cols : b_rows, op_b_cols = trans_b ? b_rows : b_cols;
  require(op_a_rows == m && op_b_rows == k && op_b_cols == n, op,
          "out " + out.shape_string() + " = a" + (trans_a ? "ᵀ " : " ") + a.shape_string() + " · b" +
              (trans_b ? "ᵀ " : " ") + b.shape_string() + " does not fit");
  constexpr int64_t kBlasMax = std::numeric_limits<int>::max();  // cblas takes int sizes
  require(m <= kBlasMax && n <= kBlasMax && k <= kBlasMax && a_cols <= kBlasMax && b_cols <= kBlasMax, op,
          "dimensions exceed the BLAS int range");
  require(!bias.defined() || bias.numel() == n, op, "bias " + bias.shape_string() + " for " + std::to_string(n) + " columns");
  Fp32Span sa(a, Access::Read), sb(b, Access::Read), sbias(bias, Access::Read);
  Fp32Span so(out, accumulate ? Access::ReadWrite : Access::Write);
  if (m == 0 || n == 0) return;
  float beta = accumulate ? 1.0f : 0.0f;
  if (sbias.defined() && !accumulate) {  // seed the output with the bias: one pass, no extra add
    for (int64_t i = 0; i < m; ++i) std::copy(sbias.data(), sbias.data() + n, so.data() + i * n);
    beta = 1.0f;
  }
  if (k > 0) {
    sgemm(trans_a, trans_b, m, n, k, 1.0f, sa.data(), a_cols, sb.data(), b_cols, beta, so.data(), n);
  } else if (beta == 0.0f) {
    std::fill(so.data(), so.data() + m * n, 0.0f);
  }
  if (sbias.defined() && accumulate) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) so[i * n + j] += sbias[j];
  }
}

void CpuBackend::bias_backward(Tensor dbias, Tensor dout) {
  const int64_t n = cols_of(dout), m = rows_of(dout);
  require(dbias.numel() == n, "bias_backward", "dbias " + dbias.shape_string() + " for dout " + dout.shape_string());
  Fp32Span db(dbias, Access::ReadWrite), g(dout, Access::Read);
  std::vector<double> sums(static_cast<size_t>(n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) sums[static_cast<size_t>(j)] += g[i * n + j];
  add_column_sums(db.data(), sums);
}

void CpuBackend::layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight, Tensor bias) {
  const char* op = "layernorm_forward";
  const int64_t n = rows_of(inp), c = cols_of(inp);
  require(out.numel() == inp.numel() && weight.numel() == c && bias.numel() == c, op,
          "out " + out.shape_string() + ", inp " + inp.shape_string() + ", weight " + weight.shape_string() +
              ", bias " + bias.shape_string());
  require((!mean.defined() || mean.numel() == n) && (!rstd.defined() || rstd.numel() == n), op,
          "mean/rstd must have " + std::to_string(n) + " elements");
  Fp32Span x(inp, Access::Read), w(weight, Access::Read), b(bias, Access::Read);
  Fp32Span y(out, Access::Write), sm(mean, Access::Write), sr(rstd, Access::Write);
  for (int64_t i = 0; i < n; ++i) {
    const float* row = x.data() + i * c;
    double sum = 0.0;
    for (int64_t j = 0; j < c; ++j) sum += row[j];
    const double mu = sum / static_cast<double>(c);
    double sq = 0.0;
    for (int64_t j = 0; j < c; ++j) sq += (row[j] - mu) * (row[j] - mu);
    const double rs = 1.0 / std::sqrt(sq / static_cast<double>(c) + kLayerNormEps);
    float* yrow = y.data() + i * c;
    for (int64_t j = 0; j < c; ++j) {
      const float normed = static_cast<float>((row[j] - mu) * rs);
      yrow[j] = normed * w[j] + b[j];
    }
    if (sm.defined()) sm[i] = static_cast<float>(mu);
    if (sr.defined()) sr[i] = static_cast<float>(rs);
  }
}

void CpuBackend::layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                                    Tensor weight, Tensor mean, Tensor rstd) {
  const char* op = "layernorm_backward";
  const int64_t n = rows_of(inp), c = cols_of(inp);
  require(dinp.numel() == inp.numel() && dout.numel() == inp.numel() && weight.numel() == c &&
              dweight.numel() == c && dbias.numel() == c && mean.numel() == n && rstd.numel() == n,
          op, "dinp " + dinp.shape_string() + ", dout " + dout.shape_string() + ", inp " + inp.shape_string());
  Fp32Span x(inp, Access::Read), w(weight, Access::Read), g(dout, Access::Read);
  Fp32Span sm(mean, Access::Read), sr(rstd, Access::Read);
  Fp32Span dx(dinp, Access::ReadWrite), dw(dweight, Access::ReadWrite), db(dbias, Access::ReadWrite);
  std::vector<double> dw_sum(static_cast<size_t>(c), 0.0), db_sum(static_cast<size_t>(c), 0.0);
  std::vector<double> normed(static_cast<size_t>(c));
  for (int64_t i = 0; i < n; ++i) {
    const float* row = x.data() + i * c;
    const float* grow = g.data() + i * c;
    const double mu = sm[i], rs = sr[i];
    // dx = rstd · (dn − mean(dn) − n̂ · mean(dn · n̂)), dn = dout · weight.
    double dn_mean = 0.0, dn_dot_normed = 0.0;
    for (int64_t j = 0; j < c; ++j) {
      const size_t js = static_cast<size_t>(j);
      normed[js] = (row[j] - mu) * rs;
      const double dn = static_cast<double>(grow[j]) * w[j];
      dn_mean += dn;
      dn_dot_normed += dn * normed[js];
      dw_sum[js] += static_cast<double>(grow[j]) * normed[js];
      db_sum[js] += grow[j];
    }
    dn_mean /= static_cast<double>(c);
    dn_dot_normed /= static_cast<double>(c);
    float* dxrow = dx.data() + i * c;
    for (int64_t j = 0; j < c; ++j) {
      const double dn = static_cast<double>(grow[j]) * w[j];
      const double d = (dn - dn_mean - normed[static_cast<size_t>(j)] * dn_dot_normed) * rs;
      dxrow[j] = static_cast<float>(dxrow[j] + d);
    }
  }
  add_column_sums(dw.data(), dw_sum);
  add_column_sums(db.data(), db_sum);
}

namespace {

struct AttentionDims {
  int64_t batch, seq, channels, heads, head_size;
};

AttentionDims attention_dims(const char* op, const Tensor& qkv, int n_head) {
  require(qkv.ndim == 3 && qkv.dim(2) % 3 == 0, op, "qkv must be (B, T, 3C), got " + qkv.shape_string());
  const int64_t c = qkv.dim(2) / 3;
  require(n_head > 0 && c % n_head == 0, op, std::to_string(c) + " channels do not split into " + std::to_string(n_head) + " heads");
  return {qkv.dim(0), qkv.dim(1), c, n_head, c / n_head};
}

}  // namespace

// Attention runs in double internally (inputs widened, outputs rounded once): as the fp32
// reference it must hold 1e-5 of exact arithmetic, and fp32 sums over a thousand keys with
// scores near the log-sum-exp do not (about 2e-5 at T = 1024). The scale stays the fp32 value
// the CUDA kernels use.
namespace {

double attention_scale(int64_t head_size) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_size)));
}

// (T, hs) head slice with row stride `stride` ↔ a dense double matrix.
void gather_head(const float* src, int64_t stride, int64_t rows, int64_t cols, double* dst) {
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t e = 0; e < cols; ++e) dst[t * cols + e] = src[t * stride + e];
}
// The q, k and v slices of one head from qkv (B, T, 3C), starting at the head's q column.
void gather_qkv(const float* qkv_head, int64_t channels, int64_t rows, int64_t cols, double* q, double* k,
                double* v) {
  gather_head(qkv_head, 3 * channels, rows, cols, q);
  gather_head(qkv_head + channels, 3 * channels, rows, cols, k);
  gather_head(qkv_head + 2 * channels, 3 * channels, rows, cols, v);
}
void scatter_head(const double* src, int64_t rows, int64_t cols, float* dst, int64_t stride) {
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t e = 0; e < cols; ++e) dst[t * stride + e] = static_cast<float>(src[t * cols + e]);
}

// Row-major dgemm on dense matrices: c = alpha · op(a) · op(b).
void dgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
           const double* b, double* c) {
  cblas_dgemm(CblasRowMajor, blas_trans(trans_a), blas_trans(trans_b), static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), alpha, a, static_cast<int>(trans_a ? m : k), b, static_cast<int>(trans_b ? k : n),
              0.0, c, static_cast<int>(n));
}

}  // namespace

void CpuBackend::attention_forward(Tensor out, Tensor lse, Tensor qkv, int n_head) {
  const char* op = "attention_forward";
  const AttentionDims d = attention_dims(op, qkv, n_head);
  const int64_t T = d.seq, C = d.channels, hs = d.head_size;
  require(out.numel() == d.batch * T * C && lse.numel() == d.batch * d.heads * T, op,
          "out " + out.shape_string() + " / lse " + lse.shape_string() + " for qkv " + qkv.shape_string());
  Fp32Span sqkv(qkv, Access::Read), so(out, Access::Write), slse(lse, Access::Write);
  scores_.resize(static_cast<size_t>(T * T));
  heads_.resize(static_cast<size_t>(4 * T * hs));
  double* scores = scores_.data();
  double *q = heads_.data(), *k = q + T * hs, *v = k + T * hs, *o = v + T * hs;
  const double scale = attention_scale(hs);
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t h = 0; h < d.heads; ++h) {
      gather_qkv(sqkv.data() + b * T * 3 * C + h * hs, C, T, hs, q, k, v);
      dgemm(false, true, T, T, hs, scale, q, k, scores);  // (T, T) = q·kᵀ/√hs
      float* lse_row = slse.data() + (b * d.heads + h) * T;
      for (int64_t i = 0; i < T; ++i) {
        double* row = scores + i * T;
        const double max = *std::max_element(row, row + i + 1);
        double sum = 0.0;
        for (int64_t j = 0; j <= i; ++j) {
          row[j] = std::exp(row[j] - max);
          sum += row[j];
        }
        for (int64_t j = 0; j <= i; ++j) row[j] /= sum;
        std::fill(row + i + 1, row + T, 0.0);  // causal mask
        lse_row[i] = static_cast<float>(max + std::log(sum));
      }
      dgemm(false, false, T, hs, T, 1.0, scores, v, o);
      scatter_head(o, T, hs, so.data() + b * T * C + h * hs, C);
    }
  }
}

void CpuBackend::attention_backward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse, int n_head) {
  const char* op = "attention_backward";
  const AttentionDims d = attention_dims(op, qkv, n_head);
  const int64_t T = d.seq, C = d.channels, hs = d.head_size;
  require(dqkv.numel() == qkv.numel() && dout.numel() == d.batch * T * C && out.numel() == dout.numel() &&
              lse.numel() == d.batch * d.heads * T,
          op, "dqkv " + dqkv.shape_string() + ", dout " + dout.shape_string() + ", lse " + lse.shape_string());
  Fp32Span sqkv(qkv, Access::Read), so(out, Access::Read), sdo(dout, Access::Read), slse(lse, Access::Read);
  Fp32Span sdqkv(dqkv, Access::Write);
  scores_.resize(static_cast<size_t>(T * T));
  dscores_.resize(static_cast<size_t>(T * T));
  heads_.resize(static_cast<size_t>(6 * T * hs));
  double* probs = scores_.data();
  double* dprobs = dscores_.data();
  double *q = heads_.data(), *k = q + T * hs, *v = k + T * hs, *dy = v + T * hs, *o = dy + T * hs,
         *grad = o + T * hs;
  const double scale = attention_scale(hs);
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t h = 0; h < d.heads; ++h) {
      const int64_t qkv_offset = b * T * 3 * C + h * hs, out_offset = b * T * C + h * hs;
      gather_qkv(sqkv.data() + qkv_offset, C, T, hs, q, k, v);
      gather_head(sdo.data() + out_offset, C, T, hs, dy);
      gather_head(so.data() + out_offset, C, T, hs, o);
      float* dq = sdqkv.data() + qkv_offset;
      const float* lse_row = slse.data() + (b * d.heads + h) * T;
      // Recompute the probabilities from the saved log-sum-exp instead of storing them.
      dgemm(false, true, T, T, hs, scale, q, k, probs);
      for (int64_t i = 0; i < T; ++i) {
        double* row = probs + i * T;
        for (int64_t j = 0; j <= i; ++j) row[j] = std::exp(row[j] - lse_row[i]);
        std::fill(row + i + 1, row + T, 0.0);
      }
      dgemm(false, true, T, T, hs, 1.0, dy, v, dprobs);  // dP = dO·vᵀ
      // dS = P ∘ (dP − rowsum(dO ∘ O)); rowsum(dO ∘ O) equals rowsum(P ∘ dP).
      for (int64_t i = 0; i < T; ++i) {
        double row_dot = 0.0;
        for (int64_t e = 0; e < hs; ++e) row_dot += dy[i * hs + e] * o[i * hs + e];
        const double* prow = probs + i * T;
        double* drow = dprobs + i * T;
        for (int64_t j = 0; j <= i; ++j) drow[j] = prow[j] * (drow[j] - row_dot);
        std::fill(drow + i + 1, drow + T, 0.0);
      }
      dgemm(true, false, T, hs, T, 1.0, probs, dy, grad);  // dV = Pᵀ·dO
      scatter_head(grad, T, hs, dq + 2 * C, 3 * C);
      dgemm(false, false, T, hs, T, scale, dprobs, k, grad);  // dQ = dS·k/√hs
      scatter_head(grad, T, hs, dq, 3 * C);
      dgemm(true, false, T, hs, T, scale, dprobs, q, grad);  // dK = dSᵀ·q/√hs
      scatter_head(grad, T, hs, dq + C, 3 * C);
    }
  }
}

void CpuBackend::softmax_cross_entropy(Tensor logits, Tensor losses, Tensor targets, int vocab_size,
                                       bool write_dlogits, float dloss) {
  const char* op = "softmax_cross_entropy";
  require_host(op, {&targets});
  const int64_t n = rows_of(logits), vp = cols_of(logits), V = vocab_size;
  require(V > 0 && V <= vp, op, "vocab_size " + std::to_string(V) + " for " + std::to_string(vp) + " logit columns");
  require(targets.dtype == DType::I32 && targets.numel() == n, op,
          "targets must be I32 with " + std::to_string(n) + " elements, got " + targets.shape_string());
  require(!losses.defined() || losses.numel() == n, op, "losses " + losses.shape_string());
  Fp32Span sl(logits, write_dlogits ? Access::ReadWrite : Access::Read), sloss(losses, Access::Write);
  const int32_t* tgt = targets.as<int32_t>();
  for (int64_t i = 0; i < n; ++i) {
    const int32_t target = tgt[i];
    if (target < 0 || target >= V) {
      throw UserError("target token id " + std::to_string(target) + " at row " + std::to_string(i) +
                      " is outside the vocabulary [0, " + std::to_string(V) +
                      "): the data was encoded with a larger vocabulary than model.vocab_size");
    }
    float* row = sl.data() + i * vp;
    const float max = *std::max_element(row, row + V);
    double sum = 0.0;
    for (int64_t j = 0; j < V; ++j) sum += std::exp(row[j] - max);
    const double log_sum = std::log(sum);
    if (sloss.defined()) sloss[i] = static_cast<float>((max + log_sum) - row[target]);
    if (write_dlogits) {
      for (int64_t j = 0; j < V; ++j) {
        const float prob = static_cast<float>(std::exp(row[j] - max) / sum);
        row[j] = dloss * (j == target ? prob - 1.0f : prob);
      }
      std::fill(row + V, row + vp, 0.0f);
    }
  }
}

}  // namespace strata::cpu
