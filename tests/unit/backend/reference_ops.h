// Direct double-precision formulas for the backend's ops, written the plainest way (loops,
// no BLAS, no saved statistics), used as ground truth for forward results and, through
// central finite differences, for backward results.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace strata::test {

using Vec = std::vector<double>;

// op(a) (m, k) · op(b) (k, n); a stored (m, k) or (k, m) when trans_a; b (k, n) or (n, k).
inline Vec ref_matmul(const Vec& a, const Vec& b, int m, int n, int k, bool trans_a, bool trans_b) {
  Vec out(static_cast<size_t>(m * n), 0.0);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double s = 0.0;
      for (int p = 0; p < k; ++p) {
        const double av = trans_a ? a[static_cast<size_t>(p * m + i)] : a[static_cast<size_t>(i * k + p)];
        const double bv = trans_b ? b[static_cast<size_t>(j * k + p)] : b[static_cast<size_t>(p * n + j)];
        s += av * bv;
      }
      out[static_cast<size_t>(i * n + j)] = s;
    }
  return out;
}

inline Vec ref_layernorm(const Vec& x, const Vec& w, const Vec& b, int n, int c, Vec* mean = nullptr,
                         Vec* rstd = nullptr) {
  Vec out(x.size());
  if (mean) mean->assign(static_cast<size_t>(n), 0.0);
  if (rstd) rstd->assign(static_cast<size_t>(n), 0.0);
  for (int i = 0; i < n; ++i) {
    double mu = 0.0, var = 0.0;
    for (int j = 0; j < c; ++j) mu += x[static_cast<size_t>(i * c + j)];
    mu /= c;
    for (int j = 0; j < c; ++j) var += std::pow(x[static_cast<size_t>(i * c + j)] - mu, 2);
    var /= c;
    const double rs = 1.0 / std::sqrt(var + 1e-5);
    for (int j = 0; j < c; ++j) {
      const size_t e = static_cast<size_t>(i * c + j);
      out[e] = (x[e] - mu) * rs * w[static_cast<size_t>(j)] + b[static_cast<size_t>(j)];
    }
    if (mean) (*mean)[static_cast<size_t>(i)] = mu;
    if (rstd) (*rstd)[static_cast<size_t>(i)] = rs;
  }
  return out;
}

inline double ref_gelu(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

// Causal attention over qkv (B, T, 3C) → (B, T, C); lse (B, NH, T) when asked.
inline Vec ref_attention(const Vec& qkv, int B, int T, int C, int NH, Vec* lse = nullptr) {
  const int hs = C / NH;
  Vec out(static_cast<size_t>(B * T * C), 0.0);
  if (lse) lse->assign(static_cast<size_t>(B * NH * T), 0.0);
  auto at = [&](int b, int t, int part, int h, int e) {
    return qkv[static_cast<size_t>(((b * T + t) * 3 + part) * C + h * hs + e)];
  };
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int i = 0; i < T; ++i) {
        Vec s(static_cast<size_t>(i + 1));
        for (int j = 0; j <= i; ++j) {
          double dot = 0.0;
          for (int e = 0; e < hs; ++e) dot += at(b, i, 0, h, e) * at(b, j, 1, h, e);
          s[static_cast<size_t>(j)] = dot / std::sqrt(static_cast<double>(hs));
        }
        const double mx = *std::max_element(s.begin(), s.end());
        double sum = 0.0;
        for (double v : s) sum += std::exp(v - mx);
        for (int j = 0; j <= i; ++j) {
          const double p = std::exp(s[static_cast<size_t>(j)] - mx) / sum;
          for (int e = 0; e < hs; ++e) out[static_cast<size_t>((b * T + i) * C + h * hs + e)] += p * at(b, j, 2, h, e);
        }
        if (lse) (*lse)[static_cast<size_t>((b * NH + h) * T + i)] = mx + std::log(sum);
      }
  return out;
}

// Per-row cross-entropy over the first v of vp columns.
inline Vec ref_cross_entropy(const Vec& logits, const std::vector<int32_t>& targets, int n, int vp, int v) {
  Vec losses(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const double* row = logits.data() + static_cast<size_t>(i) * static_cast<size_t>(vp);
    const double mx = *std::max_element(row, row + v);
    double sum = 0.0;
    for (int j = 0; j < v; ++j) sum += std::exp(row[j] - mx);
    losses[static_cast<size_t>(i)] = mx + std::log(sum) - row[targets[static_cast<size_t>(i)]];
  }
  return losses;
}

inline double dot(const Vec& a, const Vec& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Central finite-difference gradient of f at x over the given element indices.
template <typename F>
Vec finite_difference(F f, Vec x, double step) {
  Vec grad(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + step;
    const double up = f(x);
    x[i] = saved - step;
    const double down = f(x);
    x[i] = saved;
    grad[i] = (up - down) / (2.0 * step);
  }
  return grad;
}

}  // namespace strata::test
