// Settings that load and run but, by the formulas strata shares with DeepSpeed, most likely do
// not do what their author meant: said at start-up (strata train, strata config), never refused,
// since a run reproducing a DeepSpeed run must be able to ask for exactly the same thing.
#include <fmt/core.h>

#include <algorithm>

#include "config/config.h"

namespace strata {

namespace {

// The decaying schedules end at total_num_steps updates (a skipped step does not advance them).
// DeepSpeed's formulas go on past it: the cosine turns back up, the linear decay holds its floor.
void schedule_warnings(const Config& cfg, std::vector<std::string>& out) {
  const SchedulerConfig& s = cfg.scheduler;
  const SchedulerParams& q = s.params;
  if (s.type == LrScheduleType::Constant) return;
  const int64_t iters = cfg.train.iters, warmup = std::max<int64_t>(2, q.warmup_num_steps);
  // Step k uses the schedule's iteration k − 2 (step 1 runs at the value DeepSpeed sets before its
  // first step() call). The log warmup reaches the peak at iteration W − 1; the linear one ends at
  // (W − 1)/W of the way and reaches it at iteration W.
  const int64_t peak_step = q.warmup_type == WarmupType::Log ? warmup + 1 : warmup + 2;
  if (iters < peak_step) {
    out.push_back(fmt::format("scheduler.params.warmup_num_steps {}: the {} warmup reaches the peak learning rate "
                              "({}) at step {} (step k takes the schedule's value at iteration k - 2, as DeepSpeed "
                              "does), after train.iters {}: the run ends in the warmup, below the peak",
                              q.warmup_num_steps, q.warmup_type == WarmupType::Log ? "log" : "linear",
                              s.type == LrScheduleType::WarmupCosineLR ? "optimizer.params.lr" : "warmup_max_lr",
                              peak_step, iters));
  }
  if (!q.total_num_steps) return;
  const int64_t total = *q.total_num_steps;
  if (s.type == LrScheduleType::WarmupCosineLR && iters > total) {
    out.push_back(fmt::format(
        "scheduler.params.total_num_steps {} is below train.iters {}: WarmupCosineLR reaches its lowest learning "
        "rate after {} updates and then climbs back toward optimizer.params.lr (DeepSpeed's cosine, which is "
        "periodic); set total_num_steps to train.iters or 'auto'",
        total, iters, total));
  }
  if (s.type != LrScheduleType::WarmupDecayLR) return;
  if (total <= warmup) {
    out.push_back(fmt::format(
        "scheduler.params.total_num_steps {} is not above the warmup length {}: WarmupDecayLR drops from warmup_max_lr "
        "to warmup_min_lr {:g} when the warmup ends, with no decay between",
        total, warmup, q.warmup_min_lr));
  }
  if (iters > total) {
    out.push_back(fmt::format(
        "scheduler.params.total_num_steps {} is below train.iters {}: WarmupDecayLR holds warmup_min_lr {:g} after "
        "{} updates{}; set total_num_steps to train.iters or 'auto'",
        total, iters, q.warmup_min_lr, total,
        q.warmup_min_lr == 0.0 ? " (a learning rate of 0: the steps after it change nothing)" : ""));
  }
}

// Layouts that run but idle most of their pipeline, or ask for a setting the layout leaves with
// nothing to do.
void layout_warnings(const Config& cfg, std::vector<std::string>& out) {
  const Derived& d = cfg.derived;
  if (d.pp_size < 1 || d.dp_size < 1) return;  // not resolved for a world size
  const int p = d.pp_size, m = d.grad_accum;
  if (p > 1 && m < p) {
    // 1F1B and GPipe keep each stage idle (p−1)/(m+p−1) of the step.
    out.push_back(fmt::format(
        "parallelism: {} micro-batch{} per step through {} pipeline stages keeps each stage idle {:.0f}% of the step "
        "(the bubble (p−1)/(m+p−1)); more micro-batches (gradient_accumulation_steps, at least {}) shrink it",
        m, m == 1 ? "" : "es", p, 100.0 * (p - 1) / (m + p - 1), p));
  }
  if (p == 1 && cfg.parallelism.pipeline.schedule == PipeSchedule::GPipe)
    out.push_back("parallelism.pipeline.schedule gpipe changes nothing at pipeline_model_parallel_size 1");
  if (p == 1 && cfg.parallelism.pipeline.partition != PipelinePartition::Uniform)
    out.push_back("parallelism.pipeline.partition changes nothing at pipeline_model_parallel_size 1 (one stage holds "
                  "every layer)");
  const ZeroConfig& z = cfg.zero_optimization;
  if (d.dp_size == 1 && z.stage >= 1 && z.offload_optimizer.device == OffloadDevice::None)
    out.push_back(fmt::format("zero_optimization.stage {} partitions over a data-parallel size of 1: it saves no "
                              "memory and adds its collectives over one rank (stage 0 trains the same model without them)",
                              z.stage));
}

// Settings of a report or a save that the config never makes: their switch is off.
void idle_setting_warnings(const Config& cfg, std::vector<std::string>& out) {
  const auto idle = [&](const std::string& setting, const char* needs) {
    out.push_back(fmt::format("{} changes nothing while {}", setting, needs));
  };
  if (cfg.checkpoint.dir.empty()) {
    if (cfg.checkpoint.keep_last != CheckpointConfig{}.keep_last)
      idle(fmt::format("checkpoint.keep_last {}", cfg.checkpoint.keep_last), "checkpoint.dir is empty (no saves)");
    if (cfg.checkpoint.overwrite) idle("checkpoint.overwrite true", "checkpoint.dir is empty (no saves)");
  }
  if (cfg.logging.sample_interval == 0) {
    const char* needs = "logging.sample_interval is 0 (no samples)";
    if (!cfg.logging.sample_prompt.empty()) idle("logging.sample_prompt", needs);
    if (cfg.logging.sample_tokens != LoggingConfig{}.sample_tokens)
      idle(fmt::format("logging.sample_tokens {}", cfg.logging.sample_tokens), needs);
  }
  if (cfg.train.eval_interval == 0 && cfg.train.eval_iters != TrainConfig{}.eval_iters)
    idle(fmt::format("train.eval_iters {}", cfg.train.eval_iters), "train.eval_interval is 0 (no evaluation)");
}

}  // namespace

std::vector<std::string> config_warnings(const Config& cfg) {
  std::vector<std::string> out;
  schedule_warnings(cfg, out);
  layout_warnings(cfg, out);
  idle_setting_warnings(cfg, out);
  return out;
}

}  // namespace strata
