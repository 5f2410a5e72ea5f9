// `strata sample` and `strata eval`: a trained model used without training it — text sampled from
// a checkpoint (or a HuggingFace GPT-2 folder), or its loss on a token split — on one rank or on
// any layout under mpirun, with the engine, loaders and sampler that training uses.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "train/trainer.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

constexpr char kSourceKey[] = "--checkpoint";

// A checkpoint's own layout is left behind: the model runs as data parallelism over the ranks it is
// given (TP, PP and ZeRO only as --set asks; the accumulation follows from the saved global batch),
// on the device this machine has, and touches no checkpoint folder, metrics file or pretrained
// folder of the run that saved it.
const std::vector<std::string>& layout_resets() {
  static const std::vector<std::string> resets = {
      "parallelism.tensor_model_parallel_size=1", "parallelism.pipeline_model_parallel_size=1",
      "parallelism.sequence_parallel=false",      "parallelism.pipeline.schedule=1f1b",
      "parallelism.pipeline.virtual_stages=1",    "parallelism.pipeline.partition=uniform",
      "zero_optimization.stage=0",                "zero_optimization.offload_optimizer.device=none",
      "zero_optimization.offload_param.device=none", "activation_checkpointing.partition_activations=false",
      "gradient_accumulation_steps=auto",         "device=auto",
      "comm.backend=auto",                        "checkpoint.dir=",
      "checkpoint.resume=none",                   "checkpoint.save_interval=0",
      "checkpoint.save_initial=false",            "checkpoint.keep_last=0",
      "logging.metrics_file=",                    "logging.sample_interval=0",
      "train.eval_interval=0",                    "model.init_from=",
      "flops_profiler.enabled=false",             "csv_monitor.enabled=false"};
  return resets;
}

bool is_huggingface_folder(const std::string& path) {
  return fs::is_regular_file(fs::path(path) / "config.json") && !fs::exists(fs::path(path) / "manifest.json");
}

// The config the model was trained with (a strata checkpoint keeps it whole), or, for a
// HuggingFace folder, its dimensions, with the folder as the tokenizer when it holds one.
std::string saved_config_text(const std::string& path, int world_size) {
  if (is_huggingface_folder(path)) {
    const nlohmann::json model = CheckpointReader::open_huggingface(path, kSourceKey).global_meta().at("model");
    // Four sequences per micro-batch, a micro-batch per rank in a global batch.
    std::string text = fmt::format("train_batch_size: {}\ntrain_micro_batch_size_per_gpu: 4\n"
                                   "model: {{n_layer: {}, n_head: {}, d_model: {}, vocab_size: {}, seq_len: {}}}\n",
                                   4 * world_size,
                                   model.at("n_layer").get<int>(), model.at("n_head").get<int>(),
                                   model.at("d_model").get<int>(), model.at("vocab_size").get<int>(),
                                   model.at("seq_len").get<int>());
    const fs::path dir(path);
    if (fs::exists(dir / "tokenizer.json") || fs::exists(dir / "vocab.json"))
      text += "data: {tokenizer: " + nlohmann::json(path).dump() + "}\n";
    return text;
  }
  const CheckpointReader reader = CheckpointReader::open(path, kSourceKey);
  const nlohmann::json& meta = reader.global_meta();
  if (!meta.contains("config") || !meta.at("config").is_string())
    throw UserError(fmt::format("{}: {}: the manifest holds no config (a checkpoint of an older strata); export it "
                                "with strata export and give the exported folder",
                                kSourceKey, reader.path()));
  return meta.at("config").get<std::string>();
}

// The model of a checkpoint, laid out over this job's ranks and loaded.
struct LoadedModel {
  Config cfg;
  TrainingDevice device;
  std::unique_ptr<Topology> topology;
  std::unique_ptr<Engine> engine;
  std::string source;  // "step N of DIR" or "the HuggingFace folder DIR"
};

// The model is the checkpoint's: a --set of its shape would only be refused by the loader, in a
// resuming run's words.
void refuse_model_shape_sets(const std::vector<std::string>& overrides) {
  for (const std::string& set : overrides) {
    const std::string key = set.substr(0, set.find('='));
    for (const char* shape : {"model.n_layer", "model.n_head", "model.d_model", "model.vocab_size", "model.seq_len",
                              "model.preset", "model"}) {
      if (key == shape)
        throw UserError(fmt::format("--set {}: the model's shape is the checkpoint's; it cannot be changed here", set));
    }
  }
}

// `adjust` edits the config (the command's own options) before anything is built from it.
std::unique_ptr<LoadedModel> load_model(const MpiRuntime& mpi, const std::string& path,
                                        const std::vector<std::string>& overrides,
                                        const std::function<void(Config&)>& adjust) {
  auto m = std::make_unique<LoadedModel>();
  const bool huggingface = is_huggingface_folder(path);
  agree_on_user_errors(mpi, "reading the checkpoint's config", [&] {
    refuse_model_shape_sets(overrides);
    std::vector<std::string> sets = layout_resets();
    sets.insert(sets.end(), overrides.begin(), overrides.end());
    m->cfg = load_config_text(saved_config_text(path, mpi.world_size()), sets, mpi.world_size(),
                              huggingface ? path + "/config.json" : "the checkpoint's config");
    adjust(m->cfg);  // no data.train needed (check_runnable's): nothing trains
  });
  limit_blas_threads(mpi);
  const Config& cfg = m->cfg;
  agree_on_user_errors(mpi, "setting up the device", [&] { m->device = make_training_device(cfg, mpi); });
  const CommBackendKind comm = agree_on_devices(mpi, cfg, m->device);
  m->topology = std::make_unique<Topology>(
      mpi, GridShape{cfg.derived.dp_size, cfg.derived.pp_size, cfg.derived.tp_size}, comm,
      m->device.access ? &*m->device.access : nullptr);
  memory_checked(mpi, cfg, m->device);
  Backend& backend = *m->device.backend;
  m->engine = make_agreed<Engine>(mpi, "allocating the model", backend, engine_groups(*m->topology),
                                  gpt_dims_from_config(cfg), cfg.derived.micro_batch, cfg.model.recompute,
                                  engine_settings_from_config(cfg, backend.device(), mpi.local_size()));
  Engine& engine = *m->engine;
  if (huggingface) {
    engine.init_weights(static_cast<uint64_t>(cfg.train.seed));  // state the folder lacks (none for GPT-2)
    agree_on_user_errors(mpi, "reading the HuggingFace folder", [&] { read_pretrained_weights(path, engine); });
    m->source = "the HuggingFace folder " + path;
  } else {
    LoopState state;
    agree_on_user_errors(mpi, "reading the checkpoint",
                         [&] { state = read_training_checkpoint(path, kSourceKey, engine, mpi.world_rank()); });
    m->source = fmt::format("step {} of {}", state.step, CheckpointReader::open(path, kSourceKey).path());
  }
  engine.params_loaded();
  const std::string bad = engine.first_nonfinite_state();
  if (!bad.empty())
    throw UserError(fmt::format("{}: {}: {} holds a non-finite value", kSourceKey, path, bad), RaisedOn::EveryRank);
  return m;
}

std::string device_text(const LoadedModel& m) {
  return fmt::format("{} rank(s) = DP {} x TP {} x PP {} on {}", m.cfg.derived.dp_size * m.cfg.derived.tp_size *
                                                                       m.cfg.derived.pp_size,
                     m.cfg.derived.dp_size, m.cfg.derived.tp_size, m.cfg.derived.pp_size, m.device.description);
}

// The sample's text as it is (a byte-level model's bytes, a tokenizer's decoding), or its ids when
// the model has neither.
std::string sample_text(const Config& cfg, const BpeTokenizer* tokenizer, const std::vector<int32_t>& tokens) {
  if (tokenizer != nullptr) return cfg.logging.sample_prompt + tokenizer->decode(tokens.data(), tokens.size());
  if (cfg.model.vocab_size <= kByteVocabSize) return cfg.logging.sample_prompt + byte_decode(tokens.data(), tokens.size());
  return fmt::format("{}", fmt::join(tokens, " "));
}

}  // namespace

int run_sample(const MpiRuntime& mpi, const SampleOptions& o) {
  const auto m = load_model(mpi, o.checkpoint, o.overrides, [&](Config& cfg) {
    if (!o.tokenizer.empty()) cfg.data.tokenizer = o.tokenizer;
    cfg.logging.sample_prompt = o.prompt;
    if (cfg.model.vocab_size < kByteVocabSize && cfg.data.tokenizer.empty())
      throw UserError(fmt::format("{}: the model has {} token ids: samples start from byte-level text, which needs "
                                  "256 or more (or a tokenizer: --tokenizer)",
                                  kSourceKey, cfg.model.vocab_size));
    if (!o.prompt.empty() && cfg.model.vocab_size > kByteVocabSize && cfg.data.tokenizer.empty())
      throw UserError(fmt::format("--prompt: the model has {} token ids and no tokenizer is known (the checkpoint's "
                                  "config names none): give --tokenizer with the one it was trained with",
                                  cfg.model.vocab_size));
  });
  std::optional<BpeTokenizer> tokenizer;
  agree_on_user_errors(mpi, "loading the tokenizer", [&] {
    try {
      tokenizer = open_tokenizer(m->cfg);
    } catch (const UserError& e) {
      const std::string what = e.what();
      const std::string key = "data.tokenizer: ";
      if (!o.tokenizer.empty() && what.rfind(key, 0) == 0) throw UserError("--tokenizer: " + what.substr(key.size()));
      throw UserError(what + " (the checkpoint's config names it; give --tokenizer PATH for one here)");
    }
  });
  const BpeTokenizer* tok = tokenizer ? &*tokenizer : nullptr;
  if (mpi.world_rank() == 0)
    std::fprintf(stderr, "sampling %d x %d tokens from %s, %s\n", o.count, o.tokens, m->source.c_str(),
                 device_text(*m).c_str());
  // One stream for the job: every rank draws the same tokens (TP and PP ranks run the forward together).
  Rng rng(static_cast<uint64_t>(o.seed), rng_stream_id("sample"));
  const SamplingRule rule{o.temperature, o.top_k};
  for (int i = 0; i < o.count; ++i) {
    const std::optional<std::vector<int32_t>> tokens =
        sample_tokens(*m->engine, sample_start(m->cfg, tok), o.tokens, rng, [] { return false; }, rule);
    if (mpi.world_rank() != 0) continue;
    if (i > 0) std::fputs("---\n", stdout);
    std::string text = sample_text(m->cfg, tok, *tokens);
    if (text.empty() || text.back() != '\n') text += '\n';
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
  }
  return 0;
}

int run_eval(const MpiRuntime& mpi, const EvalOptions& o) {
  const auto m = load_model(mpi, o.checkpoint, o.overrides, [&](Config& cfg) {
    if (o.data.empty() && cfg.data.val.empty())
      throw UserError(fmt::format("{}: {}: its config names no validation split (data.val): give one with --data "
                                  "'DIR/val_*.bin'",
                                  kSourceKey, o.checkpoint));
    if (o.iters > 0) cfg.train.eval_iters = o.iters;
  });
  const Config& cfg = m->cfg;
  const std::string pattern = o.data.empty() ? cfg.data.val : o.data;
  const std::string key = o.data.empty() ? "data.val" : "--data";
  std::optional<TokenDataset> data;
  agree_on_user_errors(mpi, "opening the data", [&] {
    data = TokenDataset::open(pattern, cfg.model.vocab_size, key);
    GlobalSampler(*data, cfg.model.seq_len, false, 0);  // at least one sequence, or a UserError saying so
  });
  const int64_t sequences = eval_sequences(cfg);
  const Timer t;
  const Topology& topology = *m->topology;
  const double loss = *evaluate_loss(
      *m->engine, *data, cfg.model.seq_len, cfg.derived.micro_batch, sequences, m->topology->world(),
      topology.coord().dp, cfg.derived.dp_size, m->engine->zero_stage() == 3,
      [&](int dp) { return grid_rank(topology.shape(), {dp, cfg.derived.pp_size - 1, 0}); }, [] { return false; });
  const int64_t evaluated = std::min<int64_t>(sequences, GlobalSampler(*data, cfg.model.seq_len, false, 0).num_sequences());
  log_info("{} on {}: {}", m->source, device_text(*m), pattern);
  log_info("val loss {:.6f} | perplexity {:.4g} | {} sequences of {} tokens | {:.1f}s", loss, std::exp(loss), evaluated,
           cfg.model.seq_len, t.seconds());
  return 0;
}

}  // namespace strata
