// The GPT-2 model on the CPU backend: init, loss at init, the hand-written backward against
// finite differences, recomputation, gradient accumulation, training progress and misuse.
#include "catch_compat.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/model.h"

using namespace strata;

namespace {

GptDims tiny_dims(int n_layer = 2) {
  GptDims d;
  d.n_layer = n_layer;
  d.n_head = 2;
  d.d_model = 16;
  d.vocab_size = 37;
  d.padded_vocab = 64;
  d.seq_len = 8;
  return d;
}

std::vector<int32_t> random_ids(size_t n, int vocab, uint64_t seed) {
  Rng rng(seed, 5);
  std::vector<int32_t> ids(n);
  for (int32_t& id : ids) id = static_cast<int32_t>(rng.below(static_cast<uint64_t>(vocab)));
  return ids;
}

std::vector<float> values(Tensor t) { return std::vector<float>(t.f32(), t.f32() + t.numel()); }

// Weights far from init (LN gains around 1, everything else N(0, scale²)) so every
// parameter has a gradient well above fp32 noise for the finite-difference check.
void randomize(Gpt& model, uint64_t seed, float scale) {
  Rng rng(seed, 9);
  for (const ParamSpec& spec : model.params()) {
    float* p = model.param_tensor(spec.name).f32();
    const bool ln_weight = spec.name.find("ln_") != std::string::npos && spec.shape.size() == 1 &&
                           spec.name.find(".weight") != std::string::npos;
    for (int64_t i = 0; i < spec.numel; ++i) p[i] = (ln_weight ? 1.0f : 0.0f) + scale * rng.normal();
  }
}

}  // namespace

TEST_CASE("init is a pure function of (seed, name, element index)") {
  auto backend = make_cpu_backend();
  Gpt a(tiny_dims(2), *backend, 2, ActivationRecompute::None);
  Gpt b(tiny_dims(3), *backend, 1, ActivationRecompute::Full);
  a.init_weights(7);
  b.init_weights(7);
  for (const char* name : {"wte.weight", "wpe.weight", "h.0.attn.c_attn.weight", "h.1.mlp.c_fc.weight"}) {
    CHECK(values(a.param_tensor(name)) == values(b.param_tensor(name)));
  }
  const std::vector<float> c_attn = values(a.param_tensor("h.1.attn.c_attn.weight"));
  const uint64_t stream = rng_stream_id("h.1.attn.c_attn.weight");
  for (uint64_t i : {0u, 5u, 700u}) CHECK(c_attn[i] == rng_normal(7, stream, i) * 0.02f);
  const float proj_std = static_cast<float>(0.02 / std::sqrt(2.0 * 2));
  CHECK(values(a.param_tensor("h.0.mlp.c_proj.weight"))[3] == rng_normal(7, rng_stream_id("h.0.mlp.c_proj.weight"), 3) * proj_std);
  CHECK(values(a.param_tensor("h.0.attn.c_attn.bias")) == std::vector<float>(48, 0.0f));
  CHECK(values(a.param_tensor("h.1.ln_2.weight")) == std::vector<float>(16, 1.0f));
  CHECK(values(a.param_tensor("ln_f.bias")) == std::vector<float>(16, 0.0f));
  const std::vector<float> wte = values(a.param_tensor("wte.weight"));
  CHECK(std::all_of(wte.begin() + 37 * 16, wte.end(), [](float v) { return v == 0.0f; }));
  CHECK(wte[36 * 16] != 0.0f);
  a.init_weights(8);
  CHECK(values(a.param_tensor("wpe.weight")) != values(b.param_tensor("wpe.weight")));

  // A tensor large enough to be drawn by several threads still holds exactly the formula.
  GptDims wide = tiny_dims(1);
  wide.d_model = 128;
  wide.vocab_size = 1000;
  wide.padded_vocab = 1024;
  Gpt c(wide, *backend, 1, ActivationRecompute::None);
  c.init_weights(9);
  const std::vector<float> big = values(c.param_tensor("wte.weight"));
  const uint64_t wte_stream = rng_stream_id("wte.weight");
  size_t mismatches = 0;
  for (size_t i = 0; i < big.size(); ++i) {
    const float expected = i < 1000 * 128 ? rng_normal(9, wte_stream, i) * 0.02f : 0.0f;
    mismatches += big[i] != expected;
  }
  CHECK(mismatches == 0);
}

TEST_CASE("loss at init is close to ln(vocab_size)") {
  auto backend = make_cpu_backend();
  Gpt model(tiny_dims(), *backend, 2, ActivationRecompute::None);
  model.init_weights(1);
  const std::vector<int32_t> tokens = random_ids(16, 37, 1), targets = random_ids(16, 37, 2);
  const float loss = model.forward(tokens.data(), targets.data(), 2, 8);
  CHECK(std::abs(loss - std::log(37.0f)) < 0.05f);
}

TEST_CASE("the model gradient matches finite differences in every parameter tensor") {
  auto backend = make_cpu_backend();
  const int B = 2, T = 8;
  Gpt model(tiny_dims(), *backend, B, ActivationRecompute::None);
  randomize(model, 3, 0.3f);
  const std::vector<int32_t> tokens = random_ids(B * T, 37, 3), targets = random_ids(B * T, 37, 4);
  model.zero_grads();
  model.forward(tokens.data(), targets.data(), B, T);
  model.backward(1.0f / (B * T));  // gradient of the mean loss
  Rng pick(11, 0);
  const float step = 1e-2f;
  for (const ParamSpec& spec : model.params()) {
    float* p = model.param_tensor(spec.name).f32();
    const std::vector<float> g = values(model.grad_tensor(spec.name));
    float g_max = 0.0f;
    for (float v : g) g_max = std::max(g_max, std::abs(v));
    std::vector<int64_t> sample = {std::max_element(g.begin(), g.end(), [](float x, float y) { return std::abs(x) < std::abs(y); }) - g.begin()};
    for (int i = 0; i < 4; ++i) sample.push_back(static_cast<int64_t>(pick.below(static_cast<uint64_t>(spec.numel))));
    for (int64_t i : sample) {
      const float saved = p[i];
      p[i] = saved + step;
      const double up = model.forward(tokens.data(), targets.data(), B, T);
      p[i] = saved - step;
      const double down = model.forward(tokens.data(), targets.data(), B, T);
      p[i] = saved;
      const double fd = (up - down) / (2.0 * step);
      INFO(spec.name << "[" << i << "]: analytic " << g[static_cast<size_t>(i)] << " finite difference " << fd
                     << " (largest |grad| in tensor " << g_max << ")");
      CHECK(std::abs(g[static_cast<size_t>(i)] - fd) <= 2e-3 * g_max + 1e-2 * std::abs(fd) + 2e-5);
    }
    CHECK(g_max > 0.0f);
  }
}

TEST_CASE("full recomputation gives bit-identical losses and gradients") {
  auto backend = make_cpu_backend();
  const int B = 2, T = 8;
  Gpt plain(tiny_dims(3), *backend, B, ActivationRecompute::None);
  Gpt recompute(tiny_dims(3), *backend, B, ActivationRecompute::Full);
  randomize(plain, 5, 0.2f);
  backend->copy(plain.params_flat(), recompute.params_flat());
  CHECK(recompute.activation_bytes() < plain.activation_bytes());
  for (uint64_t batch = 0; batch < 2; ++batch) {  // two micro-batches: accumulation too
    const std::vector<int32_t> tokens = random_ids(B * T, 37, 10 + batch), targets = random_ids(B * T, 37, 20 + batch);
    const float loss_plain = plain.forward(tokens.data(), targets.data(), B, T);
    const float loss_recompute = recompute.forward(tokens.data(), targets.data(), B, T);
    CHECK(loss_plain == loss_recompute);
    plain.backward(0.25f);
    recompute.backward(0.25f);
  }
  const Tensor ga = plain.grads_flat(), gb = recompute.grads_flat();
  REQUIRE(ga.numel() == gb.numel());
  CHECK(std::memcmp(ga.data, gb.data, ga.bytes()) == 0);
}

TEST_CASE("two micro-batches accumulate the same gradient as one batch of both") {
  auto backend = make_cpu_backend();
  const int B = 2, T = 8;
  const double dloss = 1.0 / (2 * B * T);
  Gpt model(tiny_dims(), *backend, 2 * B, ActivationRecompute::None);
  randomize(model, 6, 0.2f);
  const std::vector<int32_t> tokens = random_ids(2 * B * T, 37, 30), targets = random_ids(2 * B * T, 37, 31);
  const float loss_whole = model.forward(tokens.data(), targets.data(), 2 * B, T);
  model.backward(static_cast<float>(dloss));
  const std::vector<float> whole = values(model.grads_flat());
  model.zero_grads();
  const float loss_first = model.forward(tokens.data(), targets.data(), B, T);
  model.backward(static_cast<float>(dloss));
  const float loss_second = model.forward(tokens.data() + B * T, targets.data() + B * T, B, T);
  model.backward(static_cast<float>(dloss));
  const std::vector<float> accumulated = values(model.grads_flat());
  CHECK(loss_whole == Approx((loss_first + loss_second) / 2).epsilon(1e-6));
  for (const ParamSpec& spec : model.params()) {
    float g_max = 0.0f, worst = 0.0f;
    for (int64_t i = spec.offset; i < spec.offset + spec.numel; ++i) {
      g_max = std::max(g_max, std::abs(whole[static_cast<size_t>(i)]));
      worst = std::max(worst, std::abs(whole[static_cast<size_t>(i)] - accumulated[static_cast<size_t>(i)]));
    }
    INFO(spec.name << ": largest difference " << worst << " of largest |grad| " << g_max);
    CHECK(worst <= 1e-5f * g_max);
  }
}

TEST_CASE("a few AdamW steps on one batch drive the loss down") {
  auto backend = make_cpu_backend();
  const int B = 2, T = 8;
  Gpt model(tiny_dims(), *backend, B, ActivationRecompute::None);
  model.init_weights(42);
  const int64_t n = model.params_flat().numel();
  std::vector<float> m(static_cast<size_t>(n)), v(static_cast<size_t>(n));
  const std::vector<int32_t> tokens = random_ids(B * T, 37, 40), targets = random_ids(B * T, 37, 41);
  float first = 0.0f, last = 0.0f;
  for (int step = 1; step <= 20; ++step) {
    model.zero_grads();
    last = model.forward(tokens.data(), targets.data(), B, T);
    if (step == 1) first = last;
    model.backward(1.0f / (B * T));
    AdamWArgs args;
    args.lr = 1e-2;
    args.weight_decay = 0.1;
    args.bias_correction1 = 1.0 - std::pow(args.beta1, step);
    args.bias_correction2 = 1.0 - std::pow(args.beta2, step);
    backend->adamw_update(model.params_flat(), model.grads_flat(), Tensor(m.data(), DType::F32, {n}),
                          Tensor(v.data(), DType::F32, {n}), Tensor(), args);
  }
  INFO("loss " << first << " -> " << last);
  CHECK(last < 0.6f * first);
}

TEST_CASE("forward_logits gives the logits behind the loss, rows are independent and causal") {
  auto backend = make_cpu_backend();
  const int B = 2, T = 8, Vp = 64, V = 37;
  Gpt model(tiny_dims(), *backend, B, ActivationRecompute::None);
  randomize(model, 7, 0.2f);
  std::vector<int32_t> tokens = random_ids(B * T, V, 50);
  const std::vector<int32_t> targets = random_ids(B * T, V, 51);
  const float loss = model.forward(tokens.data(), targets.data(), B, T);
  const std::vector<float> logits = values(model.forward_logits(tokens.data(), B, T));
  double total = 0.0;
  for (int i = 0; i < B * T; ++i) {
    const float* row = logits.data() + i * Vp;
    double sum = 0.0;
    for (int j = 0; j < V; ++j) sum += std::exp(static_cast<double>(row[j]));
    total += std::log(sum) - row[targets[static_cast<size_t>(i)]];
  }
  CHECK(loss == Approx(total / (B * T)).epsilon(1e-6));
  CHECK_THROWS_AS(model.backward(1.0f), std::logic_error);  // forward_logits leaves nothing to backpropagate

  // Row 1 alone (B = 1, shorter T) sees the same logits as inside the batch.
  const std::vector<float> alone = values(model.forward_logits(tokens.data() + T, 1, 5));
  for (int t = 0; t < 5; ++t)
    for (int j = 0; j < Vp; ++j)
      CHECK(alone[static_cast<size_t>(t * Vp + j)] == Approx(logits[static_cast<size_t>((T + t) * Vp + j)]).margin(1e-5));
  // last_token_logits (sampling's): the last row's logits over the real vocabulary, from a head
  // that computes that row alone.
  const std::vector<float> last = model.last_token_logits(tokens.data() + T, 5);
  REQUIRE(last.size() == static_cast<size_t>(V));
  for (int j = 0; j < V; ++j) CHECK(last[static_cast<size_t>(j)] == Approx(alone[static_cast<size_t>(4 * Vp + j)]).margin(1e-5));
}

TEST_CASE("misuse is reported: unknown names, bad token ids, backward without forward, oversized batches") {
  auto backend = make_cpu_backend();
  Gpt model(tiny_dims(), *backend, 2, ActivationRecompute::None);
  model.init_weights(1);
  try {
    model.param("h.9.attn.c_attn.weight");
    FAIL("expected std::out_of_range");
  } catch (const std::out_of_range& e) {
    CHECK(std::string(e.what()).find("h.9.attn.c_attn.weight") != std::string::npos);
  }
  CHECK_THROWS_AS(model.backward(1.0f), std::logic_error);
  std::vector<int32_t> tokens = random_ids(16, 37, 1), targets = random_ids(16, 37, 2);
  tokens[3] = 40;  // < padded_vocab, but not a real token
  CHECK_THROWS_AS(model.forward(tokens.data(), targets.data(), 2, 8), UserError);
  tokens[3] = 1;
  targets[5] = -1;
  CHECK_THROWS_AS(model.forward(tokens.data(), targets.data(), 2, 8), UserError);
  targets[5] = 1;
  CHECK_THROWS_AS(model.forward(tokens.data(), targets.data(), 3, 8), std::invalid_argument);
  CHECK_THROWS_AS(model.forward(tokens.data(), targets.data(), 1, 9), std::invalid_argument);
  CHECK_NOTHROW(model.forward(tokens.data(), targets.data(), 2, 8));
  CHECK_NOTHROW(model.backward(1.0f));
  CHECK_THROWS_AS(model.backward(1.0f), std::logic_error);  // dlogits are consumed
}

TEST_CASE("forward_for_backward gives forward's loss and, after backward, the same gradients") {
  auto backend = make_cpu_backend();
  const int B = 2, T = 8;
  const std::vector<int32_t> tokens = random_ids(B * T, 37, 31), targets = random_ids(B * T, 37, 32);
  Gpt plain(tiny_dims(), *backend, B, ActivationRecompute::None);
  Gpt fused(tiny_dims(), *backend, B, ActivationRecompute::None);
  randomize(plain, 5, 0.3f);
  randomize(fused, 5, 0.3f);
  const float dloss = 1.0f / (B * T);
  const float loss_plain = plain.forward(tokens.data(), targets.data(), B, T);
  plain.backward(dloss);
  const float loss_fused = fused.forward_for_backward(tokens.data(), targets.data(), B, T, dloss);
  fused.backward(dloss);
  CHECK(loss_fused == loss_plain);
  CHECK(values(fused.grads_flat()) == values(plain.grads_flat()));
  // backward must use the weight the logits' gradient was formed with.
  fused.forward_for_backward(tokens.data(), targets.data(), B, T, dloss);
  CHECK_THROWS_AS(fused.backward(2 * dloss), std::logic_error);
}

// The guarded backend's memory faults outside its own ops: forward, backward, init and the
// flat views must never touch it from the host, and its results are the CPU backend's bits.
TEST_CASE("the model on the guarded backend matches the CPU backend bit for bit") {
  auto guarded = make_guarded_cpu_backend();
  auto cpu = make_cpu_backend();
  const int B = 2, T = 8;
  const std::vector<int32_t> tokens = random_ids(B * T, 37, 41), targets = random_ids(B * T, 37, 42);
  auto step = [&](Backend& backend, DType dtype, ActivationRecompute recompute, std::vector<float>* grads) {
    Gpt model(tiny_dims(), backend, B, recompute, nullptr, dtype);
    model.init_weights(7);
    model.zero_grads();
    const float loss = model.forward_for_backward(tokens.data(), targets.data(), B, T, 1.0f / (B * T));
    model.backward(1.0f / (B * T));
    const Tensor g = model.grads_flat();
    grads->resize(static_cast<size_t>(g.numel()));
    backend.copy(g, Tensor(grads->data(), DType::F32, {g.numel()}));
    return loss;
  };
  for (DType dtype : {DType::F32, DType::BF16}) {
    for (ActivationRecompute recompute : {ActivationRecompute::None, ActivationRecompute::Full}) {
      INFO(dtype_name(dtype) << (recompute == ActivationRecompute::Full ? " with recompute" : ""));
      std::vector<float> a, b;
      CHECK(step(*guarded, dtype, recompute, &a) == step(*cpu, dtype, recompute, &b));
      REQUIRE(a.size() == b.size());
      CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
    }
  }
}

// Training's forward waits for nothing: each micro-batch's losses are queued to host memory and
// read in one wait per step. On the guarded backend the queued copies land only at that wait,
// so a log read before it would hold zeros; the means must be forward()'s bit for bit.
TEST_CASE("the loss log: micro-batches' losses queued by forward_chunk and read once by take_losses") {
  auto guarded = make_guarded_cpu_backend();
  const int B = 2, T = 8, micro_batches = 5;
  Gpt logged(tiny_dims(), *guarded, B, ActivationRecompute::None);
  Gpt plain(tiny_dims(), *guarded, B, ActivationRecompute::None);
  logged.init_weights(3);
  plain.init_weights(3);
  CHECK(logged.take_losses().empty());
  std::vector<float> expected;
  // Enough micro-batches to grow the log past its first size while copies are queued.
  for (int k = 0; k < micro_batches; ++k) {
    const std::vector<int32_t> tokens = random_ids(B * T, 37, 50 + k), targets = random_ids(B * T, 37, 60 + k);
    logged.forward_chunk(tokens.data(), targets.data(), B, T, /*for_backward=*/true, 1.0f / (B * T));
    logged.backward(1.0f / (B * T));
    expected.push_back(plain.forward(tokens.data(), targets.data(), B, T));
  }
  const std::vector<float> losses = logged.take_losses();
  REQUIRE(losses.size() == expected.size());
  for (size_t k = 0; k < losses.size(); ++k) {
    INFO("micro-batch " << k);
    CHECK(losses[k] == expected[k]);
    CHECK(losses[k] > 1.0f);  // near ln 37 at init, not a zero from an unlanded copy
  }
  CHECK(logged.take_losses().empty());  // taken once
}
