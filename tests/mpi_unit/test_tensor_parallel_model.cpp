// The tensor-parallel GPT model (TP = the world size) against the single-rank model on every
// rank: the same initial slices, the same loss, and each rank's gradients equal to its slices
// of the single-rank gradients, with and without sequence parallelism, for every recompute mode;
// gradient accumulation over micro-batches under SP; inference on a batch whose rows TP does not
// divide; the last token's logits gathered for sampling.
#include "catch_compat.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "mpi_test_util.h"
#include "model/model.h"
#include "tensor_parallel/tensor_parallel.h"

using namespace strata;

namespace {

// 12 heads and 96 vocabulary rows divide by every world size the suite runs (1-4); the real
// vocabulary (50) divides by none of them, so the last slices hold padding.
GptDims dims() {
  GptDims d;
  d.n_layer = 2;
  d.n_head = 12;
  d.d_model = 24;
  d.vocab_size = 50;
  d.padded_vocab = 96;
  d.seq_len = 8;
  return d;
}

constexpr int kB = 2, kT = 6;

std::vector<int32_t> ids(uint64_t seed, size_t n, int vocab) {
  std::vector<int32_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<int32_t>(rng_bits(seed, 1, i) % static_cast<uint64_t>(vocab));
  return out;
}

// A tensor of the model's, in fp32 on the host whatever its dtype.
std::vector<float> host_values(Gpt& model, Tensor t) {
  std::vector<unsigned char> bytes(t.bytes());
  model.backend().copy(t, Tensor(bytes.data(), t.dtype, {t.numel()}, Device::CPU));
  std::vector<float> out(static_cast<size_t>(t.numel()));
  convert_elements(bytes.data(), t.dtype, out.data(), DType::F32, out.size());
  return out;
}

// This rank's elements of a global tensor.
std::vector<float> slice_of(const ParamSpec& spec, const std::vector<float>& global) {
  std::vector<float> out;
  for (const GlobalRun& run : tp_global_runs(spec, 0, spec.numel)) {
    out.insert(out.end(), global.begin() + run.global_begin, global.begin() + run.global_begin + run.count);
  }
  return out;
}

// max |got − want| over max |want|.
double relative_difference(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  double worst = 0.0, scale = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
  }
  return scale > 0.0 ? worst / scale : worst;
}

struct Run {
  std::vector<float> losses;
  std::vector<std::vector<float>> grads;  // per spec, this rank's elements
};

// Two micro-batches accumulated into the gradients (the second completing them), as training
// with gradient accumulation does.
Run train_micro_batches(Gpt& model, bool whole_on_every_rank, const std::vector<ParamSpec>& local_specs) {
  Run run;
  model.init_weights(3);
  model.zero_grads();
  for (int m = 0; m < 2; ++m) {
    const std::vector<int32_t> tokens = ids(10 + static_cast<uint64_t>(m), kB * kT, dims().vocab_size);
    const std::vector<int32_t> targets = ids(20 + static_cast<uint64_t>(m), kB * kT, dims().vocab_size);
    const float dloss = 1.0f / (2 * kB * kT);
    run.losses.push_back(model.forward_for_backward(tokens.data(), targets.data(), kB, kT, dloss));
    model.backward(dloss, /*complete_partial_grads=*/m == 1);
  }
  for (const ParamSpec& spec : local_specs) {
    const std::vector<float> g = host_values(model, model.grad_tensor(spec.name));
    run.grads.push_back(whole_on_every_rank ? slice_of(spec, g) : g);
  }
  return run;
}

}  // namespace

TEST_CASE("TP model: loss and gradient slices equal the single-rank model's, SP on and off, every recompute") {
  const int t = strata_test::mpi().world_size();
  std::unique_ptr<Comm> comm = make_mpi_comm(MPI_COMM_WORLD, "tp");
  std::unique_ptr<Backend> backend = make_cpu_backend();
  const std::vector<ParamSpec> mine = gpt_param_specs(dims(), {comm->rank(), t});
  const ActivationRecompute modes[] = {ActivationRecompute::None, ActivationRecompute::Selective,
                                       ActivationRecompute::Full};
  Gpt reference(dims(), *backend, kB, ActivationRecompute::None);
  const Run want = train_micro_batches(reference, true, mine);
  for (ActivationRecompute mode : modes) {
    for (bool sp : {false, true}) {
      TensorParallel tp(comm.get(), sp);
      Gpt model(dims(), *backend, kB, mode, nullptr, DType::F32, &tp);
      const Run got = train_micro_batches(model, false, mine);
      INFO("TP " << t << " SP " << sp << " recompute " << static_cast<int>(mode));
      for (size_t m = 0; m < got.losses.size(); ++m) {
        CHECK(std::fabs(got.losses[m] - want.losses[m]) <= 1e-6 * std::fabs(want.losses[m]));
      }
      for (size_t i = 0; i < mine.size(); ++i) {
        INFO(mine[i].name);
        CHECK(relative_difference(got.grads[i], want.grads[i]) <= 1e-5);
        // Replicated parameters must stay identical on every TP rank, or they drift apart.
        if (!mine[i].tp_sharded()) {
          CHECK(strata_test::same_on_all_ranks(got.grads[i].data(), got.grads[i].size() * sizeof(float)));
        }
      }
      if (t == 1) {  // no TP: the very same arithmetic
        CHECK(got.losses == want.losses);
        CHECK(got.grads == want.grads);
      }
    }
  }
}

TEST_CASE("TP model: initial slices are the single-rank values bit for bit") {
  const int t = strata_test::mpi().world_size();
  std::unique_ptr<Comm> comm = make_mpi_comm(MPI_COMM_WORLD, "tp");
  std::unique_ptr<Backend> backend = make_cpu_backend();
  TensorParallel tp(comm.get(), false);
  Gpt model(dims(), *backend, kB, ActivationRecompute::None, nullptr, DType::BF16, &tp);
  Gpt reference(dims(), *backend, kB, ActivationRecompute::None, nullptr, DType::BF16);
  model.init_weights(9);
  reference.init_weights(9);
  for (const ParamSpec& spec : model.params()) {
    INFO(spec.name << " TP " << t);
    CHECK(host_values(model, model.param_tensor(spec.name)) ==
          slice_of(spec, host_values(reference, reference.param_tensor(spec.name))));
  }
}

TEST_CASE("TP model: inference on rows that TP does not divide, and the gathered last-token logits") {
  const int t = strata_test::mpi().world_size();
  std::unique_ptr<Comm> comm = make_mpi_comm(MPI_COMM_WORLD, "tp");
  std::unique_ptr<Backend> backend = make_cpu_backend();
  Gpt reference(dims(), *backend, kB, ActivationRecompute::None);
  reference.init_weights(5);
  for (int T : {1, 5, 7}) {  // 1·T rows: SP pads them to a multiple of TP
    const std::vector<int32_t> tokens = ids(31, static_cast<size_t>(T), dims().vocab_size);
    const std::vector<int32_t> targets = ids(32, static_cast<size_t>(T), dims().vocab_size);
    const float want_loss = reference.forward(tokens.data(), targets.data(), 1, T);
    const std::vector<float> want_logits = reference.last_token_logits(tokens.data(), T);
    REQUIRE(want_logits.size() == 50u);
    for (bool sp : {false, true}) {
      TensorParallel tp(comm.get(), sp);
      Gpt model(dims(), *backend, kB, ActivationRecompute::None, nullptr, DType::F32, &tp);
      model.init_weights(5);
      INFO("TP " << t << " SP " << sp << " T " << T);
      CHECK(std::fabs(model.forward(tokens.data(), targets.data(), 1, T) - want_loss) <= 1e-6 * want_loss);
      const std::vector<float> logits = model.last_token_logits(tokens.data(), T);
      CHECK(relative_difference(logits, want_logits) <= 1e-5);
      CHECK(strata_test::same_on_all_ranks(logits.data(), logits.size() * sizeof(float)));
      if (sp && t > 1 && T % t != 0) {
        model.forward(tokens.data(), targets.data(), 1, T);
        CHECK_THROWS_AS(model.backward(1.0f), std::logic_error);  // training needs rows TP divides
      }
    }
  }
}
