// CPU backend forward ops and whole-tensor ops against direct double-precision formulas on
// random inputs.
#include "catch_compat.h"

#include <algorithm>
#include <cmath>

#include "backend/backend.h"
#include "backend_test_util.h"
#include "reference_ops.h"

using namespace strata;
using namespace strata::test;

TEST_CASE("matmul matches the naive product for every transpose, bias and accumulate combination") {
  auto backend = make_cpu_backend();
  const int m = 7, n = 5, k = 9;
  for (int variant = 0; variant < 16; ++variant) {
    const bool trans_a = variant & 1, trans_b = variant & 2, with_bias = variant & 4, accumulate = variant & 8;
    HostTensor a(trans_a ? std::initializer_list<int64_t>{k, m} : std::initializer_list<int64_t>{m, k});
    HostTensor b(trans_b ? std::initializer_list<int64_t>{n, k} : std::initializer_list<int64_t>{k, n});
    HostTensor bias({n}), out({m, n});
    fill_normal(a.values, 10 + variant);
    fill_normal(b.values, 20 + variant);
    fill_normal(bias.values, 30 + variant);
    fill_normal(out.values, 40 + variant);
    Vec expected = ref_matmul(a.as_double(), b.as_double(), m, n, k, trans_a, trans_b);
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        double& e = expected[static_cast<size_t>(i * n + j)];
        if (with_bias) e += bias[static_cast<size_t>(j)];
        if (accumulate) e += out[static_cast<size_t>(i * n + j)];
      }
    backend->matmul(out.tensor, a.tensor, b.tensor, with_bias ? bias.tensor : Tensor(), trans_a, trans_b, accumulate);
    check_close(out.values, expected, 1e-5, 1e-6, "matmul variant " + std::to_string(variant));
  }
}

TEST_CASE("matmul reads leading dims as rows and rejects shapes that do not fit") {
  auto backend = make_cpu_backend();
  HostTensor x({2, 3, 4}), w({4, 6}), out({2, 3, 6});
  fill_normal(x.values, 1);
  fill_normal(w.values, 2);
  backend->linear_forward(out.tensor, x.tensor, w.tensor, Tensor());
  check_close(out.values, ref_matmul(x.as_double(), w.as_double(), 6, 6, 4, false, false), 1e-5, 1e-6, "3-D linear");
  HostTensor bad({5, 6});
  CHECK_THROWS_AS(backend->matmul(bad.tensor, x.tensor, w.tensor, Tensor(), false, false, false), std::invalid_argument);
}

TEST_CASE("bias_backward accumulates column sums and add is elementwise") {
  auto backend = make_cpu_backend();
  HostTensor dout({6, 4}), dbias({4}, 0.5f), a({6, 4}), sum({6, 4});
  fill_normal(dout.values, 3);
  fill_normal(a.values, 4);
  backend->bias_backward(dbias.tensor, dout.tensor);
  for (int j = 0; j < 4; ++j) {
    double s = 0.5;
    for (int i = 0; i < 6; ++i) s += dout[static_cast<size_t>(i * 4 + j)];
    CHECK(dbias[static_cast<size_t>(j)] == Approx(s).epsilon(1e-6));
  }
  backend->add(sum.tensor, a.tensor, dout.tensor);
  for (size_t i = 0; i < sum.size(); ++i) CHECK(sum[i] == a[i] + dout[i]);
  backend->add(a.tensor, a.tensor, dout.tensor);  // in place
  CHECK(a.values == sum.values);
}

TEST_CASE("layernorm forward matches the formula and saves mean and rstd") {
  auto backend = make_cpu_backend();
  const int n = 6, c = 32;
  HostTensor x({n, c}), w({c}), b({c}), out({n, c}), mean({n}), rstd({n});
  fill_normal(x.values, 5, 3.0f);
  for (float& v : x.values) v += 2.0f;  // a non-zero mean exercises the centring
  fill_normal(w.values, 6);
  fill_normal(b.values, 7);
  Vec ref_mean, ref_rstd;
  const Vec expected = ref_layernorm(x.as_double(), w.as_double(), b.as_double(), n, c, &ref_mean, &ref_rstd);
  backend->layernorm_forward(out.tensor, mean.tensor, rstd.tensor, x.tensor, w.tensor, b.tensor);
  check_close(out.values, expected, 1e-5, 1e-6, "layernorm out");
  check_close(mean.values, ref_mean, 1e-6, 1e-7, "layernorm mean");
  check_close(rstd.values, ref_rstd, 1e-6, 0, "layernorm rstd");
}

TEST_CASE("gelu forward matches the tanh approximation") {
  auto backend = make_cpu_backend();
  HostTensor x({1000}), y({1000});
  fill_normal(x.values, 8, 3.0f);
  backend->gelu_forward(y.tensor, x.tensor);
  Vec expected;
  for (float v : x.values) expected.push_back(ref_gelu(v));
  check_close(y.values, expected, 1e-6, 1e-7, "gelu");
  CHECK(y[0] == Approx(ref_gelu(x[0])));
}

TEST_CASE("causal attention forward matches softmax(q·kᵀ/√hs)·v with a causal mask") {
  auto backend = make_cpu_backend();
  const int B = 2, T = 5, C = 12, NH = 3;
  HostTensor qkv({B, T, 3 * C}), out({B, T, C}), lse({B, NH, T});
  fill_normal(qkv.values, 9);
  Vec ref_lse;
  const Vec expected = ref_attention(qkv.as_double(), B, T, C, NH, &ref_lse);
  backend->attention_forward(out.tensor, lse.tensor, qkv.tensor, NH);
  check_close(out.values, expected, 1e-5, 1e-6, "attention out");
  check_close(lse.values, ref_lse, 1e-6, 1e-6, "attention lse");
  // The first position attends only to itself: its output is its own value vector.
  for (int h = 0; h < NH; ++h)
    for (int e = 0; e < C / NH; ++e) CHECK(out[static_cast<size_t>(h * 4 + e)] == Approx(qkv[static_cast<size_t>(2 * C + h * 4 + e)]));
}

TEST_CASE("embedding forward adds token and position rows, bad ids are user errors") {
  auto backend = make_cpu_backend();
  const int B = 2, T = 3, V = 5, C = 4;
  HostTensor wte({V, C}), wpe({8, C}), out({B, T, C});
  fill_normal(wte.values, 11);
  fill_normal(wpe.values, 12);
  std::vector<int32_t> ids = {4, 0, 4, 2, 1, 3};
  Tensor tokens(ids.data(), DType::I32, {B, T});
  backend->embedding_forward(out.tensor, tokens, wte.tensor, wpe.tensor, 0, V);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c) {
        const size_t row = static_cast<size_t>(ids[static_cast<size_t>(b * T + t)]);
        CHECK(out[static_cast<size_t>((b * T + t) * C + c)] == wte[row * C + c] + wpe[static_cast<size_t>(t * C + c)]);
      }

  // Rows [2, 4) of the table: the vocabulary's other ids embed as their position alone.
  const int start = 2, rows = 2;
  HostTensor slice({rows, C});
  std::copy(wte.values.begin() + start * C, wte.values.begin() + (start + rows) * C, slice.values.begin());
  backend->embedding_forward(out.tensor, tokens, slice.tensor, wpe.tensor, start, V);
  for (int i = 0; i < B * T; ++i) {
    const int id = ids[static_cast<size_t>(i)], t = i % T;
    const bool inside = id >= start && id < start + rows;
    for (int c = 0; c < C; ++c) {
      const float token = inside ? wte[static_cast<size_t>(id * C + c)] : 0.0f;
      CHECK(out[static_cast<size_t>(i * C + c)] == token + wpe[static_cast<size_t>(t * C + c)]);
    }
  }

  // An id outside the vocabulary is the user's error whether or not the slice would hold it.
  ids[4] = V;
  CHECK_THROWS_WITH(backend->embedding_forward(out.tensor, tokens, wte.tensor, wpe.tensor, 0, V),
                    strata_catch::Contains("token id 5 at batch row 1, position 1 is outside the embedding table [0, 5)"));
  ids[4] = -1;
  CHECK_THROWS_AS(backend->embedding_forward(out.tensor, tokens, slice.tensor, wpe.tensor, start, V), UserError);
}

TEST_CASE("softmax cross-entropy gives per-token losses over the real vocabulary only") {
  auto backend = make_cpu_backend();
  const int n = 4, vp = 16, v = 11;
  HostTensor logits({n, vp}), losses({n});
  fill_normal(logits.values, 13, 2.0f);
  for (int i = 0; i < n; ++i)
    for (int j = v; j < vp; ++j) logits[static_cast<size_t>(i * vp + j)] = 50.0f;  // would dominate if not masked
  std::vector<int32_t> targets = {0, 10, 3, 7};
  Tensor target_tensor(targets.data(), DType::I32, {n});
  const Vec expected = ref_cross_entropy(logits.as_double(), targets, n, vp, v);
  backend->softmax_cross_entropy(logits.tensor, losses.tensor, target_tensor, v, false, 0.0f);
  check_close(losses.values, expected, 1e-6, 1e-6, "cross-entropy losses");
  targets[2] = v;  // a padding column is not a valid target
  CHECK_THROWS_AS(backend->softmax_cross_entropy(logits.tensor, losses.tensor, target_tensor, v, false, 0.0f), UserError);
}

TEST_CASE("copy, cast, zero, fill, scale and sum_squares") {
  auto backend = make_cpu_backend();
  HostTensor a({10}), b({10});
  fill_normal(a.values, 14);
  backend->copy(a.tensor, b.tensor);
  CHECK(a.values == b.values);
  double expected = 0.0;
  for (float x : a.values) expected += static_cast<double>(x) * x;
  CHECK(backend->sum_squares(a.tensor) == Approx(expected).epsilon(1e-12));
  backend->scale(b.tensor, -2.0f);
  for (size_t i = 0; i < b.size(); ++i) CHECK(b[i] == -2.0f * a[i]);
  backend->fill(b.tensor, 1.5f);
  CHECK(b.values == std::vector<float>(10, 1.5f));
  backend->zero(b.tensor);
  CHECK(b.values == std::vector<float>(10, 0.0f));

  std::vector<uint16_t> half(10), brain(10);
  Tensor f16(half.data(), DType::F16, {10}), bf16(brain.data(), DType::BF16, {10});
  backend->cast(a.tensor, f16);
  backend->cast(a.tensor, bf16);
  for (size_t i = 0; i < 10; ++i) {
    CHECK(half[i] == float_to_fp16(a[i]));
    CHECK(brain[i] == float_to_bf16(a[i]));
  }
  backend->cast(bf16, b.tensor);
  for (size_t i = 0; i < 10; ++i) CHECK(b[i] == bf16_to_float(brain[i]));
  CHECK_THROWS_AS(backend->copy(a.tensor, f16), std::invalid_argument);
}

TEST_CASE("allocate gives zeroed, aligned memory and bounded views") {
  auto backend = make_cpu_backend();
  Buffer buffer = backend->allocate(1000);
  CHECK(reinterpret_cast<uintptr_t>(buffer.data()) % 256 == 0);
  const unsigned char* bytes = static_cast<const unsigned char*>(buffer.data());
  for (size_t i = 0; i < 1000; ++i) REQUIRE(bytes[i] == 0);
  Tensor t = buffer.view(40, DType::F32, {10, 10});
  CHECK(static_cast<char*>(t.data) - static_cast<char*>(buffer.data()) == 40);
  CHECK_THROWS_AS(buffer.view(604, DType::F32, {10, 10}), std::out_of_range);
  Buffer moved = std::move(buffer);
  CHECK(buffer.data() == nullptr);
  CHECK(moved.bytes() == 1000);
}
