// The model on the guarded backend (memory that faults outside the backend's ops): forward,
// backward, init and the flat views never touch backend memory from the host, and the result
// is the CPU backend's, bit for bit, in fp32 and bf16.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "model/model.h"

namespace strata {
namespace {

GptDims tiny_dims() {
  GptDims d;
  d.n_layer = 2;
  d.n_head = 2;
  d.d_model = 16;
  d.vocab_size = 50;
  d.padded_vocab = 64;
  d.seq_len = 8;
  return d;
}

struct StepResult {
  float loss = 0;
  std::vector<float> grads;
};

StepResult one_step(Backend& backend, DType dtype, ActivationRecompute recompute) {
  const GptDims dims = tiny_dims();
  Gpt model(dims, backend, 2, recompute, nullptr, dtype);
  model.init_weights(7);
  std::vector<int32_t> tokens(16), targets(16);
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int32_t>((i * 7) % 50);
    targets[i] = static_cast<int32_t>((i * 11 + 3) % 50);
  }
  model.zero_grads();
  StepResult r;
  r.loss = model.forward(tokens.data(), targets.data(), 2, 8);
  model.backward(1.0f / 16);
  const Tensor grads = model.grads_flat();
  r.grads.resize(static_cast<size_t>(grads.numel()));
  backend.copy(grads, Tensor(r.grads.data(), DType::F32, {grads.numel()}));
  return r;
}

TEST_CASE("the model on the guarded backend matches the CPU backend bit for bit") {
  auto guarded = make_guarded_cpu_backend();
  auto cpu = make_cpu_backend();
  for (DType dtype : {DType::F32, DType::BF16}) {
    for (ActivationRecompute recompute : {ActivationRecompute::None, ActivationRecompute::Full}) {
      INFO(dtype_name(dtype) << (recompute == ActivationRecompute::Full ? " with recompute" : ""));
      const StepResult a = one_step(*guarded, dtype, recompute);
      const StepResult b = one_step(*cpu, dtype, recompute);
      CHECK(a.loss == b.loss);
      REQUIRE(a.grads.size() == b.grads.size());
      CHECK(std::memcmp(a.grads.data(), b.grads.data(), a.grads.size() * sizeof(float)) == 0);
    }
  }
}

}  // namespace
}  // namespace strata
