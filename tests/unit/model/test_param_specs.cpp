// The GPT-2 parameter registry: HF names and shapes, counts, TP split dims, layers, weight
// decay flags and the dense flat-buffer layout.
#include <catch2/catch.hpp>

#include <set>

#include "model/model.h"

using namespace strata;

namespace {
GptDims gpt2_124m() {
  GptDims d;
  d.n_layer = 12;
  d.n_head = 12;
  d.d_model = 768;
  d.vocab_size = 50257;
  d.padded_vocab = 50257;
  d.seq_len = 1024;
  return d;
}
}  // namespace

TEST_CASE("GPT-2 124M has 124,439,808 parameters (unpadded vocab)") {
  CHECK(gpt_param_count(gpt2_124m()) == 124439808);
  GptDims padded = gpt2_124m();
  padded.padded_vocab = 50304;
  CHECK(gpt_param_count(padded) == 124439808 + 47 * 768);
}

TEST_CASE("param specs follow HF names, order, shapes and a dense layout") {
  GptDims d;
  d.n_layer = 3;
  d.n_head = 2;
  d.d_model = 8;
  d.vocab_size = 37;
  d.padded_vocab = 64;
  d.seq_len = 16;
  const std::vector<ParamSpec> specs = gpt_param_specs(d);
  REQUIRE(specs.size() == 2 + 12 * 3 + 2);
  CHECK(specs[0].name == "wte.weight");
  CHECK(specs[0].shape == std::vector<int64_t>{64, 8});
  CHECK(specs[1].name == "wpe.weight");
  CHECK(specs[1].shape == std::vector<int64_t>{16, 8});
  const std::vector<std::string> block = {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                                          "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                                          "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"};
  const std::vector<std::vector<int64_t>> shapes = {{8}, {8}, {8, 24}, {24}, {8, 8}, {8}, {8}, {8}, {8, 32}, {32}, {32, 8}, {8}};
  const std::vector<int> tp_dims = {-1, -1, 1, 0, 0, -1, -1, -1, 1, 0, 0, -1};
  int64_t per_layer = 0;
  for (int l = 0; l < 3; ++l) {
    per_layer = 0;
    for (size_t i = 0; i < block.size(); ++i) {
      const ParamSpec& s = specs[2 + static_cast<size_t>(l) * 12 + i];
      CHECK(s.name == "h." + std::to_string(l) + "." + block[i]);
      CHECK(s.shape == shapes[i]);
      CHECK(s.tp_split_dim == tp_dims[i]);
      CHECK(s.layer == l);
      CHECK(s.weight_decay == (s.shape.size() == 2));
      per_layer += s.numel;
    }
  }
  CHECK(per_layer == 12 * 8 * 8 + 13 * 8);
  CHECK(specs.back().name == "ln_f.bias");
  CHECK(specs.back().layer == 3);
  CHECK(specs[specs.size() - 2].name == "ln_f.weight");
  CHECK(specs[0].layer == -1);
  CHECK(specs[0].tp_split_dim == 0);
  CHECK(specs[0].weight_decay);
  CHECK(specs[1].tp_split_dim == -1);
  int64_t offset = 0;
  std::set<std::string> names;
  for (const ParamSpec& s : specs) {
    CHECK(s.offset == offset);
    int64_t n = 1;
    for (int64_t dim : s.shape) n *= dim;
    CHECK(s.numel == n);
    offset += s.numel;
    names.insert(s.name);
  }
  CHECK(names.size() == specs.size());
  CHECK(gpt_param_count(d) == offset);
}

TEST_CASE("invalid model dims are reported together as user errors") {
  GptDims d;
  d.n_layer = 0;
  d.n_head = 3;
  d.d_model = 16;
  d.vocab_size = 100;
  d.padded_vocab = 64;
  d.seq_len = 8;
  try {
    gpt_param_specs(d);
    FAIL("expected UserErrors");
  } catch (const UserErrors& e) {
    REQUIRE(e.errors().size() == 3);
    CHECK(e.errors()[0].find("model.n_layer") != std::string::npos);
    CHECK(e.errors()[1].find("model.n_head") != std::string::npos);
    CHECK(e.errors()[2].find("model.vocab_size") != std::string::npos);
  }
}
