// Checkpoint contents of a training run: fp32 parameters ("model.<HF name>"), Adam moments
// ("optim.exp_avg.<name>", "optim.exp_avg_sq.<name>"), and the loop state (step, schedule,
// optimizer step count, sampling RNG), with the config and layout in the manifest.
#include <fmt/core.h>

#include "train/train_internal.h"

namespace strata {
namespace {

TensorPiece whole_piece(const std::string& name, const ParamSpec& spec, const float* data) {
  TensorPiece p;
  p.name = name;
  p.dtype = DType::F32;
  p.global_shape = spec.shape;
  p.offset.assign(spec.shape.size(), 0);
  p.shape = spec.shape;
  p.data = data;
  return p;
}

// Reads one tensor saved under `key` into dst laid out as `spec` now; wte may have been
// saved with another vocab padding, so only the real rows are read (padding stays zero).
void read_param(const CheckpointReader& reader, const std::string& key, const ParamSpec& spec, int vocab_size,
                float* dst) {
  const TensorInfo& info = reader.info(key);
  const bool is_wte = spec.name == "wte.weight";
  std::vector<int64_t> box = spec.shape;
  if (is_wte) box[0] = vocab_size;
  bool fits = info.global_shape.size() == spec.shape.size();
  for (size_t d = 0; fits && d < spec.shape.size(); ++d) {
    fits = (d == 0 && is_wte) ? info.global_shape[0] >= box[0] : info.global_shape[d] == spec.shape[d];
  }
  if (!fits) {
    throw UserError(fmt::format("{}: tensor {} has shape {} in the checkpoint but the model needs {}", reader.path(),
                                key, nlohmann::json(info.global_shape).dump(), nlohmann::json(spec.shape).dump()));
  }
  reader.read_box(key, std::vector<int64_t>(spec.shape.size(), 0), box, DType::F32, dst);
}

}  // namespace

nlohmann::json model_meta(const GptDims& d) {
  return {{"n_layer", d.n_layer}, {"n_head", d.n_head},         {"d_model", d.d_model},
          {"vocab_size", d.vocab_size}, {"padded_vocab", d.padded_vocab}, {"seq_len", d.seq_len}};
}

std::string save_training_checkpoint(const Config& cfg, int64_t step, const LoopState& state, Gpt& model,
                                     AdamW& optimizer, const SaveContext& context) {
  const float* params = model.params_flat().f32();
  const float* exp_avg = optimizer.exp_avg().f32();
  const float* exp_avg_sq = optimizer.exp_avg_sq().f32();
  std::vector<TensorPiece> pieces;
  for (const ParamSpec& spec : model.params()) {
    pieces.push_back(whole_piece("model." + spec.name, spec, params + spec.offset));
    pieces.push_back(whole_piece("optim.exp_avg." + spec.name, spec, exp_avg + spec.offset));
    pieces.push_back(whole_piece("optim.exp_avg_sq." + spec.name, spec, exp_avg_sq + spec.offset));
  }
  const nlohmann::json rank_state = {
      {"sample_rng", {{"seed", state.sample_rng.seed}, {"stream", state.sample_rng.stream}, {"counter", state.sample_rng.counter}}}};
  const nlohmann::json meta = {
      {"strata_version", STRATA_VERSION},
      {"step", step},
      {"scheduler_iteration", state.scheduler_iteration},
      {"optimizer_steps", state.optimizer_steps},
      {"loader_next_step", step},
      {"model", model_meta(model.dims())},
      {"layout", {{"world_size", cfg.derived.world_size}, {"dp", cfg.derived.dp_size}, {"tp", cfg.derived.tp_size},
                  {"pp", cfg.derived.pp_size}, {"zero_stage", cfg.zero_optimization.stage}}},
      {"config", config_to_yaml(cfg)}};
  return save_checkpoint(cfg.checkpoint.dir, step, context, pieces, rank_state, meta, cfg.checkpoint.keep_last);
}

LoopState load_training_checkpoint(const std::string& path, const std::string& source_key, Gpt& model,
                                    AdamW& optimizer, int rank) {
  const CheckpointReader reader = CheckpointReader::open(path, source_key);
  const nlohmann::json& meta = reader.global_meta();
  const GptDims& dims = model.dims();
  const nlohmann::json saved = meta.at("model");
  for (const char* key : {"n_layer", "n_head", "d_model", "vocab_size", "seq_len"}) {
    const nlohmann::json now = model_meta(dims).at(key);
    if (saved.at(key) != now) {
      throw UserError(fmt::format("{}: {}: the checkpoint's model has {} {} but the config asks for {}; resume with "
                                  "the same model.{} or set checkpoint.resume: none",
                                  source_key, reader.path(), key, saved.at(key).dump(), now.dump(), key));
    }
  }
  float* params = model.params_flat().f32();
  float* exp_avg = optimizer.exp_avg().f32();
  float* exp_avg_sq = optimizer.exp_avg_sq().f32();
  for (const ParamSpec& spec : model.params()) {
    read_param(reader, "model." + spec.name, spec, dims.vocab_size, params + spec.offset);
    read_param(reader, "optim.exp_avg." + spec.name, spec, dims.vocab_size, exp_avg + spec.offset);
    read_param(reader, "optim.exp_avg_sq." + spec.name, spec, dims.vocab_size, exp_avg_sq + spec.offset);
  }
  LoopState state;
  state.step = meta.at("step").get<int64_t>();
  state.scheduler_iteration = meta.at("scheduler_iteration").get<int64_t>();
  state.optimizer_steps = meta.at("optimizer_steps").get<int64_t>();
  const int saved_rank = rank < reader.saved_world_size() ? rank : 0;
  const nlohmann::json& rng = reader.rank_state(saved_rank).at("sample_rng");
  state.sample_rng = {rng.at("seed").get<uint64_t>(), rng.at("stream").get<uint64_t>(), rng.at("counter").get<uint64_t>()};
  optimizer.set_steps_taken(state.optimizer_steps);
  return state;
}

void dump_gradients(const std::string& path, Gpt& model) {
  const float* grads = model.grads_flat().f32();
  SafetensorsWriter writer;
  for (const ParamSpec& spec : model.params()) {
    std::vector<int64_t> shape = spec.shape;
    if (spec.name == "wte.weight") shape[0] = model.dims().vocab_size;  // rows are contiguous: cut the padding
    writer.add(spec.name, DType::F32, shape, grads + spec.offset);
  }
  writer.set_metadata("format", "pt");
  writer.write(path);
}

}  // namespace strata
