// Model chunks (pipeline parallelism) on one process: the whole model cut into chunks that hand
// each other the residual stream forward and its gradient backward gives the whole model's loss
// and gradients; the tied embedding's gradient is the sum of the first chunk's and the last
// chunk's copy. Also the chunk's parameters, layout and activation arena.
#include "catch_compat.h"

#include <cmath>
#include <memory>

#include "model/model.h"

using namespace strata;

namespace {

GptDims dims_of(int n_layer) {
  GptDims d;
  d.n_layer = n_layer;
  d.n_head = 2;
  d.d_model = 16;
  d.vocab_size = 37;
  d.padded_vocab = 64;
  d.seq_len = 8;
  return d;
}

std::vector<int32_t> ids(size_t n, int vocab, uint64_t seed) {
  Rng rng(seed, 3);
  std::vector<int32_t> out(n);
  for (int32_t& id : out) id = static_cast<int32_t>(rng.below(static_cast<uint64_t>(vocab)));
  return out;
}

std::vector<float> values(Tensor t) { return std::vector<float>(t.f32(), t.f32() + t.numel()); }

}  // namespace

TEST_CASE("a chunk holds its layers, the first the embeddings, the last ln_f and the tied copies") {
  const GptDims d = dims_of(4);
  const std::vector<ParamSpec> first = gpt_param_specs(d, {}, {0, 1, true, false});
  const std::vector<ParamSpec> middle = gpt_param_specs(d, {}, {1, 3, false, false});
  const std::vector<ParamSpec> last = gpt_param_specs(d, {}, {3, 4, false, true});
  CHECK(first.size() == 2 + 12);
  CHECK(middle.size() == 24);
  CHECK(last.size() == 2 + 12 + 2);
  CHECK(first[0].name == "wte.weight");
  CHECK_FALSE(first[0].tied_copy);
  CHECK(middle[0].name == "h.1.ln_1.weight");
  CHECK(last[0].name == "wte.weight");
  CHECK(last[0].tied_copy);
  CHECK(last[1].tied_copy);
  CHECK(last.back().name == "ln_f.bias");
  // Together (without the copies) the chunks hold the whole model.
  int64_t total = 0;
  for (const auto* chunk : {&first, &middle, &last}) {
    for (const ParamSpec& s : *chunk) total += s.tied_copy ? 0 : s.numel;
  }
  CHECK(total == gpt_param_count(d));
  // A rank with chunks 1 and 3 of an interleaved pipeline: ordered by group, the copies first.
  const std::vector<ParamSpec> rank = gpt_rank_specs(d, {}, {{1, 2, false, false}, {3, 4, false, true}});
  CHECK(rank[0].name == "wte.weight");
  CHECK(rank[2].name == "h.1.ln_1.weight");
  CHECK(rank[14].name == "h.3.ln_1.weight");
  const std::vector<LayerGroup> groups = gpt_layer_groups(rank, d.n_layer + 2);
  REQUIRE(groups.size() == 6);
  CHECK(groups[0].numel() == rank[0].numel + rank[1].numel);
  CHECK(groups[1].numel() == 0);
  CHECK(groups[3].numel() == 0);
  CHECK(groups[2].begin == groups[0].end);
  CHECK(groups[4].begin == groups[2].end);
  CHECK(groups[5].end == rank.back().offset + rank.back().numel);
  // The head's buffers only in the last chunk's arena; layers per chunk.
  const ActivationBytes whole = gpt_activation_bytes(d, 2, ActivationRecompute::None, DType::F32, 1, false);
  const ActivationBytes head = gpt_activation_bytes(d, 2, ActivationRecompute::None, DType::F32, 1, false, nullptr,
                                                    {3, 4, false, true});
  const ActivationBytes body = gpt_activation_bytes(d, 2, ActivationRecompute::None, DType::F32, 1, false, nullptr,
                                                    {1, 3, false, false});
  CHECK(head.per_layer == whole.per_layer);
  CHECK(head.layers == whole.per_layer);
  CHECK(body.layers == 2 * whole.per_layer);
  CHECK(body.other < head.other);
}

TEST_CASE("chunks passing the residual stream equal the whole model, in every recompute mode") {
  const GptDims d = dims_of(5);
  const int B = 2, T = 8;
  const std::vector<int32_t> tokens = ids(B * T, d.vocab_size, 1), targets = ids(B * T, d.vocab_size, 2);
  const float dloss = 1.0f / (B * T);
  for (ActivationRecompute mode : {ActivationRecompute::None, ActivationRecompute::Selective, ActivationRecompute::Full}) {
    for (const std::vector<int>& cut : {std::vector<int>{0, 2, 5}, std::vector<int>{0, 1, 3, 4, 5}}) {
      auto backend = make_cpu_backend();
      Gpt whole(d, *backend, B, mode);
      whole.init_weights(11);
      whole.zero_grads();
      const float expected = whole.forward_for_backward(tokens.data(), targets.data(), B, T, dloss);
      whole.backward(dloss);

      const size_t n = cut.size() - 1;
      std::vector<std::unique_ptr<Gpt>> chunks;
      for (size_t k = 0; k < n; ++k) {
        chunks.push_back(std::make_unique<Gpt>(d, *backend, B, mode, nullptr, DType::F32, nullptr,
                                               GptChunk{cut[k], cut[k + 1], k == 0, k + 1 == n}));
        chunks.back()->init_weights(11);
        chunks.back()->zero_grads();
      }
      for (size_t k = 0; k < n; ++k) {
        if (k > 0) backend->copy(chunks[k - 1]->chunk_output(B, T), chunks[k]->chunk_input(B, T));
        chunks[k]->forward_chunk(tokens.data(), targets.data(), B, T, true, dloss);
      }
      for (size_t k = 0; k + 1 < n; ++k) CHECK(chunks[k]->take_losses().empty());  // only the head logs
      const std::vector<float> losses = chunks.back()->take_losses();
      REQUIRE(losses.size() == 1);
      CHECK(losses[0] == expected);  // the same operations in the same order
      for (size_t k = n; k-- > 0;) {
        if (k + 1 < n) backend->copy(chunks[k + 1]->chunk_input_grad(B, T), chunks[k]->chunk_output_grad(B, T));
        chunks[k]->backward_chunk(dloss);
      }
      for (const ParamSpec& spec : whole.params()) {
        const std::vector<float> want = values(whole.grad_tensor(spec.name));
        std::vector<float> got(want.size(), 0.0f);
        for (auto& chunk : chunks) {
          bool held = false;
          for (const ParamSpec& s : chunk->params()) held = held || s.name == spec.name;
          if (!held) continue;
          const std::vector<float> part = values(chunk->grad_tensor(spec.name));
          for (size_t i = 0; i < got.size(); ++i) got[i] += part[i];
        }
        INFO(spec.name);
        if (spec.name == "wte.weight") {  // the head's and the embedding's parts, summed in another order
          for (size_t i = 0; i < got.size(); ++i) REQUIRE(std::fabs(got[i] - want[i]) <= 1e-6f * (1 + std::fabs(want[i])));
        } else {
          REQUIRE(got == want);
        }
      }
    }
  }
}

TEST_CASE("a chunk refuses what it cannot do") {
  const GptDims d = dims_of(3);
  auto backend = make_cpu_backend();
  Gpt middle(d, *backend, 1, ActivationRecompute::None, nullptr, DType::F32, nullptr, GptChunk{1, 2, false, false});
  std::vector<int32_t> t(8, 1);
  CHECK_THROWS_AS(middle.forward_logits(t.data(), 1, 8), std::logic_error);
  middle.forward_chunk(nullptr, nullptr, 1, 8, true, 1.0f);
  CHECK_THROWS_AS(middle.backward(1.0f), std::logic_error);
  Gpt first(d, *backend, 1, ActivationRecompute::None, nullptr, DType::F32, nullptr, GptChunk{0, 1, true, false});
  CHECK_THROWS_AS(first.forward_chunk(nullptr, nullptr, 1, 8, false, 1.0f), std::invalid_argument);
  CHECK_THROWS_AS(Gpt(d, *backend, 1, ActivationRecompute::None, nullptr, DType::F32, nullptr, GptChunk{1, 1, false, false}),
                  std::logic_error);
}
