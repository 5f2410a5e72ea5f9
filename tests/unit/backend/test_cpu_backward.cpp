// CPU backend backward ops against central finite differences of the double-precision
// reference forward (for nonlinear ops) or the exact product formulas (for linear ones).
// Each check contracts the op's output with a random cotangent R, so L = Σ R ∘ f(x).
#include "catch_compat.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "backend/backend.h"
#include "backend_test_util.h"
#include "reference_ops.h"

using namespace strata;
using namespace strata::test;

namespace {
constexpr double kStep = 1e-5;
}

TEST_CASE("linear backward: dinp overwritten, dweight and dbias accumulated") {
  auto backend = make_cpu_backend();
  const int n = 6, in = 5, out_dim = 7;
  HostTensor x({n, in}), w({in, out_dim}), dout({n, out_dim}), dinp({n, in}, 99.0f), dw({in, out_dim}), db({out_dim});
  fill_normal(x.values, 1);
  fill_normal(w.values, 2);
  fill_normal(dout.values, 3);
  fill_normal(dw.values, 4);
  fill_normal(db.values, 5);
  Vec expected_dw = ref_matmul(x.as_double(), dout.as_double(), in, out_dim, n, true, false);
  for (size_t i = 0; i < expected_dw.size(); ++i) expected_dw[i] += dw[i];
  Vec expected_db = db.as_double();
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < out_dim; ++j) expected_db[static_cast<size_t>(j)] += dout[static_cast<size_t>(i * out_dim + j)];
  backend->linear_backward(dinp.tensor, dw.tensor, db.tensor, dout.tensor, x.tensor, w.tensor);
  check_close(dinp.values, ref_matmul(dout.as_double(), w.as_double(), n, in, out_dim, false, true), 1e-5, 1e-6, "dinp");
  check_close(dw.values, expected_dw, 1e-5, 1e-6, "dweight");
  check_close(db.values, expected_db, 1e-6, 1e-6, "dbias");
}

TEST_CASE("layernorm backward matches finite differences and accumulates") {
  auto backend = make_cpu_backend();
  const int n = 5, c = 16;
  HostTensor x({n, c}), w({c}), b({c}), out({n, c}), mean({n}), rstd({n}), r({n, c});
  HostTensor dx({n, c}), dw({c}), db({c});
  fill_normal(x.values, 6, 2.0f);
  fill_normal(w.values, 7);
  fill_normal(b.values, 8);
  fill_normal(r.values, 9);
  fill_normal(dx.values, 10);  // pre-existing gradient the op must add to
  const Vec dx_before = dx.as_double();
  backend->layernorm_forward(out.tensor, mean.tensor, rstd.tensor, x.tensor, w.tensor, b.tensor);
  backend->layernorm_backward(dx.tensor, dw.tensor, db.tensor, r.tensor, x.tensor, w.tensor, mean.tensor, rstd.tensor);
  const Vec R = r.as_double(), X = x.as_double(), W = w.as_double(), Bv = b.as_double();
  Vec fd_x = finite_difference([&](const Vec& v) { return dot(R, ref_layernorm(v, W, Bv, n, c)); }, X, kStep);
  for (size_t i = 0; i < fd_x.size(); ++i) fd_x[i] += dx_before[i];
  const Vec fd_w = finite_difference([&](const Vec& v) { return dot(R, ref_layernorm(X, v, Bv, n, c)); }, W, kStep);
  const Vec fd_b = finite_difference([&](const Vec& v) { return dot(R, ref_layernorm(X, W, v, n, c)); }, Bv, kStep);
  check_close(dx.values, fd_x, 1e-4, 1e-5, "layernorm dinp");
  check_close(dw.values, fd_w, 1e-4, 1e-5, "layernorm dweight");
  check_close(db.values, fd_b, 1e-4, 1e-5, "layernorm dbias");
}

TEST_CASE("gelu backward matches finite differences, also in place") {
  auto backend = make_cpu_backend();
  HostTensor x({500}), dout({500}), dx({500});
  fill_normal(x.values, 11, 3.0f);
  fill_normal(dout.values, 12);
  backend->gelu_backward(dx.tensor, dout.tensor, x.tensor);
  Vec expected;
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    expected.push_back(dout[i] * (ref_gelu(v + kStep) - ref_gelu(v - kStep)) / (2 * kStep));
  }
  check_close(dx.values, expected, 1e-4, 1e-6, "gelu dinp");
  backend->gelu_backward(dout.tensor, dout.tensor, x.tensor);
  CHECK(dout.values == dx.values);
}

TEST_CASE("attention backward matches finite differences of causal attention") {
  auto backend = make_cpu_backend();
  const int B = 2, T = 5, C = 8, NH = 2;
  HostTensor qkv({B, T, 3 * C}), out({B, T, C}), lse({B, NH, T}), r({B, T, C}), dqkv({B, T, 3 * C}, 7.0f);
  fill_normal(qkv.values, 13);
  fill_normal(r.values, 14);
  backend->attention_forward(out.tensor, lse.tensor, qkv.tensor, NH);
  backend->attention_backward(dqkv.tensor, r.tensor, qkv.tensor, out.tensor, lse.tensor, NH);
  const Vec R = r.as_double();
  const Vec fd = finite_difference([&](const Vec& v) { return dot(R, ref_attention(v, B, T, C, NH)); },
                                   qkv.as_double(), kStep);
  check_close(dqkv.values, fd, 1e-4, 1e-5, "attention dqkv");
  // Causality: with no cotangent on the last position's output, nothing flows into its
  // q, k or v (earlier outputs never see them), so their gradient is exactly zero.
  for (int b = 0; b < B; ++b)
    for (int e = 0; e < C; ++e) r[static_cast<size_t>(((b * T) + T - 1) * C + e)] = 0.0f;
  backend->attention_backward(dqkv.tensor, r.tensor, qkv.tensor, out.tensor, lse.tensor, NH);
  for (int b = 0; b < B; ++b)
    for (int e = 0; e < 3 * C; ++e) CHECK(dqkv[static_cast<size_t>((b * T + T - 1) * 3 * C + e)] == 0.0f);
}

TEST_CASE("softmax cross-entropy writes dloss·(softmax − onehot) and zero on padded columns") {
  auto backend = make_cpu_backend();
  const int n = 3, vp = 12, v = 9;
  const float dloss = 0.37f;
  HostTensor logits({n, vp});
  fill_normal(logits.values, 15, 2.0f);
  for (int i = 0; i < n; ++i) logits[static_cast<size_t>(i * vp + v + 1)] = 1e4f;  // huge padded logit
  std::vector<int32_t> targets = {8, 0, 4};
  Tensor target_tensor(targets.data(), DType::I32, {n});
  const Vec original = logits.as_double();
  backend->softmax_cross_entropy(logits.tensor, Tensor(), target_tensor, v, true, dloss);
  const Vec fd = finite_difference(
      [&](const Vec& x) {
        double total = 0.0;
        for (double l : ref_cross_entropy(x, targets, n, vp, v)) total += dloss * l;
        return total;
      },
      original, kStep);
  check_close(logits.values, fd, 1e-4, 1e-6, "dlogits");
  for (int i = 0; i < n; ++i)
    for (int j = v; j < vp; ++j) CHECK(logits[static_cast<size_t>(i * vp + j)] == 0.0f);
}

TEST_CASE("embedding backward adds each row's positions in pieces of the sorted order") {
  auto backend = make_cpu_backend();
  // 300 positions, most of them id 2: its run in the (id, position) sort crosses several
  // multiples of kEmbeddingGradPiece, so its row takes several pieces.
  const int B = 3, T = 100, V = 6, C = 3;
  HostTensor dout({B, T, C}), dwte({V, C}), dwpe({T + 2, C});
  fill_normal(dout.values, 16);
  fill_normal(dwte.values, 17);
  std::vector<int32_t> ids(static_cast<size_t>(B * T));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = i % 7 == 0 ? static_cast<int32_t>(i % 5) : 2;
  Tensor tokens(ids.data(), DType::I32, {B, T});

  // The order backend.h defines, written out: positions sorted stably by id; a piece ends where
  // the id changes or the sorted index reaches a multiple of the piece length.
  std::vector<int> sorted(ids.size());
  for (size_t i = 0; i < sorted.size(); ++i) sorted[i] = static_cast<int>(i);
  std::stable_sort(sorted.begin(), sorted.end(), [&](int a, int b) { return ids[a] < ids[b]; });
  std::vector<float> expected_wte = dwte.values, sequential_wte = dwte.values, expected_wpe = dwpe.values;
  std::vector<float> piece(C, 0.0f);
  for (size_t k = 0; k < sorted.size(); ++k) {
    const int pos = sorted[k], id = ids[static_cast<size_t>(pos)];
    for (int c = 0; c < C; ++c) piece[static_cast<size_t>(c)] += dout[static_cast<size_t>(pos * C + c)];
    const bool last = k + 1 == sorted.size() || ids[static_cast<size_t>(sorted[k + 1])] != id ||
                      (k + 1) % static_cast<size_t>(kEmbeddingGradPiece) == 0;
    if (!last) continue;
    for (int c = 0; c < C; ++c) expected_wte[static_cast<size_t>(id * C + c)] += piece[static_cast<size_t>(c)];
    std::fill(piece.begin(), piece.end(), 0.0f);
  }
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c) {
        const float g = dout[static_cast<size_t>((b * T + t) * C + c)];
        sequential_wte[static_cast<size_t>(ids[static_cast<size_t>(b * T + t)] * C + c)] += g;
        expected_wpe[static_cast<size_t>(t * C + c)] += g;
      }
  backend->embedding_backward(dwte.tensor, dwpe.tensor, dout.tensor, tokens, 0, V);
  CHECK(dwte.values == expected_wte);
  CHECK(dwpe.values == expected_wpe);
  CHECK(expected_wte != sequential_wte);  // the data tells the piece order from plain position order
}

TEST_CASE("embedding backward into a slice of the table adds only the slice's ids") {
  auto backend = make_cpu_backend();
  const int B = 2, T = 4, V = 6, C = 3, start = 2, rows = 3;
  HostTensor dout({B, T, C}), dwte({rows, C});
  fill_normal(dout.values, 18);
  fill_normal(dwte.values, 19);
  std::vector<int32_t> ids = {0, 2, 4, 5, 3, 2, 1, 4};
  Tensor tokens(ids.data(), DType::I32, {B, T});
  // Few positions: each row is one piece, summed from zero in position order.
  std::vector<float> expected = dwte.values;
  for (int r = 0; r < rows; ++r) {
    std::vector<float> piece(C, 0.0f);
    for (int i = 0; i < B * T; ++i)
      if (ids[static_cast<size_t>(i)] == start + r)
        for (int c = 0; c < C; ++c) piece[static_cast<size_t>(c)] += dout[static_cast<size_t>(i * C + c)];
    for (int c = 0; c < C; ++c) expected[static_cast<size_t>(r * C + c)] += piece[static_cast<size_t>(c)];
  }
  backend->embedding_backward(dwte.tensor, Tensor(), dout.tensor, tokens, start, V);  // no dwpe: positions skipped
  CHECK(dwte.values == expected);
  ids[3] = V;  // the forward reported it: here a programming error
  CHECK_THROWS_AS(backend->embedding_backward(dwte.tensor, Tensor(), dout.tensor, tokens, start, V),
                  std::invalid_argument);
}
