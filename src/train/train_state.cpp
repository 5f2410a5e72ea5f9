// Checkpoint contents of a training run: fp32 parameters ("model.<HF name>", the master copy
// under mixed precision), Adam moments ("optim.exp_avg.<name>", "optim.exp_avg_sq.<name>") as
// boxes of each global tensor cut from whatever this rank owns under its TP slice and ZeRO
// layout (parameters replicated over TP saved by TP rank 0 only), and the loop state (step,
// schedule, optimizer step count, fp16 loss scaler, sampling RNG), with the config and layout in
// the manifest. Loading reads the boxes the current layout needs, whatever layout (or
// precision) saved them.
#include <fmt/core.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "train/train_internal.h"

namespace strata {
namespace {

const char* state_prefix(StateKind kind) {
  switch (kind) {
    case StateKind::Params: return "model.";
    case StateKind::ExpAvg: return "optim.exp_avg.";
    case StateKind::ExpAvgSq: return "optim.exp_avg_sq.";
  }
  return "";
}

constexpr StateKind kAllKinds[] = {StateKind::Params, StateKind::ExpAvg, StateKind::ExpAvgSq};

// A leading run of rows read from a saved table with more rows: wte under another vocab padding
// (or, imported, the real vocabulary), and imported wpe with more positions than seq_len.
bool reads_leading_rows(const ParamSpec& spec, bool imported) {
  return spec.name == "wte.weight" || (imported && spec.name == "wpe.weight" && !spec.tp_sharded());
}

// The saved tensor must have the model's shape, except for reads_leading_rows's tables, whose
// first dimension may be larger (only the rows the model has are read).
void check_saved_shape(const CheckpointReader& reader, const std::string& key, const ParamSpec& spec, int vocab_size,
                       bool imported = false) {
  const TensorInfo& info = reader.info(key);
  const std::vector<int64_t>& want = spec.global_shape;
  const int64_t rows = spec.name == "wte.weight" ? vocab_size : want.at(0);
  bool fits = info.global_shape.size() == want.size();
  for (size_t d = 0; fits && d < want.size(); ++d) {
    fits = (d == 0 && reads_leading_rows(spec, imported)) ? info.global_shape[0] >= rows
                                                            : info.global_shape[d] == want[d];
  }
  if (!fits) {
    std::vector<int64_t> needed = want;
    if (reads_leading_rows(spec, imported)) needed[0] = rows;  // at least these rows
    throw UserError(fmt::format("{}{}: tensor {} has shape {} {} but the model needs {}",
                                imported ? "model.init_from: " : "", reader.path(), imported ? key.substr(6) : key,
                                nlohmann::json(info.global_shape).dump(),
                                imported ? "in the folder" : "in the checkpoint", nlohmann::json(needed).dump()));
  }
}

// Elements [slice.begin, + slice.count) of this rank's tensor into dst, from whichever pieces of
// the saved global tensor hold them.
void read_slice(const CheckpointReader& reader, const std::string& key, const SpecSlice& slice, int vocab_size,
                int d_model, float* dst) {
  const ParamSpec& spec = *slice.spec;
  if (spec.name == "wpe.weight" && !spec.tp_sharded() && reader.info(key).global_shape.at(0) > spec.global_shape[0]) {
    reader.read_flat(key, slice.begin, slice.count, DType::F32, dst);  // the first positions: leading rows
    return;
  }
  if (spec.name == "wte.weight") {
    // One run of the table (TP splits it by rows). Rows past the real vocabulary are padding: zero
    // here, whatever padding (another TP size) saved them.
    const GlobalRun run = tp_global_runs(spec, slice.begin, slice.count).at(0);
    const int64_t real = int64_t{vocab_size} * d_model;
    const int64_t count = std::max<int64_t>(0, std::min(run.count, real - run.global_begin));
    if (count > 0) reader.read_flat(key, run.global_begin, count, DType::F32, dst);
    std::fill(dst + count, dst + slice.count, 0.0f);
    return;
  }
  const GlobalBoxes boxes = tp_global_boxes(spec, slice.begin, slice.count);
  for (const ViewBox& box : boxes.boxes) {
    reader.read_view_box(key, boxes.view, box.offset, box.shape, DType::F32, dst);
    dst += box.numel();
  }
}

}  // namespace

nlohmann::json model_meta(const GptDims& d) {
  return {{"n_layer", d.n_layer}, {"n_head", d.n_head},         {"d_model", d.d_model},
          {"vocab_size", d.vocab_size}, {"padded_vocab", d.padded_vocab}, {"seq_len", d.seq_len}};
}

namespace {

// The pieces of global tensors this rank saves, from the engine's spans of each kind of state.
std::vector<TensorPiece> checkpoint_pieces(Engine& engine, const std::function<std::vector<FlatSpan>(StateKind)>& spans) {
  const std::vector<ParamSpec>& specs = engine.params();
  std::vector<TensorPiece> pieces;
  for (StateKind kind : kAllKinds) {
    for (const FlatSpan& span : spans(kind)) {
      for (const SpecSlice& slice : slices_by_spec(specs, span.flat_begin, span.count)) {
        // Every TP rank holds the replicated parameters (bit-identical): one copy is saved; and
        // the first pipeline stage's embeddings, not the last stage's copy.
        if (!slice.spec->tp_sharded() && slice.spec->tp_rank != 0) continue;
        if (slice.spec->tied_copy) continue;
        const GlobalBoxes boxes = tp_global_boxes(*slice.spec, slice.begin, slice.count);
        int64_t at = slice.span_offset;  // of the box in the span
        for (const ViewBox& box : boxes.boxes) {
          TensorPiece p;
          p.name = state_prefix(kind) + slice.spec->name;
          p.dtype = DType::F32;
          p.global_shape = slice.spec->global_shape;
          p.view_shape = boxes.view;
          p.offset = box.offset;
          p.shape = box.shape;
          if (span.data) {
            p.data = span.data + at;
          } else if (span.read) {
            p.produce = [read = span.read, at, n = box.numel()](void* buffer) { read(at, n, static_cast<float*>(buffer)); };
          }
          at += box.numel();
          pieces.push_back(std::move(p));
        }
      }
    }
  }
  return pieces;
}

}  // namespace

uint64_t checkpoint_bytes_of_rank(Engine& engine) {
  uint64_t bytes = 0;
  for (const TensorPiece& p : checkpoint_pieces(engine, [&](StateKind k) { return engine.saved_span_layout(k); })) {
    uint64_t n = dtype_size(p.dtype);
    for (int64_t d : p.shape) n *= static_cast<uint64_t>(d);
    bytes += n;
  }
  return bytes;
}

std::string save_training_checkpoint(const Config& cfg, int64_t step, const LoopState& state, Engine& engine,
                                     const SaveContext& context) {
  const std::vector<TensorPiece> pieces =
      checkpoint_pieces(engine, [&](StateKind k) { return engine.saved_spans(k); });
  const nlohmann::json rank_state = {
      {"sample_rng", {{"seed", state.sample_rng.seed}, {"stream", state.sample_rng.stream}, {"counter", state.sample_rng.counter}}}};
  nlohmann::json meta = {
      {"strata_version", STRATA_VERSION},
      {"step", step},
      {"scheduler_iteration", state.scheduler_iteration},
      {"optimizer_steps", state.optimizer_steps},
      {"loader_next_step", step},
      {"loader_next_sequence", state.next_sequence},
      {"data_order", state.data_order},
      {"model", model_meta(engine.model().dims())},
      {"layout", {{"world_size", cfg.derived.world_size}, {"dp", cfg.derived.dp_size}, {"tp", cfg.derived.tp_size},
                  {"pp", cfg.derived.pp_size}, {"zero_stage", cfg.zero_optimization.stage}}},
      {"config", config_to_yaml(cfg)},
      {"run_id", state.run_id},
      {"pending_reports", state.pending_reports}};
  if (state.loss_scaler) {
    const LossScalerState& ls = *state.loss_scaler;
    // nlohmann writes doubles so that they read back bit-exact: the resume is exact.
    meta["loss_scaler"] = {{"scale", ls.scale},
                           {"hysteresis_left", ls.hysteresis_left},
                           {"iteration", ls.iteration},
                           {"last_overflow_iteration", ls.last_overflow_iteration}};
  }
  const std::string dir = save_checkpoint(cfg.checkpoint.dir, step, context, pieces, rank_state, meta,
                                          cfg.checkpoint.keep_last);
  return dir;
}

namespace {

LoopState read_loop_state(const CheckpointReader& reader, const std::string& source_key, Engine& engine, int rank) {
  const nlohmann::json& meta = reader.global_meta();
  const GptDims& dims = engine.model().dims();
  const nlohmann::json saved = meta.at("model");
  for (const char* key : {"n_layer", "n_head", "d_model", "vocab_size", "seq_len"}) {
    const nlohmann::json now = model_meta(dims).at(key);
    if (saved.at(key) != now) {
      throw UserError(fmt::format("{}: {}: the checkpoint's model has {} {} but the config asks for {}; resume with "
                                  "the same model.{}, or start over (checkpoint.resume: none with checkpoint.overwrite: true, or "
                                  "another checkpoint.dir)",
                                  source_key, reader.path(), key, saved.at(key).dump(), now.dump(), key));
    }
  }
  const std::vector<ParamSpec>& specs = engine.params();
  for (StateKind kind : kAllKinds) {
    for (const ParamSpec& spec : specs) check_saved_shape(reader, state_prefix(kind) + spec.name, spec, dims.vocab_size);
    for (const FlatSpan& span : engine.held_spans(kind)) {
      for (const SpecSlice& slice : slices_by_spec(specs, span.flat_begin, span.count)) {
        fill_span(span, slice.span_offset, slice.count, [&](float* out) {
          read_slice(reader, state_prefix(kind) + slice.spec->name, slice, dims.vocab_size, dims.d_model, out);
        });
      }
    }
  }
  LoopState state;
  state.step = meta.at("step").get<int64_t>();
  state.scheduler_iteration = meta.at("scheduler_iteration").get<int64_t>();
  state.optimizer_steps = meta.at("optimizer_steps").get<int64_t>();
  if (meta.contains("loader_next_sequence")) state.next_sequence = meta.at("loader_next_sequence").get<int64_t>();
  if (meta.contains("data_order")) state.data_order = meta.at("data_order");
  if (meta.contains("run_id")) state.run_id = meta.at("run_id").get<std::string>();
  if (meta.contains("pending_reports")) state.pending_reports = meta.at("pending_reports").get<std::vector<std::string>>();
  const int saved_rank = rank < reader.saved_world_size() ? rank : 0;
  const nlohmann::json& rng = reader.rank_state(saved_rank).at("sample_rng");
  state.sample_rng = {rng.at("seed").get<uint64_t>(), rng.at("stream").get<uint64_t>(), rng.at("counter").get<uint64_t>()};
  engine.set_optimizer_steps(state.optimizer_steps);
  if (engine.precision() == DType::F16) {
    // A checkpoint from an fp32/bf16 run has no scaler: the fp16 run starts a fresh one.
    if (meta.contains("loss_scaler")) {
      const nlohmann::json& ls = meta.at("loss_scaler");
      LossScalerState scaler;
      scaler.scale = ls.at("scale").get<double>();
      scaler.hysteresis_left = ls.at("hysteresis_left").get<int>();
      scaler.iteration = ls.at("iteration").get<int64_t>();
      scaler.last_overflow_iteration = ls.at("last_overflow_iteration").get<int64_t>();
      engine.set_loss_scaler_state(scaler);
    }
    state.loss_scaler = engine.loss_scaler_state();
  }
  return state;
}

}  // namespace

LoopState read_training_checkpoint(const std::string& path, const std::string& source_key, Engine& engine, int rank) {
  const CheckpointReader reader = CheckpointReader::open(path, source_key);
  try {
    return read_loop_state(reader, source_key, engine, rank);
  } catch (const nlohmann::json::exception& e) {
    // A manifest that parses but lacks a field, or holds one of the wrong type.
    throw UserError(fmt::format("{}: {}: the manifest's training state is incomplete or malformed ({})", source_key,
                                reader.path(), e.what()));
  }
}

void read_pretrained_weights(const std::string& dir, Engine& engine, const std::string& source_key) {
  const CheckpointReader reader = CheckpointReader::open_huggingface(dir, source_key);
  const std::string where = source_key + ": " + reader.path();
  const GptDims& dims = engine.model().dims();
  const nlohmann::json& folder = reader.global_meta().at("model");
  // The head count shapes no tensor, so only config.json can say the model splits them otherwise.
  if (folder.at("n_head") != dims.n_head) {
    throw UserError(fmt::format("{}: its config.json says n_head {} but the model has {} heads; set model.n_head to the "
                                "folder's or leave it unset",
                                where, folder.at("n_head").dump(), dims.n_head));
  }
  // No tensor the model lacks: a deeper folder would otherwise start a shallower model silently.
  for (const std::string& key : reader.tensor_names()) {
    const std::string name = key.substr(6);  // after "model."
    std::string suffix;
    if (gpt2_layer_of(name, &suffix) >= dims.n_layer) {
      throw UserError(fmt::format("{}: holds {} but the model has {} layers (its config.json says n_layer {}); set "
                                  "model.n_layer to the folder's or leave it unset",
                                  where, name, dims.n_layer, folder.at("n_layer").dump()));
    }
  }
  const std::vector<ParamSpec>& specs = engine.params();
  for (const ParamSpec& spec : specs) {
    if (spec.tied_copy) continue;
    if (!reader.contains("model." + spec.name)) {
      throw UserError(fmt::format("{}: has no tensor {}, which the model needs (the folder's config.json: n_layer {}, "
                                  "n_embd {})",
                                  where, spec.name, folder.at("n_layer").dump(), folder.at("d_model").dump()));
    }
    check_saved_shape(reader, "model." + spec.name, spec, dims.vocab_size, /*imported=*/true);
  }
  for (const FlatSpan& span : engine.held_spans(StateKind::Params)) {
    for (const SpecSlice& slice : slices_by_spec(specs, span.flat_begin, span.count)) {
      fill_span(span, slice.span_offset, slice.count, [&](float* out) {
        read_slice(reader, "model." + slice.spec->name, slice, dims.vocab_size, dims.d_model, out);
      });
    }
  }
}

void dump_gradients(const std::string& path, Gpt& model, double divisor) {
  const Tensor flat = model.grads_flat();
  std::vector<float> host(static_cast<size_t>(flat.numel()));
  model.backend().copy(flat, Tensor(host.data(), DType::F32, {flat.numel()}, Device::CPU));
  if (divisor != 1.0) {  // the loss scale, and the division by DP still to come after the reduction
    for (float& g : host) g = static_cast<float>(g / divisor);
  }
  const float* grads = host.data();
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
