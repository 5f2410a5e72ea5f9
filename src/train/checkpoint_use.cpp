// `strata sample` and `strata eval`: a trained model used without training it — text sampled from
// a checkpoint (or a HuggingFace GPT-2 folder), or its loss on a token split — on one rank or on
// any layout under mpirun, with the engine, loaders and sampler that training uses.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
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
// The sequences of one of eval's global batches from a HuggingFace folder, whatever the ranks.
constexpr int64_t kHuggingFaceGlobalBatch = 8;

// A checkpoint's own layout is left behind: the model runs as data parallelism over the ranks it is
// given (TP, PP and ZeRO only as --set asks; a micro-batch a rank at a time, the batch of no
// training), on the device this machine has, and touches no checkpoint folder, metrics file,
// offload folder or pretrained folder of the run that saved it.
const std::vector<std::string>& layout_resets() {
  static const std::vector<std::string> resets = {
      "parallelism.tensor_model_parallel_size=1", "parallelism.pipeline_model_parallel_size=1",
      "parallelism.sequence_parallel=false",      "parallelism.pipeline.schedule=1f1b",
      "parallelism.pipeline.virtual_stages=1",    "parallelism.pipeline.partition=uniform",
      "zero_optimization.stage=0",                "zero_optimization.offload_optimizer.device=none",
      "zero_optimization.offload_param.device=none", "activation_checkpointing.partition_activations=false",
      "zero_optimization.offload_optimizer.nvme_path=", "zero_optimization.offload_param.nvme_path=",
      "train_batch_size=auto",                    "gradient_accumulation_steps=1",
      "device=auto",                              "comm.backend=auto",
      "checkpoint.dir=",                          "checkpoint.resume=none",
      "checkpoint.save_interval=0",               "checkpoint.save_initial=false",
      "checkpoint.keep_last=0",                   "logging.metrics_file=",
      "logging.sample_interval=0",                "train.eval_interval=0",
      "model.init_from=",                         "flops_profiler.enabled=false",
      "csv_monitor.enabled=false"};
  return resets;
}

// The --set keys that change what a command does: the layout and its memory, the device, the
// precision, and each command's own (eval's split, sample's tokenizer). The rest are training's
// (an optimizer, a schedule, a checkpoint folder, a metrics file) or the model's shape: refused
// rather than ignored.
void check_use_sets(const std::vector<std::string>& overrides, const std::vector<std::string>& own_keys) {
  static const std::vector<std::string> sections = {"parallelism", "zero_optimization", "activation_checkpointing",
                                                    "comm"};
  std::vector<std::string> keys = {"device", "fp16.enabled", "bf16.enabled", "model.recompute",
                                   "model.attention_probabilities", "train_micro_batch_size_per_gpu"};
  keys.insert(keys.end(), own_keys.begin(), own_keys.end());
  for (const std::string& set : overrides) {
    const std::string key = set.substr(0, set.find('='));
    const std::string section = key.substr(0, key.find('.'));
    // Forwards alone follow no schedule of steps: a pipeline here is 1F1B's stages, a chunk each.
    if (key == "parallelism.pipeline.schedule" || key == "parallelism.pipeline.virtual_stages")
      throw UserError(fmt::format("--set {}: forwards alone follow no schedule; a pipeline here runs one model chunk "
                                  "per stage (set parallelism.pipeline_model_parallel_size only)",
                                  set));
    if (std::find(sections.begin(), sections.end(), section) != sections.end() ||
        std::find(keys.begin(), keys.end(), key) != keys.end())
      continue;
    if (section == "model" && key != "model.init_from")
      throw UserError(fmt::format("--set {}: the model's shape is the checkpoint's; it cannot be changed here", set));
    throw UserError(fmt::format("--set {}: changes nothing here; the keys that do: {}.*, {}", set,
                                fmt::join(sections, ".*, "), fmt::join(keys, ", ")));
  }
}

bool is_huggingface_folder(const std::string& path) {
  return fs::is_regular_file(fs::path(path) / "config.json") && !fs::exists(fs::path(path) / "manifest.json");
}

// What a checkpoint says of its model: the config it was trained with (a strata checkpoint keeps
// it whole) and that run's global batch (eval's batches are the run's own), or, for a HuggingFace
// folder, its dimensions, with the folder as the tokenizer when it holds one.
struct SavedModel {
  std::string config_text;
  int64_t global_batch = kHuggingFaceGlobalBatch;
  bool huggingface = false;
  // A strata checkpoint's step folder, found once (a folder's `latest` may move on while a run
  // saves into it), and its step; a HuggingFace folder as given, step -1.
  std::string dir;
  int64_t step = -1;
};

SavedModel saved_model(const std::string& path) {
  SavedModel saved;
  saved.huggingface = is_huggingface_folder(path);
  saved.dir = path;
  if (saved.huggingface) {
    const nlohmann::json model = CheckpointReader::open_huggingface(path, kSourceKey).global_meta().at("model");
    try {
      saved.config_text = fmt::format("train_micro_batch_size_per_gpu: 4\n"
                                      "model: {{n_layer: {}, n_head: {}, d_model: {}, vocab_size: {}, seq_len: {}}}\n",
                                      model.at("n_layer").get<int>(), model.at("n_head").get<int>(),
                                      model.at("d_model").get<int>(), model.at("vocab_size").get<int>(),
                                      model.at("seq_len").get<int>());
    } catch (const nlohmann::json::exception& e) {
      throw UserError(fmt::format("{}: {}/config.json: a dimension is not a whole number ({})", kSourceKey, path,
                                  e.what()));
    }
    const fs::path dir(path);
    if (fs::exists(dir / "tokenizer.json") || fs::exists(dir / "vocab.json"))
      saved.config_text += "data: {tokenizer: " + nlohmann::json(path).dump() + "}\n";
    return saved;
  }
  const CheckpointReader reader = CheckpointReader::open(path, kSourceKey);
  const nlohmann::json& meta = reader.global_meta();
  if (!meta.contains("config") || !meta.at("config").is_string())
    throw UserError(fmt::format("{}: {}: the manifest holds no config (a checkpoint of an older strata); export it "
                                "with strata export and give the exported folder",
                                kSourceKey, reader.path()));
  saved.config_text = meta.at("config").get<std::string>();
  saved.dir = reader.path();
  saved.step = reader.step();
  saved.global_batch = load_config_text(saved.config_text, {}, reader.saved_world_size(), "the checkpoint's config")
                           .derived.global_batch;
  return saved;
}

// What a command adds to the config: `sets` after the resets, and the keys of its own that
// --set may change.
struct CommandSets {
  std::vector<std::string> sets;
  std::vector<std::string> own_keys;
};

// The model of a checkpoint, laid out over this job's ranks and loaded.
struct LoadedModel {
  Config cfg;
  SavedModel saved;
  TrainingDevice device;
  std::unique_ptr<Topology> topology;
  std::unique_ptr<Engine> engine;
  std::string source;  // "step N of DIR" or "the HuggingFace folder DIR"
};

// The config: the saved one, its layout reset, then `command_sets` (the command's own choices),
// then the user's --set, then `adjust` (the command's options).
void settle_config(LoadedModel& m, const MpiRuntime& mpi, const std::string& path, const CommandSets& command,
                   const std::vector<std::string>& overrides, const std::function<void(Config&)>& adjust) {
  agree_on_user_errors(mpi, "reading the checkpoint's config", [&] {
    check_use_sets(overrides, command.own_keys);
    m.saved = saved_model(path);
    std::vector<std::string> sets = layout_resets();
    sets.insert(sets.end(), command.sets.begin(), command.sets.end());
    sets.insert(sets.end(), overrides.begin(), overrides.end());
    m.cfg = load_config_text(m.saved.config_text, sets, mpi.world_size(),
                             m.saved.huggingface ? path + "/config.json" : "the checkpoint's config");
    adjust(m.cfg);  // no data.train needed (check_runnable's): nothing trains
  });
  // Each rank read the folder on its own: on nodes with copies of their own, or beside a run that
  // saves into it, they could have found different checkpoints (mixing their slices) or configs.
  if (mpi.world_size() == 1) return;
  const std::string found = config_to_yaml(m.cfg) + m.saved.dir;
  Checksum64 hash;
  hash.update(found.data(), found.size());
  const std::vector<int64_t> all = mpi.all_gather({m.saved.step, static_cast<int64_t>(hash.digest())});
  const int r = first_rank_unlike_rank0(all, 2);
  if (r < 0) return;
  throw UserError(fmt::format("{}: {}: rank {} found another checkpoint or config than rank 0 (step {} against {}): "
                              "give a step folder that every node sees the same, on storage they share",
                              kSourceKey, path, r, all[static_cast<size_t>(r) * 2], all[0]),
                  RaisedOn::EveryRank);
}

std::unique_ptr<LoadedModel> load_model(const MpiRuntime& mpi, const std::string& path, const CommandSets& command,
                                        const std::vector<std::string>& overrides,
                                        const std::function<void(Config&)>& adjust) {
  auto m = std::make_unique<LoadedModel>();
  settle_config(*m, mpi, path, command, overrides, adjust);
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
  if (m->saved.huggingface) {
    engine.init_weights(static_cast<uint64_t>(cfg.train.seed));  // state the folder lacks (none for GPT-2)
    agree_on_user_errors(mpi, "reading the HuggingFace folder",
                         [&] { read_pretrained_weights(path, engine, kSourceKey); });
    m->source = "the HuggingFace folder " + path;
  } else {
    agree_on_user_errors(mpi, "reading the checkpoint",
                         [&] { read_training_checkpoint(m->saved.dir, kSourceKey, engine, mpi.world_rank()); });
    m->source = fmt::format("step {} of {}", m->saved.step, m->saved.dir);
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

// The sample as written: the prompt and its text as they are, or its ids when the model has no text.
std::string sample_text(const Config& cfg, const BpeTokenizer* tokenizer, const std::vector<int32_t>& tokens) {
  if (const std::optional<std::string> text = sample_as_text(cfg, tokenizer, tokens))
    return cfg.logging.sample_prompt + *text;
  return fmt::format("{}", fmt::join(tokens, " "));
}

// The tokenizer samples are encoded and decoded with, checked against the model; errors name where
// it came from.
std::optional<BpeTokenizer> sample_tokenizer(const LoadedModel& m, const SampleOptions& o) {
  const Config& cfg = m.cfg;
  if (cfg.data.tokenizer.empty()) return std::nullopt;
  const bool set = std::any_of(o.overrides.begin(), o.overrides.end(),
                               [](const std::string& s) { return s.rfind("data.tokenizer=", 0) == 0; });
  const std::string key = !o.tokenizer.empty() ? "--tokenizer"
                          : set                ? "data.tokenizer"
                          : m.saved.huggingface ? "the HuggingFace folder's tokenizer"
                                                : "data.tokenizer (the checkpoint's config; --tokenizer gives another)";
  BpeTokenizer tokenizer = BpeTokenizer::load(cfg.data.tokenizer, key);
  if (tokenizer.vocab_size() > cfg.model.vocab_size)
    throw UserError(fmt::format("{}: {} has {} token ids, more than the model's {}: it is not the tokenizer the model "
                                "was trained with",
                                key, tokenizer.source(), tokenizer.vocab_size(), cfg.model.vocab_size));
  return tokenizer;
}

// Writes `text` to standard output: 0, or the errno of a failed write (EPIPE: the reader has gone).
int write_stdout(const std::string& text) {
  errno = 0;
  if (std::fwrite(text.data(), 1, text.size(), stdout) == text.size() && std::fflush(stdout) == 0) return 0;
  return errno != 0 ? errno : EIO;
}

void check_sample_vocabulary(const Config& cfg) {
  if (cfg.model.vocab_size < kByteVocabSize && cfg.data.tokenizer.empty())
    throw UserError(fmt::format("{}: the model has {} token ids: samples start from byte-level text, which needs "
                                "256 or more (or a tokenizer: --tokenizer)",
                                kSourceKey, cfg.model.vocab_size));
  if (!cfg.logging.sample_prompt.empty() && cfg.model.vocab_size > kByteVocabSize && cfg.data.tokenizer.empty())
    throw UserError(fmt::format("--prompt: the model has {} token ids and no tokenizer is known (the checkpoint's "
                                "config names none): give --tokenizer with the one it was trained with",
                                cfg.model.vocab_size));
}

}  // namespace

int run_sample(const MpiRuntime& mpi, const SampleOptions& o) {
  // One sequence at a time: a micro-batch of one unless --set says otherwise.
  const CommandSets command{{"train_micro_batch_size_per_gpu=1"}, {"data.tokenizer"}};
  const auto m = load_model(mpi, o.checkpoint, command, o.overrides, [&](Config& cfg) {
    if (!o.tokenizer.empty()) cfg.data.tokenizer = o.tokenizer;
    cfg.logging.sample_prompt = o.prompt;
    check_sample_vocabulary(cfg);
  });
  std::optional<BpeTokenizer> tokenizer;
  agree_on_user_errors(mpi, "loading the tokenizer", [&] { tokenizer = sample_tokenizer(*m, o); });
  const BpeTokenizer* tok = tokenizer ? &*tokenizer : nullptr;
  if (mpi.world_rank() == 0)
    std::fprintf(stderr, "sampling %d x %d tokens from %s, %s\n", o.count, o.tokens, m->source.c_str(),
                 device_text(*m).c_str());
  // One stream for the job: every rank draws the same tokens (TP and PP ranks run the forward together).
  Rng rng(static_cast<uint64_t>(o.seed), rng_stream_id("sample"));
  const SamplingRule rule{o.temperature, o.top_k};
  // After each sample the ranks agree whether rank 0 could write it: a reader that has gone (`| head`)
  // ends the job quietly, any other failed write with an error.
  int write_error = 0;
  const std::vector<int32_t> start = sample_start(m->cfg, tok);
  for (int i = 0; i < o.count; ++i) {
    const std::optional<std::vector<int32_t>> tokens =
        sample_tokens(*m->engine, start, o.tokens, rng, [] { return false; }, rule);
    if (mpi.world_rank() == 0) {
      std::string text = (i > 0 ? "---\n" : "") + sample_text(m->cfg, tok, *tokens);
      if (text.empty() || text.back() != '\n') text += '\n';
      write_error = write_stdout(text);
    }
    if (mpi.all_gather({write_error})[0] != 0) break;  // rank 0's
  }
  if (write_error == 0 || write_error == EPIPE) return 0;
  log_error("writing the samples to standard output: {}", std::strerror(write_error));
  return kExitUserError;
}

int run_eval(const MpiRuntime& mpi, const EvalOptions& o) {
  const auto adjust = [&](Config& cfg) {
    if (o.data.empty() && cfg.data.val.empty())
      throw UserError(fmt::format("{}: {}: its config names no validation split (data.val): give one with --data "
                                  "'DIR/val_*.bin'",
                                  kSourceKey, o.checkpoint));
    if (o.iters > 0) cfg.train.eval_iters = o.iters;
  };
  const auto m = load_model(mpi, o.checkpoint, CommandSets{{}, {"data.val", "train.eval_iters"}}, o.overrides, adjust);
  const Config& cfg = m->cfg;
  const std::string pattern = o.data.empty() ? cfg.data.val : o.data;
  const std::string key = o.data.empty() ? "data.val" : "--data";
  std::optional<TokenDataset> data;
  int64_t available = 0;  // whole sequences in the split
  agree_on_user_errors(mpi, "opening the data", [&] {
    data = TokenDataset::open(pattern, cfg.model.vocab_size, key);
    available = GlobalSampler(*data, cfg.model.seq_len, false, 0).num_sequences();  // a UserError when none
  });
  // Ranks reading copies of their own must read the same tokens: the batches are split among them.
  check_same_token_counts(mpi, {key}, {data->num_tokens()});
  // The run's own global batches (a HuggingFace folder's are 8 sequences), whatever the ranks now.
  const int64_t sequences = eval_sequences(cfg.train.eval_iters, m->saved.global_batch);
  const Timer t;
  const double loss = *evaluate_loss(*m->engine, *data, cfg.model.seq_len, cfg.derived.micro_batch, sequences,
                                     *m->topology, [] { return false; });
  if (mpi.world_rank() != 0) return 0;
  const int64_t evaluated = std::min(sequences, available);
  log_flush();  // the lines below follow whatever was logged before them
  const int error = write_stdout(fmt::format(
      "{} on {}: {}\nval loss {:.6f} | perplexity {:.4g} | {} sequences of {} tokens | {:.1f}s\n", m->source,
      device_text(*m), pattern, loss, std::exp(loss), evaluated, cfg.model.seq_len, t.seconds()));
  if (error == 0) return 0;
  log_error("writing the result to standard output: {}", std::strerror(error));
  return kExitUserError;
}

}  // namespace strata
