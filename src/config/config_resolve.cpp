// Resolution: model presets, the batch triple, stage-dependent defaults, and the derived
// numbers (rank grid, padded vocabulary, parameter count, FLOPs per token) that logs,
// MFU and memory estimates are computed from.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "config/config_internal.h"
#include "core/error.h"

namespace strata {

const std::vector<ModelPreset>& model_presets() {
  static const std::vector<ModelPreset> presets = {
      {"gpt2-124m", 12, 12, 768},
      {"gpt2-350m", 24, 16, 1024},
      {"gpt2-774m", 36, 20, 1280},
      {"gpt2-1558m", 48, 25, 1600},
  };
  return presets;
}

namespace config_detail {

const ModelPreset* find_preset(const std::string& name) {
  for (const auto& preset : model_presets()) {
    if (name == preset.name) return &preset;
  }
  return nullptr;
}

namespace {

// n_layer, n_head and n_embd of a HuggingFace GPT-2 folder's config.json; each unset when the
// file or the key is missing or not a positive integer (validation then asks for the value).
ModelPreset huggingface_dims(const std::string& dir) {
  ModelPreset dims{"", 0, 0, 0};
  std::ifstream in(dir + "/config.json");
  if (!in) return dims;
  const nlohmann::json c = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  auto get = [&](const char* key) {
    return c.is_object() && c.contains(key) && c[key].is_number_integer() && c[key].get<int64_t>() > 0 &&
                   c[key].get<int64_t>() <= (1 << 30)
               ? c[key].get<int>()
               : 0;
  };
  dims.n_layer = get("n_layer");
  dims.n_head = get("n_head");
  dims.d_model = get("n_embd");
  return dims;
}

}  // namespace

std::string huggingface_folder_problem(const std::string& dir) {
  std::error_code ec;
  const auto status = std::filesystem::status(dir, ec);
  if (!std::filesystem::exists(status)) return "does not exist";
  if (!std::filesystem::is_directory(status)) return "is not a directory (a HuggingFace model folder is)";
  if (!std::filesystem::exists(std::filesystem::path(dir) / "config.json", ec)) {
    return "has no config.json: not a HuggingFace model folder (a strata checkpoint is exported to one with "
           "`strata export`)";
  }
  std::ifstream in(dir + "/config.json");
  const nlohmann::json c = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (c.is_discarded() || !c.is_object()) return "config.json is not a JSON object";
  return "";
}

ModelConfig expand_preset(const ModelConfig& model) {
  ModelConfig out = model;
  if (const ModelPreset* preset = find_preset(model.preset)) {
    if (!out.n_layer) out.n_layer = preset->n_layer;
    if (!out.n_head) out.n_head = preset->n_head;
    if (!out.d_model) out.d_model = preset->d_model;
  } else if (!model.init_from.empty() && (!out.n_layer || !out.n_head || !out.d_model)) {
    const ModelPreset dims = huggingface_dims(model.init_from);
    if (!out.n_layer && dims.n_layer > 0) out.n_layer = dims.n_layer;
    if (!out.n_head && dims.n_head > 0) out.n_head = dims.n_head;
    if (!out.d_model && dims.d_model > 0) out.d_model = dims.d_model;
  }
  return out;
}

}  // namespace config_detail

void resolve_config(Config& cfg, int world_size) {
  const std::vector<std::string> problems = validate_config(cfg, world_size);
  if (!problems.empty()) throw UserErrors(problems);

  cfg.model = config_detail::expand_preset(cfg.model);
  Derived& d = cfg.derived;
  d = Derived{};
  d.world_size = world_size;
  d.tp_size = cfg.parallelism.tensor_model_parallel_size;
  d.pp_size = cfg.parallelism.pipeline_model_parallel_size;
  d.dp_size = world_size / (d.tp_size * d.pp_size);

  config_detail::BatchSizes batch;
  config_detail::derive_batch_sizes(cfg, d.dp_size, batch);  // validated above, cannot fail
  cfg.train_batch_size = batch.train;
  cfg.train_micro_batch_size_per_gpu = batch.micro;
  cfg.gradient_accumulation_steps = batch.accum;
  d.global_batch = batch.train;
  d.micro_batch = batch.micro;
  d.grad_accum = batch.accum;

  ZeroConfig& zero = cfg.zero_optimization;
  if (!zero.overlap_comm) zero.overlap_comm = zero.stage == 3;
  if (!zero.allgather_bucket_size) zero.allgather_bucket_size = zero.reduce_bucket_size;

  const ModelConfig& m = cfg.model;
  const int64_t seq_len = m.seq_len;
  d.tokens_per_step = int64_t{d.global_batch} * seq_len;
  // Padding to 128 × TP keeps every TP slice of the vocabulary a multiple of 128 rows.
  const int64_t multiple = int64_t{128} * d.tp_size;
  d.padded_vocab = static_cast<int>((m.vocab_size + multiple - 1) / multiple * multiple);
  // The closed form needs no head count (n_head may still be invalid here; validation says so).
  d.n_params = gpt_param_count({*m.n_layer, 0, *m.d_model, m.vocab_size, d.padded_vocab, m.seq_len});
  d.n_params_unpadded = gpt_param_count({*m.n_layer, 0, *m.d_model, m.vocab_size, m.vocab_size, m.seq_len});
  // 6N for the matmuls against parameters (2 forward + 4 backward), plus attention scores and
  // weighted values: 2·2·L·C·T per token forward, ×3 with backward, halved for the causal mask.
  d.flops_per_token = 6 * d.n_params + 6 * int64_t{*m.n_layer} * int64_t{*m.d_model} * seq_len;
}

}  // namespace strata
