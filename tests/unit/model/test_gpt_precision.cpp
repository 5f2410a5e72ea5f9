// The model in a 16-bit working dtype: parameters and stored activations really are bf16/fp16
// (half the activation memory, values on the 16-bit grid), gradients stay fp32, and loss and
// gradients follow the fp32 model closely; fp16 gradients scale linearly with dloss.
#include "catch_compat.h"

#include <cmath>
#include <vector>

#include "model/model.h"

using namespace strata;

namespace {

GptDims small_dims() {
  GptDims d;
  d.n_layer = 2;
  d.n_head = 2;
  d.d_model = 32;
  d.vocab_size = 50;
  d.padded_vocab = 64;
  d.seq_len = 16;
  return d;
}

std::vector<int32_t> ids(size_t n, uint64_t seed) {
  Rng rng(seed, 3);
  std::vector<int32_t> out(n);
  for (int32_t& id : out) id = static_cast<int32_t>(rng.below(50));
  return out;
}

std::vector<float> as_floats(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  convert_elements(t.data, t.dtype, out.data(), DType::F32, out.size());
  return out;
}

// ‖a − b‖ / ‖b‖
double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    ref += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(diff / ref);
}

struct Pass1 {
  float loss = 0;
  std::vector<float> grads;
};

Pass1 forward_backward(Gpt& model, float dloss) {
  const int B = 2, T = 16;
  const std::vector<int32_t> tokens = ids(B * T, 1), targets = ids(B * T, 2);
  model.zero_grads();
  Pass1 out;
  out.loss = model.forward(tokens.data(), targets.data(), B, T);
  model.backward(dloss);
  out.grads = as_floats(model.grads_flat());
  return out;
}

}  // namespace

TEST_CASE("a bf16 model holds the fp32 initial values rounded to bf16, and fp32 gradients") {
  auto backend = make_cpu_backend();
  Gpt reference(small_dims(), *backend, 2, ActivationRecompute::None);
  Gpt model(small_dims(), *backend, 2, ActivationRecompute::None, nullptr, DType::BF16);
  reference.init_weights(3);
  model.init_weights(3);
  CHECK(model.dtype() == DType::BF16);
  CHECK(model.params_flat().dtype == DType::BF16);
  CHECK(model.grads_flat().dtype == DType::F32);
  CHECK(model.param_tensor("h.1.mlp.c_fc.weight").dtype == DType::BF16);
  const std::vector<float> exact = as_floats(reference.params_flat());
  const uint16_t* rounded = model.params_flat().as<uint16_t>();
  size_t mismatches = 0, changed = 0;
  for (size_t i = 0; i < exact.size(); ++i) {
    if (rounded[i] != float_to_bf16(exact[i])) ++mismatches;
    if (bf16_to_float(rounded[i]) != exact[i]) ++changed;
  }
  CHECK(mismatches == 0);
  CHECK(changed > exact.size() / 2);  // the rounding is real
}

TEST_CASE("16-bit activations take about half the arena and logits come out in the working dtype") {
  auto backend = make_cpu_backend();
  Gpt fp32(small_dims(), *backend, 4, ActivationRecompute::None);
  Gpt bf16(small_dims(), *backend, 4, ActivationRecompute::None, nullptr, DType::BF16);
  Gpt fp16(small_dims(), *backend, 4, ActivationRecompute::None, nullptr, DType::F16);
  const double ratio = static_cast<double>(bf16.activation_bytes()) / static_cast<double>(fp32.activation_bytes());
  INFO("bf16/fp32 activation bytes " << ratio);
  // Per-row statistics (layernorm mean/rstd, attention lse, losses) stay fp32.
  CHECK(ratio > 0.5);
  CHECK(ratio < 0.6);
  CHECK(fp16.activation_bytes() == bf16.activation_bytes());
  bf16.init_weights(5);
  const std::vector<int32_t> tokens = ids(2 * 16, 4);
  const Tensor logits = bf16.forward_logits(tokens.data(), 2, 16);
  CHECK(logits.dtype == DType::BF16);
  CHECK(logits.numel() == 2 * 16 * 64);
}

TEST_CASE("bf16 and fp16 models follow the fp32 loss and gradients") {
  auto backend = make_cpu_backend();
  Gpt reference(small_dims(), *backend, 2, ActivationRecompute::None);
  reference.init_weights(9);
  const Pass1 want = forward_backward(reference, 1.0f / 32);
  for (DType dtype : {DType::BF16, DType::F16}) {
    INFO(dtype_name(dtype));
    Gpt model(small_dims(), *backend, 2, ActivationRecompute::None, nullptr, dtype);
    model.init_weights(9);
    const Pass1 got = forward_backward(model, 1.0f / 32);
    CHECK(got.loss == Approx(want.loss).epsilon(dtype == DType::BF16 ? 2e-3 : 5e-4));
    CHECK(got.loss != want.loss);  // it really ran in 16 bits
    const double err = relative_error(got.grads, want.grads);
    INFO("gradient relative error " << err);
    CHECK(err < (dtype == DType::BF16 ? 0.02 : 0.003));
    CHECK(err > 0.0);
  }
}

TEST_CASE("fp16 gradients carry the loss scale and unscale to the unscaled ones") {
  auto backend = make_cpu_backend();
  Gpt model(small_dims(), *backend, 2, ActivationRecompute::None, nullptr, DType::F16);
  model.init_weights(11);
  const Pass1 plain = forward_backward(model, 1.0f / 32);
  Pass1 scaled = forward_backward(model, 1024.0f / 32);
  for (float& g : scaled.grads) g /= 1024.0f;
  CHECK(scaled.loss == plain.loss);
  // Scaling moves the activation gradients away from fp16's subnormal range, so the two differ
  // by rounding only.
  CHECK(relative_error(scaled.grads, plain.grads) < 5e-3);
  // A scale fp16 cannot hold (dlogits beyond 65504) overflows to inf/nan in the gradient.
  const Pass1 overflowed = forward_backward(model, 1e9f / 32);
  bool non_finite = false;
  for (float g : overflowed.grads) non_finite = non_finite || !std::isfinite(g);
  CHECK(non_finite);
}

TEST_CASE("a store of another dtype than the model's is refused") {
  auto backend = make_cpu_backend();
  const std::vector<ParamSpec> specs = gpt_param_specs(small_dims());
  FlatParamStore bf16_store(*backend, specs, 0, DType::BF16);
  CHECK(bf16_store.param_dtype() == DType::BF16);
  CHECK(bf16_store.params().bytes() == static_cast<size_t>(gpt_param_count(small_dims())) * 2);
  CHECK_THROWS_AS(Gpt(small_dims(), *backend, 2, ActivationRecompute::None, &bf16_store), std::logic_error);
  CHECK_NOTHROW(Gpt(small_dims(), *backend, 2, ActivationRecompute::None, &bf16_store, DType::BF16));
}
