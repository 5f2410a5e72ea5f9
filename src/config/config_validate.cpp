// Validation of a typed Config: the ranges of the field table (config_fields.h), the rules that
// join keys (DeepSpeed's batch rule, the rank grid, head/layer divisibility) and the features
// that parse but are not implemented yet. Every problem is collected, in a fixed order, so a
// user fixes a config in one pass.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>

#include <fmt/format.h>

#include "config/config_fields.h"
#include "pipeline/pipeline.h"

namespace strata {
namespace config_detail {
namespace {

class Problems {
 public:
  void add(const std::string& path, const std::string& message) { list_.push_back({path, message}); }

  template <typename T>
  void at_least(const std::string& path, T value, T min) {
    if (value < min) add(path, fmt::format("must be ≥ {}, got {}", min, value));
  }
  void fraction(const std::string& path, double value) {
    if (!(value >= 0 && value <= 1)) add(path, fmt::format("must be in [0, 1], got {}", value));
  }

  std::vector<ConfigError> take() { return std::move(list_); }

 private:
  std::vector<ConfigError> list_;
};

// Walks the field table and checks each number against its bound, for the keys at or under one
// dotted path only, so each group of checks below reports its keys where it always has.
class RangeChecker {
 public:
  RangeChecker(std::string prefix, const std::string& key, Problems& p)
      : prefix_(std::move(prefix)), key_(key), p_(p) {}
  template <typename T>
  void value(const char* name, const T& v, Bound bound = {}) {
    if (bound.kind != Bound::Kind::Any) check(prefix_ + name, v, bound);
  }
  template <typename T>
  void count(const char* name, const T& v, Bound bound = {}) {
    if (bound.kind != Bound::Kind::Any) check(prefix_ + name, v, bound);
  }
  template <typename E, typename N>
  void choice(const char*, const E&, const N&) {}
  template <typename E, typename N>
  void choice_any_case(const char*, const E&, const N&) {}
  template <typename Fn>
  void section(const char* name, Fn&& fields, const char* = nullptr) {
    std::string sub_prefix = prefix_ + name + ".";
    // Only a section on the way to the key, or inside it, holds fields to check (the config is
    // validated often: `strata plan` resolves thousands of layouts).
    const std::string key_dot = key_ + ".";
    if (key_dot.rfind(sub_prefix, 0) != 0 && sub_prefix.rfind(key_dot, 0) != 0) return;
    RangeChecker sub(std::move(sub_prefix), key_, p_);
    fields(sub);
  }
  void scheduler(const SchedulerConfig&) {}  // its parameters depend on its type: check_scheduler
  void pipeline_partition(const PipelineConfig&) {}
  void data_sources(const char*, const std::vector<DataSource>&) {}  // check_data_sources

 private:
  template <typename T>
  void check(const std::string& path, const std::optional<T>& v, Bound bound) {
    if (v) check(path, *v, bound);
  }
  template <typename T>
  void check(const std::string& path, const T& v, Bound bound) {
    if constexpr (std::is_arithmetic_v<T>) {
      if (!(path == key_ || path.rfind(key_ + ".", 0) == 0)) return;  // value() and count() skip Any
      const auto value = static_cast<double>(v);
      switch (bound.kind) {
        case Bound::Kind::AtLeast:
          if (value < bound.lo) p_.add(path, fmt::format("must be ≥ {}, got {}", bound.lo, v));
          break;
        case Bound::Kind::Positive:
          if (!(value > 0)) p_.add(path, fmt::format("must be > 0, got {}", v));
          break;
        case Bound::Kind::Within:
          if (value < bound.lo || value > bound.hi)
            p_.add(path, fmt::format("must be in {}..{}, got {}", static_cast<int64_t>(bound.lo),
                                     static_cast<int64_t>(bound.hi), v));
          break;
        case Bound::Kind::Fraction:
          if (!(value >= 0 && value <= 1)) p_.add(path, fmt::format("must be in [0, 1], got {}", v));
          break;
        case Bound::Kind::Any:
          break;
      }
    }
  }

  std::string prefix_;
  const std::string& key_;
  Problems& p_;
};

// The table's ranges for the keys at or under `key`.
void check_ranges(const Config& c, const std::string& key, Problems& p) {
  RangeChecker checker("", key, p);
  config_fields(checker, c);
}

void check_optimizer(const Config& c, Problems& p) {
  check_ranges(c, "optimizer", p);
  const OptimizerConfig& o = c.optimizer;
  const auto& b = o.params.betas;
  if (!(b[0] >= 0 && b[0] < 1 && b[1] >= 0 && b[1] < 1))
    p.add("optimizer.params.betas", fmt::format("each beta must be in [0, 1), got [{}, {}]", b[0], b[1]));
  // Adam's state is fp32: an eps below fp32's smallest normal number flushes to 0 (and a zero
  // second moment then divides by it); 1 or more swamps every update.
  const double eps = o.params.eps;
  if (eps > 0 && (eps < std::numeric_limits<float>::min() || eps >= 1))
    p.add("optimizer.params.eps", fmt::format("must be at least fp32's smallest normal number {:g} and below 1, got {:g}",
                                              static_cast<double>(std::numeric_limits<float>::min()), eps));
  if (o.type == OptimizerType::AdamW && !o.params.adam_w_mode)
    p.add("optimizer.params.adam_w_mode",
          "false asks for L2 regularisation, which AdamW never does; use type Adam with adam_w_mode false, "
          "or drop adam_w_mode");
}

void check_scheduler(const SchedulerConfig& s, Problems& p) {
  if (s.type == LrScheduleType::Constant) return;
  const SchedulerParams& q = s.params;
  const std::string type = to_string(s.type);
  if (s.type != LrScheduleType::WarmupCosineLR) {
    p.at_least("scheduler.params.warmup_min_lr", q.warmup_min_lr, 0.0);
    p.at_least("scheduler.params.warmup_max_lr", q.warmup_max_lr, 0.0);
  }
  p.at_least<int64_t>("scheduler.params.warmup_num_steps", q.warmup_num_steps, 0);
  if (s.type == LrScheduleType::WarmupLR) return;
  if (!q.total_num_steps) {
    p.add("scheduler.params.total_num_steps",
          fmt::format("required for {} (the step where the decay ends, usually train.iters)", type));
  } else {
    p.at_least<int64_t>("scheduler.params.total_num_steps", *q.total_num_steps, 1);
  }
  if (s.type == LrScheduleType::WarmupCosineLR) {
    p.fraction("scheduler.params.warmup_min_ratio", q.warmup_min_ratio);
    p.fraction("scheduler.params.cos_min_ratio", q.cos_min_ratio);
    // The cosine phase has length total - warmup (warmup clamped to ≥ 2): it must not be empty.
    const int64_t warmup = std::max<int64_t>(2, q.warmup_num_steps);
    if (q.total_num_steps && *q.total_num_steps >= 1 && *q.total_num_steps <= warmup)
      p.add("scheduler.params.total_num_steps",
            fmt::format("must exceed the warmup length {} for WarmupCosineLR, got {}", warmup, *q.total_num_steps));
  }
}

void check_precision(const Config& c, Problems& p) {
  check_ranges(c, "fp16", p);
  const Fp16Config& f = c.fp16;
  // Dynamic scaling starts at 2^initial_scale_power and halves on overflow down to the minimum:
  // a minimum above the start would make an overflow raise the scale.
  if (f.loss_scale == 0 && f.initial_scale_power >= 0 && f.initial_scale_power <= 64 &&
      f.min_loss_scale > std::ldexp(1.0, f.initial_scale_power))
    p.add("fp16.min_loss_scale", fmt::format("{:g} is above the initial scale 2^initial_scale_power = {:g}",
                                             f.min_loss_scale, std::ldexp(1.0, f.initial_scale_power)));
  if (c.fp16.enabled && c.bf16.enabled)
    p.add("bf16.enabled", "fp16 and bf16 are both enabled; enable at most one of them");
}

// Offloaded optimizer state is each rank's shard of it: ZeRO stage 0 has no shard (DeepSpeed
// offloads at stages 1-3 too).
void check_offload(const Config& c, Problems& p) {
  const ZeroConfig& z = c.zero_optimization;
  for (const auto& [section, offload] : {std::pair<const char*, const OffloadConfig*>{"offload_optimizer", &z.offload_optimizer},
                                         {"offload_param", &z.offload_param}}) {
    if (offload->device == OffloadDevice::Nvme && offload->nvme_path.empty())
      p.add(fmt::format("zero_optimization.{}.nvme_path", section),
            "is empty, but device nvme keeps the state in a file there: give the directory (a local NVMe's mount)");
  }
  // buffer_count sizes the host buffers between a file and the update, so it binds only with
  // nvme (DeepSpeed's schema takes any count ≥ 0 with either device, and so does strata with cpu).
  if (z.offload_optimizer.device == OffloadDevice::Nvme && z.offload_optimizer.buffer_count < 2)
    p.add("zero_optimization.offload_optimizer.buffer_count",
          fmt::format("must be at least 2 with device nvme (a piece of state read ahead while another is updated), "
                      "got {}",
                      z.offload_optimizer.buffer_count));
  if (z.offload_param.device == OffloadDevice::Nvme && z.offload_param.buffer_count < 3)
    p.add("zero_optimization.offload_param.buffer_count",
          fmt::format("must be at least 3 with device nvme (a layer group gathered, the next prefetched, one read "
                      "ahead), got {}",
                      z.offload_param.buffer_count));
  if (z.offload_optimizer.device != OffloadDevice::None && z.stage == 0)
    p.add("zero_optimization.offload_optimizer.device",
          fmt::format("{} needs ZeRO stage 1, 2 or 3 (the optimizer state offloaded is each rank's shard of it); set "
                      "zero_optimization.stage",
                      to_string(z.offload_optimizer.device)));
  const OffloadDevice param = z.offload_param.device;
  if (param == OffloadDevice::None) return;
  const std::string at = "zero_optimization.offload_param.device";
  if (z.stage != 3) {
    p.add(at, fmt::format("{} needs ZeRO stage 3 (the parameters offloaded are each rank's shard of them); set "
                          "zero_optimization.stage: 3",
                          to_string(param)));
  } else if (z.offload_optimizer.device == OffloadDevice::None) {
    p.add(at, fmt::format("{} needs offload_optimizer.device cpu or nvme: the host AdamW updates the offloaded "
                          "parameters from the fp32 master it keeps; set zero_optimization.offload_optimizer.device",
                          to_string(param)));
  }
}

std::string preset_names() {
  std::vector<std::string> names;
  for (const auto& preset : model_presets()) names.push_back(preset.name);
  return join(names);
}

void check_model(const Config& c, Problems& p) {
  const ModelConfig& given = c.model;
  if (!given.preset.empty() && find_preset(given.preset) == nullptr) {
    std::vector<std::string> names;
    for (const auto& preset : model_presets()) names.push_back(preset.name);
    std::string message = fmt::format("unknown preset '{}'", given.preset);
    const std::string guess = closest_match(given.preset, names);
    if (!guess.empty()) message += "; did you mean " + guess + "?";
    p.add("model.preset", message + " (presets: " + join(names) + ")");
  }
  const ModelConfig m = expand_preset(given);
  const std::pair<const char*, std::optional<int>> dims[] = {
      {"model.n_layer", m.n_layer}, {"model.n_head", m.n_head}, {"model.d_model", m.d_model}};
  const bool missing = given.preset.empty() && (!m.n_layer || !m.n_head || !m.d_model);
  const std::string folder_problem =
      missing && !given.init_from.empty() ? huggingface_folder_problem(given.init_from) : "";
  if (!folder_problem.empty()) {
    p.add("model.init_from", given.init_from + " " + folder_problem +
                                 "; it was to give the model's n_layer, n_head and d_model, which are not set");
  }
  for (const auto& dim : dims) {
    if (dim.second || !given.preset.empty() || !folder_problem.empty()) continue;
    if (given.init_from.empty()) {
      p.add(dim.first, "required without a preset (or set model.preset: one of " + preset_names() + ")");
    } else {
      p.add(dim.first, "not given, and model.init_from's " + given.init_from +
                           "/config.json does not give it (set it, or check model.init_from)");
    }
  }
  check_ranges(c, "model", p);  // the given values: a preset's own are valid
  if (m.n_head && m.d_model && *m.n_head >= 1 && *m.d_model >= 1 && *m.d_model % *m.n_head != 0)
    p.add("model.d_model", fmt::format("{} is not divisible by model.n_head = {}", *m.d_model, *m.n_head));
}

// Returns the data-parallel size, or 0 when the grid is not valid (already reported).
int check_parallelism(const Config& c, int world_size, Problems& p) {
  const ParallelismConfig& par = c.parallelism;
  const int tp = par.tensor_model_parallel_size;
  const int pp = par.pipeline_model_parallel_size;
  check_ranges(c, "parallelism", p);
  if (tp < 1 || pp < 1 || world_size < 1) return 0;
  const ModelConfig m = expand_preset(c.model);
  if (m.n_head && *m.n_head >= 1 && *m.n_head % tp != 0)
    p.add("parallelism.tensor_model_parallel_size",
          fmt::format("model.n_head = {} is not divisible by tensor_model_parallel_size {}", *m.n_head, tp) +
              heads_advice(*m.n_head, world_size));
  const int64_t model_parallel = int64_t{tp} * pp;
  if (world_size % model_parallel != 0) {
    p.add("parallelism", fmt::format("world size {} is not divisible by TP×PP = {} (tensor_model_parallel_size {} "
                                     "× pipeline_model_parallel_size {})",
                                     world_size, model_parallel, tp, pp) +
                             world_size_advice(world_size, model_parallel));
    return 0;
  }
  return static_cast<int>(world_size / model_parallel);
}

// Sequence parallelism splits a micro-batch's token rows (micro-batch × seq_len) over the TP
// ranks: TP must divide them.
void check_sequence_parallel(const Config& c, int dp_size, Problems& p) {
  const int tp = c.parallelism.tensor_model_parallel_size;
  if (!c.parallelism.sequence_parallel || tp <= 1 || dp_size < 1 || c.model.seq_len < 1) return;
  BatchSizes sizes;
  if (derive_batch_sizes(c, dp_size, sizes)) return;  // reported by check_batch
  const int64_t rows = int64_t{sizes.micro} * c.model.seq_len;
  if (rows % tp != 0)
    p.add("parallelism.sequence_parallel",
          fmt::format("splits a micro-batch's train_micro_batch_size_per_gpu × model.seq_len = {} × {} = {} token "
                      "rows over tensor_model_parallel_size {}, which does not divide them; choose a micro-batch or "
                      "seq_len whose product TP divides, or set sequence_parallel: false",
                      sizes.micro, c.model.seq_len, rows, tp));
}

// The config key of each pipeline setting a shape problem names.
const char* pipe_setting_key(PipeSetting setting) {
  switch (setting) {
    case PipeSetting::Stages: return "parallelism.pipeline_model_parallel_size";
    case PipeSetting::VirtualStages: return "parallelism.pipeline.virtual_stages";
    case PipeSetting::Schedule: return "parallelism.pipeline.schedule";
    case PipeSetting::MicroBatches: return "gradient_accumulation_steps";
  }
  return "parallelism.pipeline";
}

// The pipeline's shape, by the pipeline's own rules (pipe_shape_problems), and an explicit list
// that must partition the model into its chunks.
void check_pipeline(const Config& c, int dp_size, Problems& p) {
  const ParallelismConfig& par = c.parallelism;
  const PipelineConfig& pl = par.pipeline;
  const int pp = par.pipeline_model_parallel_size;
  const int v = pl.virtual_stages;
  if (pp < 1 || v < 1) return;  // reported by check_parallelism
  PipeShape shape{pl.schedule, pp, v, 0};
  BatchSizes sizes;
  // Micro-batches per step: unknown (0, not checked) when the batch keys are inconsistent,
  // which check_batch reports.
  if (dp_size >= 1 && !derive_batch_sizes(c, dp_size, sizes)) shape.micro_batches = sizes.accum;
  const ModelConfig m = expand_preset(c.model);
  const int n_layer = m.n_layer && *m.n_layer >= 1 ? *m.n_layer : 0;
  for (const PipeShapeProblem& problem : pipe_shape_problems(shape, n_layer)) {
    p.add(pipe_setting_key(problem.setting),
          problem.message + pipeline_advice(c, problem.setting, sizes, dp_size, n_layer));
  }
  if (pl.partition == PipelinePartition::Explicit && m.n_layer) {
    const int chunks = pp * (pl.schedule == PipeSchedule::Interleaved ? v : 1);
    const std::string problem = explicit_partition_problem(pl.partition_layers, *m.n_layer, chunks);
    if (!problem.empty()) p.add("parallelism.pipeline.partition", problem);
  }
}

void check_batch(const Config& c, int dp_size, Problems& p) {
  Problems ranges;
  for (const char* key : kBatchKeyNames)
    check_ranges(c, key, ranges);
  std::vector<ConfigError> found = ranges.take();
  for (const ConfigError& e : found) p.add(e.path, e.message);
  if (!found.empty() || dp_size < 1) return;
  BatchSizes sizes;
  const std::optional<ConfigError> error = derive_batch_sizes(c, dp_size, sizes);
  if (!error) return;
  std::string message = error->message;
  std::vector<std::string> autos;
  for (const char* key : kBatchKeyNames) {
    if (batch_key_is_auto(c, key)) autos.push_back(key);
  }
  if (!autos.empty())
    message += fmt::format(" ({} {} 'auto', which strata fills in from the other batch keys and the data-parallel "
                           "size only where they determine it)",
                           join(autos, " and "), autos.size() == 1 ? "is" : "are");
  p.add(error->path, message);
}

// A blend's weights: each positive, and no share so small that its block of the order
// (BlendOrder: 2 / the smallest share sequences) would outgrow memory.
void check_data_sources(const std::vector<DataSource>& sources, Problems& p) {
  constexpr double kSmallestShare = 1e-6;
  double total = 0;
  for (const DataSource& s : sources) total += std::isfinite(s.weight) && s.weight > 0 ? s.weight : 0;
  for (size_t i = 0; i < sources.size(); ++i) {
    const std::string at = fmt::format("data.train[{}]", i);  // a plain glob can fail neither check
    if (sources[i].path.empty()) p.add(at + ".path", "empty; give a glob of token shards, e.g. data/web/train_*.bin");
    const double w = sources[i].weight;
    if (!(std::isfinite(w) && w > 0)) {
      p.add(at + ".weight", fmt::format("must be a positive number, got {}", w));
    } else if (w / total < kSmallestShare) {
      p.add(at + ".weight", fmt::format("{} is a share of {:.3g} of the blend, below the smallest strata blends ({}); "
                                        "raise it or leave the source out", w, w / total, kSmallestShare));
    }
  }
}

// Samples start from byte-level text: a vocabulary smaller than the 256 bytes cannot hold the
// start token and a prompt; in a larger one a text prompt needs the tokenizer to mean anything.
void check_sampling(const Config& c, Problems& p) {
  constexpr int kBytes = 256;
  const LoggingConfig& l = c.logging;
  if (l.sample_interval <= 0) return;
  const int vocab = c.model.vocab_size;
  if (vocab < kBytes) {
    p.add("logging.sample_interval",
          fmt::format("samples start from byte-level text, which needs model.vocab_size 256 or more (this model has "
                      "{}); set logging.sample_interval: 0",
                      vocab));
  } else if (!l.sample_prompt.empty() && vocab > kBytes && c.data.tokenizer.empty()) {
    p.add("logging.sample_prompt",
          fmt::format("a text prompt in a vocabulary of {} needs data.tokenizer to encode it (a GPT-2 BPE "
                      "tokenizer.json, vocab.json + merges.txt, or tiktoken file); without one strata encodes text "
                      "byte by byte, which only model.vocab_size 256 reads. Or leave the prompt empty to sample token "
                      "ids from the end-of-text id",
                      vocab));
  }
}

void check_loop(const Config& c, Problems& p) {
  check_data_sources(c.data.train, p);
  for (const char* key : {"gradient_clipping", "steps_per_print", "flops_profiler", "activation_checkpointing", "train",
                          "checkpoint", "logging"})
    check_ranges(c, key, p);
  if (c.train.eval_interval > 0 && c.data.val.empty())
    p.add("train.eval_interval", "evaluation needs validation data: set data.val, or set eval_interval to 0");
  const CheckpointConfig& k = c.checkpoint;
  if (k.resume.empty()) p.add("checkpoint.resume", "must be auto, none or the path of a checkpoint");
  if (k.dir.empty() && (k.save_interval > 0 || k.save_initial))
    p.add("checkpoint.dir", fmt::format("{} needs a directory to save into; set checkpoint.dir",
                                        k.save_interval > 0 ? "checkpoint.save_interval" : "checkpoint.save_initial"));
  check_sampling(c, p);
}

// ---- Not supported yet -------------------------------------------------------------------
// Every check here guards a feature whose keys parse but whose implementation has not landed.
// Remove a check in the same change that makes its feature work (and its test with it).
void reject_not_supported_yet(const Config& c, Problems& p) {
  const ZeroConfig& z = c.zero_optimization;
  if (!z.contiguous_gradients)
    p.add("zero_optimization.contiguous_gradients",
          "false is not supported yet: strata always accumulates gradients in contiguous buffers");
  if (!z.reduce_scatter)
    p.add("zero_optimization.reduce_scatter",
          "false (all-reduce at stages 1-2) is not supported yet: strata reduce-scatters at stages 1-3");
  if (z.allgather_bucket_size && *z.allgather_bucket_size != z.reduce_bucket_size)
    p.add("zero_optimization.allgather_bucket_size",
          fmt::format("{} differs from reduce_bucket_size {}: strata gathers parameters in the reduction "
                      "buckets, so a separate all-gather bucket size is not supported yet; remove the key or "
                      "set it equal",
                      *z.allgather_bucket_size, z.reduce_bucket_size));
  const ActivationCheckpointingConfig& a = c.activation_checkpointing;
  if (a.partition_activations && c.parallelism.tensor_model_parallel_size > 1 && !c.parallelism.sequence_parallel)
    p.add("activation_checkpointing.partition_activations",
          "with tensor parallelism, strata partitions activations over the tensor-parallel ranks as sequence "
          "parallelism: set parallelism.sequence_parallel: true (or partition_activations: false)");
  if (a.cpu_checkpointing)
    p.add("activation_checkpointing.cpu_checkpointing",
          "true (checkpointed activations in host memory) is not supported yet; use false (model.recompute: full "
          "keeps the fewest activations)");
  if (c.comm.backend == CommBackend::Nccl && c.device == DeviceKind::Cpu)
    p.add("comm.backend", "nccl needs device: cuda or auto (NCCL moves GPU memory); use auto or mpi");
}

}  // namespace

std::vector<ConfigError> check_config(const Config& c, int world_size) {
  Problems p;
  p.at_least("--world-size", world_size, 1);
  // The grid comes first in the code (the batch rule needs DP) but the report follows the file.
  Problems grid;
  const int dp_size = check_parallelism(c, world_size, grid);
  check_batch(c, dp_size, p);
  check_sequence_parallel(c, dp_size, p);
  check_pipeline(c, dp_size, p);
  check_optimizer(c, p);
  check_scheduler(c.scheduler, p);
  check_precision(c, p);
  check_ranges(c, "zero_optimization", p);
  check_offload(c, p);
  check_model(c, p);
  for (auto& e : grid.take()) p.add(e.path, e.message);
  check_loop(c, p);
  reject_not_supported_yet(c, p);
  return p.take();
}

}  // namespace config_detail

std::vector<std::string> validate_config(const Config& cfg, int world_size) {
  std::vector<std::string> messages;
  for (const auto& e : config_detail::check_config(cfg, world_size)) messages.push_back(e.path + ": " + e.message);
  return messages;
}

}  // namespace strata
