// "auto" values, as DeepSpeed's HuggingFace integration writes them: filled in where the value
// follows from other keys (a batch key from the other two and the data-parallel size, the
// schedule's end from train.iters, its peak from the optimizer's lr, bucket sizes from the model
// width), refused with what would determine it where it follows only from a trainer's own
// arguments. After resolution, the notes whose wording depends on the resolved layout (the
// values auto took, and keys that change nothing at this layout) are completed here too.
#include <cmath>

#include <fmt/format.h>

#include "config/config_internal.h"

namespace strata {
namespace config_detail {
namespace {

bool is_batch_key(const std::string& path) {
  for (const char* key : kBatchKeyNames) {
    if (path == key) return true;
  }
  return false;
}

// Keys whose 'auto' a HuggingFace Trainer fills in from its own arguments, which strata has no
// counterpart of.
struct TrainerArgument {
  const char* path;
  const char* argument;
};
const TrainerArgument kTrainerArguments[] = {
    {"optimizer.params.betas", "adam_beta1 and adam_beta2"},
    {"optimizer.params.eps", "adam_epsilon"},
    {"optimizer.params.weight_decay", "weight_decay"},
    {"gradient_clipping", "max_grad_norm"},
    {"fp16.enabled", "fp16 (or fp16_full_eval)"},
    {"bf16.enabled", "bf16"},
    {"bfloat16.enabled", "bf16"},
    {"scheduler.params.warmup_num_steps", "warmup_steps (or warmup_ratio)"},
};

std::string fill_model_bucket(Config& cfg, const std::string& path, const std::optional<int>& d_model) {
  if (!d_model) return "";
  const int64_t c = *d_model;
  ZeroConfig& z = cfg.zero_optimization;
  if (path == "zero_optimization.reduce_bucket_size") {
    z.reduce_bucket_size = c * c;
    return fmt::format("{} (model.d_model² = {}²)", z.reduce_bucket_size, c);
  }
  if (path == "zero_optimization.stage3_prefetch_bucket_size") {
    z.stage3_prefetch_bucket_size = static_cast<int64_t>(std::llround(0.9 * static_cast<double>(c * c)));
    return fmt::format("{} (0.9 × model.d_model² = 0.9 × {}²)", *z.stage3_prefetch_bucket_size, c);
  }
  z.stage3_param_persistence_threshold = 10 * c;
  return fmt::format("{} (10 × model.d_model = 10 × {})", z.stage3_param_persistence_threshold, c);
}

bool scheduler_has_peak(const SchedulerConfig& s) {
  return s.type == LrScheduleType::WarmupLR || s.type == LrScheduleType::WarmupDecayLR;
}

void set_detail(Config& cfg, const std::string& path, const std::string& detail) {
  for (DeepSpeedKeyNote& note : cfg.deepspeed_keys) {
    if (note.path == path) note.detail = detail;
  }
}

}  // namespace

std::optional<std::string> auto_refusal(const std::string& path, const char* expected) {
  if (is_batch_key(path)) return std::nullopt;
  for (const char* fillable :
       {"scheduler.params.total_num_steps", "scheduler.params.warmup_max_lr", "scheduler.params.warmup_min_lr",
        "optimizer.params.lr", "zero_optimization.reduce_bucket_size", "zero_optimization.stage3_prefetch_bucket_size",
        "zero_optimization.stage3_param_persistence_threshold"}) {
    if (path == fillable) return std::nullopt;
  }
  for (const TrainerArgument& t : kTrainerArguments) {
    if (path == t.path)
      return fmt::format("'auto' is filled in by the HuggingFace Trainer from its argument {}, and no strata key "
                         "determines it; strata needs {}",
                         t.argument, expected);
  }
  return fmt::format("'auto' is not a value strata can fill in for this key; strata needs {}", expected);
}

void resolve_auto(Config& cfg, const std::vector<std::string>& autos, const YAML::Node& root, ErrorLog& log) {
  const std::optional<int> d_model = expand_preset(cfg.model).d_model;
  // The scheduler's peak as the file gives it (a section of the wrong shape: the parser said so).
  const auto child = [](const YAML::Node& node, const char* key) {
    return node.IsDefined() && node.IsMap() ? node[key] : YAML::Node();  // a missing key: undefined
  };
  const YAML::Node peak = child(child(child(root, "scheduler"), "params"), "warmup_max_lr");
  for (const std::string& path : autos) {
    std::string detail;
    SchedulerParams& q = cfg.scheduler.params;
    if (is_batch_key(path)) {
      detail = "from the other batch keys and the data-parallel size";  // the value: describe_batch_autos
    } else if (path == "scheduler.params.total_num_steps") {
      q.total_num_steps = cfg.train.iters;
      detail = fmt::format("{} (train.iters)", cfg.train.iters);
    } else if (path == "scheduler.params.warmup_min_lr") {
      q.warmup_min_lr = 0;
      detail = "0 (as the HuggingFace integration sets it)";
    } else if (path == "scheduler.params.warmup_max_lr") {
      q.warmup_max_lr = cfg.optimizer.params.lr;
      detail = fmt::format("{} (optimizer.params.lr)", cfg.optimizer.params.lr);
    } else if (path == "optimizer.params.lr") {
      const bool given = peak && peak.IsScalar() && peak.Scalar() != "auto";
      if (!given || !scheduler_has_peak(cfg.scheduler)) {
        log.add(path, "'auto' follows from scheduler.params.warmup_max_lr (with scheduler.type WarmupLR or "
                      "WarmupDecayLR), which this config does not give; strata needs a number");
        continue;
      }
      cfg.optimizer.params.lr = q.warmup_max_lr;
      detail = fmt::format("{} (scheduler.params.warmup_max_lr)", q.warmup_max_lr);
    } else {
      detail = fill_model_bucket(cfg, path, d_model);
      if (detail.empty()) {
        log.add(path, "'auto' follows from model.d_model, which this config does not give; strata needs a number");
        continue;
      }
    }
    set_detail(cfg, path, detail);
  }
}

void describe_resolved_keys(Config& cfg) {
  const Derived& d = cfg.derived;
  for (DeepSpeedKeyNote& note : cfg.deepspeed_keys) {
    if (note.path == "activation_checkpointing.partition_activations" && cfg.activation_checkpointing.partition_activations) {
      note.treatment = "accepted";
      note.detail = d.tp_size == 1 ? "at tensor_model_parallel_size 1 there is nothing to partition"
                                   : fmt::format("parallelism.sequence_parallel partitions the activations over the {} "
                                                 "tensor-parallel ranks",
                                                 d.tp_size);
      continue;
    }
    // A stage-3 key at strata's default changes nothing at any stage (resolved configs and
    // `strata plan --write` write it out), so only one set otherwise is noted.
    const bool at_default = note.path == "zero_optimization.stage3_param_persistence_threshold" &&
                            cfg.zero_optimization.stage3_param_persistence_threshold ==
                                ZeroConfig{}.stage3_param_persistence_threshold;
    if (note.path.rfind("zero_optimization.stage3_", 0) == 0 && cfg.zero_optimization.stage != 3 &&
        note.treatment == "implemented" && !at_default) {
      note.treatment = "accepted";
      note.detail = fmt::format("a ZeRO stage 3 setting; it changes nothing at stage {}", cfg.zero_optimization.stage);
      continue;
    }
    if (note.treatment != "auto" || !is_batch_key(note.path)) continue;
    if (note.path == "train_batch_size") {
      note.detail = fmt::format("{} (train_micro_batch_size_per_gpu {} × gradient_accumulation_steps {} × "
                                "data-parallel size {})",
                                d.global_batch, d.micro_batch, d.grad_accum, d.dp_size);
    } else if (note.path == "train_micro_batch_size_per_gpu") {
      note.detail = fmt::format("{} (train_batch_size {} / (gradient_accumulation_steps {} × data-parallel size {}))",
                                d.micro_batch, d.global_batch, d.grad_accum, d.dp_size);
    } else {
      note.detail = fmt::format("{} (train_batch_size {} / (train_micro_batch_size_per_gpu {} × data-parallel size {}))",
                                d.grad_accum, d.global_batch, d.micro_batch, d.dp_size);
    }
  }
}

bool batch_key_is_auto(const Config& cfg, const std::string& path) {
  for (const DeepSpeedKeyNote& note : cfg.deepspeed_keys) {
    if (note.path == path && note.treatment == "auto") return true;
  }
  return false;
}

}  // namespace config_detail
}  // namespace strata
