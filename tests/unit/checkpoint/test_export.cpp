// HuggingFace export of a small GPT-2 checkpoint saved by two ranks: HF names, un-padded wte,
// F32 data equal to the checkpoint's, and a config.json transformers can read.
#include "catch_compat.h"
#include <cmath>
#include <filesystem>

#include "checkpoint/checkpoint.h"
#include "checkpoint_test_util.h"
#include "core/error.h"
#include "core/rng.h"

using namespace strata;
using namespace strata::test;

namespace {

constexpr int64_t kLayers = 2, kHeads = 2, kC = 4, kVocab = 10, kPaddedVocab = 16, kSeq = 8;

struct Param {
  std::string hf_name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

std::vector<Param> gpt2_params() {
  std::vector<Param> params = {{"wte.weight", {kPaddedVocab, kC}, {}}, {"wpe.weight", {kSeq, kC}, {}}};
  for (int i = 0; i < kLayers; ++i) {
    const std::string h = "h." + std::to_string(i) + ".";
    for (const char* ln : {"ln_1", "ln_2"}) {
      params.push_back({h + ln + ".weight", {kC}, {}});
      params.push_back({h + ln + ".bias", {kC}, {}});
    }
    params.push_back({h + "attn.c_attn.weight", {kC, 3 * kC}, {}});
    params.push_back({h + "attn.c_attn.bias", {3 * kC}, {}});
    params.push_back({h + "attn.c_proj.weight", {kC, kC}, {}});
    params.push_back({h + "attn.c_proj.bias", {kC}, {}});
    params.push_back({h + "mlp.c_fc.weight", {kC, 4 * kC}, {}});
    params.push_back({h + "mlp.c_fc.bias", {4 * kC}, {}});
    params.push_back({h + "mlp.c_proj.weight", {4 * kC, kC}, {}});
    params.push_back({h + "mlp.c_proj.bias", {kC}, {}});
  }
  params.push_back({"ln_f.weight", {kC}, {}});
  params.push_back({"ln_f.bias", {kC}, {}});
  Rng rng(3, 9);
  for (Param& p : params) {
    int64_t n = 1;
    for (int64_t d : p.shape) n *= d;
    for (int64_t i = 0; i < n; ++i) p.values.push_back(rng.normal());
  }
  return params;
}

nlohmann::json model_meta() {
  return {{"model",
           {{"n_layer", kLayers},
            {"n_head", kHeads},
            {"d_model", kC},
            {"vocab_size", kVocab},
            {"padded_vocab", kPaddedVocab},
            {"seq_len", kSeq}}}};
}

// Rank 0 holds wte rows [0, 8) and every other parameter; rank 1 holds wte rows [8, 16) and
// an optimizer tensor that export must leave out. `skip` drops one parameter.
std::string save_model(const std::string& root, const std::vector<Param>& params, const nlohmann::json& meta,
                       const std::string& skip = "") {
  const std::vector<float> optimizer_state(5, 1.0f);
  const auto errors = run_ranks(2, [&](int rank, const SaveContext& context) {
    std::vector<TensorPiece> pieces;
    const Param& wte = params[0];
    const int64_t half = kPaddedVocab / 2;
    pieces.push_back({"model.wte.weight",
                      DType::F32,
                      wte.shape,
                      {rank * half, 0},
                      {half, kC},
                      wte.values.data() + rank * half * kC,
                      {}});
    if (rank == 1) pieces.push_back({"optim.m.ln_f.bias", DType::F32, {5}, {0}, {5}, optimizer_state.data(), {}});
    for (size_t i = 1; rank == 0 && i < params.size(); ++i) {
      if (params[i].hf_name == skip) continue;
      const std::vector<int64_t> zeros(params[i].shape.size(), 0);
      pieces.push_back({"model." + params[i].hf_name,
                        DType::F32,
                        params[i].shape,
                        zeros,
                        params[i].shape,
                        params[i].values.data(),
                        {}});
    }
    save_checkpoint(root, 40, context, pieces, nullptr, meta, 0);
  });
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return root;
}

}  // namespace

TEST_CASE("export writes HF-named F32 weights with wte un-padded and a valid config.json") {
  QuietLogs quiet;
  ScratchDir dir;
  const std::vector<Param> params = gpt2_params();
  save_model(dir / "ckpt", params, model_meta());
  export_huggingface(dir / "ckpt", dir / "hf/out");

  const SafetensorsReader weights = SafetensorsReader::open(dir / "hf/out/model.safetensors");
  CHECK(weights.entries().size() == params.size());
  CHECK(weights.metadata().at("format") == "pt");
  CHECK(!weights.contains("optim.m.ln_f.bias"));
  for (const Param& p : params) {
    INFO(p.hf_name);
    REQUIRE(weights.contains(p.hf_name));
    const SafetensorsEntry& e = weights.entry(p.hf_name);
    CHECK(e.dtype == DType::F32);
    std::vector<float> back(e.bytes() / 4);
    weights.read(p.hf_name, back.data());
    if (p.hf_name == "wte.weight") {
      CHECK(e.shape == std::vector<int64_t>{kVocab, kC});
      CHECK(back == std::vector<float>(p.values.begin(), p.values.begin() + kVocab * kC));
    } else {
      CHECK(e.shape == p.shape);
      CHECK(back == p.values);
    }
  }

  const nlohmann::json config = nlohmann::json::parse(read_bytes(dir / "hf/out/config.json"));
  CHECK(config["model_type"] == "gpt2");
  CHECK(config["architectures"] == nlohmann::json({"GPT2LMHeadModel"}));
  CHECK(config["n_layer"] == kLayers);
  CHECK(config["n_head"] == kHeads);
  CHECK(config["n_embd"] == kC);
  CHECK(config["vocab_size"] == kVocab);
  CHECK(config["n_positions"] == kSeq);
  CHECK(config["n_ctx"] == kSeq);
  CHECK(config["layer_norm_epsilon"].get<double>() == 1e-5);
  CHECK(config["activation_function"] == "gelu_new");
  CHECK(config["tie_word_embeddings"] == true);
  CHECK(config["resid_pdrop"] == 0.0);
  // Written as null, not left out: transformers' GPT2Config would take 50256, no id of this vocabulary.
  CHECK(config.at("bos_token_id").is_null());
  CHECK(config.at("eos_token_id").is_null());
  CHECK(!std::filesystem::exists(dir / "hf/out/model.safetensors.tmp"));
}

TEST_CASE("export refuses checkpoints it cannot turn into GPT-2") {
  QuietLogs quiet;
  ScratchDir dir;
  const std::vector<Param> params = gpt2_params();
  save_model(dir / "missing", params, model_meta(), "h.1.ln_2.bias");
  CHECK_THROWS_WITH(export_huggingface(dir / "missing", dir / "out1"),
                    strata_catch::Contains("'model.h.1.ln_2.bias' is missing"));
  CHECK(!std::filesystem::exists(dir / "out1/model.safetensors"));

  save_model(dir / "nometa", params, {{"layout", "x"}});
  CHECK_THROWS_WITH(export_huggingface(dir / "nometa", dir / "out2"), strata_catch::Contains("no \"model\" section"));

  nlohmann::json wrong = model_meta();
  wrong["model"]["d_model"] = 8;
  save_model(dir / "wrong", params, wrong);
  CHECK_THROWS_WITH(export_huggingface(dir / "wrong", dir / "out3"),
                    strata_catch::Contains("has shape [16, 4], expected [16, 8]"));
  CHECK_THROWS_WITH(export_huggingface(dir / "absent", dir / "out4"), strata_catch::StartsWith("export: "));

  std::vector<Param> nan_params = params;
  nan_params[5].values[2] = std::nanf("");
  save_model(dir / "nan", nan_params, model_meta());
  CHECK_THROWS_WITH(export_huggingface(dir / "nan", dir / "out5"),
                    strata_catch::Contains("parameter 'model." + nan_params[5].hf_name +
                                           "' holds a non-finite value (nan at element 2); cannot export"));
  CHECK(!std::filesystem::exists(dir / "out5/model.safetensors"));
}
