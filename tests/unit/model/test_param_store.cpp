// The model reaches parameters and gradients only through its ParamStore: a store that hands
// out per-group copies sees the documented acquire/release order, and training through it
// gives bit-identical losses and gradients to the default flat store.
#include "catch_compat.h"

#include <cstring>
#include <string>
#include <vector>

#include "model/model.h"

using namespace strata;

namespace {

GptDims tiny_dims() {
  GptDims d;
  d.n_layer = 3;
  d.n_head = 2;
  d.d_model = 16;
  d.vocab_size = 37;
  d.padded_vocab = 64;
  d.seq_len = 8;
  return d;
}

// Keeps the full parameters and gradients elsewhere and copies a group into a private buffer
// on acquire (and the gradient back on release), so any access outside acquire/release would
// read or write the wrong memory. Logs every call.
class CopyingStore final : public ParamStore {
 public:
  explicit CopyingStore(const std::vector<ParamSpec>& specs)
      : groups_(gpt_layer_groups(specs)), params_(static_cast<size_t>(groups_.back().end)),
        grads_(params_.size()), param_copies_(groups_.size()), grad_copies_(groups_.size()) {}

  void* acquire_params(int g, Pass pass) override {
    log.push_back((pass == Pass::Forward ? "F+" : "B+") + std::to_string(g));
    const LayerGroup& r = groups_[static_cast<size_t>(g)];
    param_copies_[static_cast<size_t>(g)].assign(params_.begin() + r.begin, params_.begin() + r.end);
    return param_copies_[static_cast<size_t>(g)].data();
  }
  void release_params(int g, Pass pass) override {
    log.push_back((pass == Pass::Forward ? "F-" : "B-") + std::to_string(g));
    param_copies_[static_cast<size_t>(g)].assign(1, -1e30f);  // any later use reads garbage
  }
  float* acquire_grads(int g) override {
    log.push_back("G+" + std::to_string(g));
    const LayerGroup& r = groups_[static_cast<size_t>(g)];
    grad_copies_[static_cast<size_t>(g)].assign(static_cast<size_t>(r.numel()), 0.0f);
    return grad_copies_[static_cast<size_t>(g)].data();
  }
  void release_grads(int g) override {
    log.push_back("G-" + std::to_string(g));
    const LayerGroup& r = groups_[static_cast<size_t>(g)];
    for (int64_t i = 0; i < r.numel(); ++i) grads_[static_cast<size_t>(r.begin + i)] += grad_copies_[static_cast<size_t>(g)][static_cast<size_t>(i)];
  }

  std::vector<LayerGroup> groups_;
  std::vector<float> params_, grads_;
  std::vector<std::vector<float>> param_copies_, grad_copies_;
  std::vector<std::string> log;
};

std::vector<int32_t> ids(size_t n, uint64_t seed) {
  Rng rng(seed, 3);
  std::vector<int32_t> out(n);
  for (int32_t& v : out) v = static_cast<int32_t>(rng.below(37));
  return out;
}

}  // namespace

TEST_CASE("a store handing out group copies gives the flat store's loss and gradients, in the documented order") {
  auto backend = make_cpu_backend();
  const GptDims dims = tiny_dims();
  const int B = 2, T = 8;
  Gpt flat(dims, *backend, B, ActivationRecompute::None);
  flat.init_weights(5);
  CopyingStore store(flat.params());
  std::memcpy(store.params_.data(), flat.params_flat().f32(), store.params_.size() * sizeof(float));
  Gpt routed(dims, *backend, B, ActivationRecompute::Full, &store);
  CHECK_FALSE(routed.has_flat_store());
  CHECK_THROWS_AS(routed.params_flat(), std::logic_error);
  std::vector<int> ready;
  routed.set_grad_ready_callback([&](int g) { ready.push_back(g); });

  const std::vector<int32_t> tokens = ids(B * T, 1), targets = ids(B * T, 2);
  const float dloss = 1.0f / (B * T);
  const float loss_flat = flat.forward(tokens.data(), targets.data(), B, T);
  flat.backward(dloss);
  const float loss_routed = routed.forward(tokens.data(), targets.data(), B, T);
  routed.backward(dloss);
  CHECK(loss_flat == loss_routed);
  // Recomputation in backward uses the block's parameters while acquired; gradients identical.
  CHECK(std::memcmp(flat.grads_flat().f32(), store.grads_.data(), store.grads_.size() * sizeof(float)) == 0);

  const std::vector<std::string> expected = {
      "F+0", "F+1", "F-1", "F+2", "F-2", "F+3", "F-3", "F+4", "F-4", "F-0",  // forward
      "B+0", "G+0", "B+4", "G+4", "B-4", "G-4", "B+3", "G+3", "B-3", "G-3", "B+2", "G+2",
      "B-2", "G-2", "B+1", "G+1", "B-1", "G-1", "B-0", "G-0"};  // backward
  CHECK(store.log == expected);
  CHECK(ready == std::vector<int>{4, 3, 2, 1, 0});
}
