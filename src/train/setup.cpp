// Translation from the typed config to the model, schedule and optimizer settings, and the
// checks of what this build can run.
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "train/train_internal.h"

namespace strata {

GptDims gpt_dims_from_config(const Config& cfg) {
  GptDims d;
  d.n_layer = cfg.model.n_layer.value();
  d.n_head = cfg.model.n_head.value();
  d.d_model = cfg.model.d_model.value();
  d.vocab_size = cfg.model.vocab_size;
  d.padded_vocab = cfg.derived.padded_vocab;
  d.seq_len = cfg.model.seq_len;
  return d;
}

LrScheduleSettings lr_schedule_from_config(const Config& cfg) {
  const SchedulerParams& p = cfg.scheduler.params;
  LrScheduleSettings s;
  s.type = cfg.scheduler.type;
  s.lr = cfg.optimizer.params.lr;
  s.warmup_min_lr = p.warmup_min_lr;
  s.warmup_max_lr = p.warmup_max_lr;
  s.warmup_num_steps = p.warmup_num_steps;
  s.warmup_log = p.warmup_type == WarmupType::Log;
  s.total_num_steps = p.total_num_steps.value_or(0);
  s.warmup_min_ratio = p.warmup_min_ratio;
  s.cos_min_ratio = p.cos_min_ratio;
  return s;
}

AdamWSettings adamw_from_config(const Config& cfg) {
  const AdamParams& p = cfg.optimizer.params;
  AdamWSettings s;
  s.beta1 = p.betas[0];
  s.beta2 = p.betas[1];
  s.eps = p.eps;
  s.weight_decay = p.weight_decay;
  s.decoupled = cfg.optimizer.type == OptimizerType::AdamW || p.adam_w_mode;
  return s;
}

namespace {

// Where offloaded state lives and how the host AdamW runs.
OffloadSettings offload_settings_from_config(const ZeroConfig& z, Device device, int ranks_on_node) {
  OffloadSettings o;
  const OffloadConfig& offload = z.offload_optimizer;
  // Host memory is where a CPU backend keeps its state anyway; a file is real on any backend (and
  // parameters in a file need the host AdamW, which writes them there).
  const bool params_nvme = z.offload_param.device == OffloadDevice::Nvme;
  o.optimizer = (offload.device == OffloadDevice::Cpu && (device != Device::CPU || params_nvme)) ||
                offload.device == OffloadDevice::Nvme;
  if (offload.device == OffloadDevice::Nvme) {
    o.nvme_path = offload.nvme_path;
    o.buffer_count = offload.buffer_count;
    o.max_piece = int64_t{1} << 20;  // 12 MiB records: large transfers, few in memory
  }
  o.pinned = offload.pin_memory;
  o.params = (z.offload_param.device == OffloadDevice::Cpu && device != Device::CPU) || params_nvme;
  o.params_pinned = z.offload_param.pin_memory;
  if (params_nvme) {
    o.params_nvme_path = z.offload_param.nvme_path;
    o.params_buffer_count = z.offload_param.buffer_count;
  }
  const int cores = host_threads_per_rank(0, ranks_on_node);
  o.threads = std::max(1, static_cast<int>(std::lround(offload.cpuadam_cores_perc * cores)));
  return o;
}

}  // namespace

EngineSettings engine_settings_from_config(const Config& cfg, Device device, int ranks_on_node) {
  const ZeroConfig& z = cfg.zero_optimization;
  EngineSettings s;
  s.sharding.zero_stage = z.stage;
  s.sharding.overlap_comm = z.overlap_comm.value_or(z.stage == 3);
  s.sharding.reduce_bucket_size = z.reduce_bucket_size;
  s.sharding.adamw = adamw_from_config(cfg);
  s.sharding.comm_dtype = cfg.communication_data_type;
  s.sharding.offload = offload_settings_from_config(z, device, ranks_on_node);
  const int64_t unbounded = std::numeric_limits<int64_t>::max();
  s.sharding.stage3.param_persistence_threshold = z.stage3_param_persistence_threshold;
  s.sharding.stage3.model_persistence_threshold = z.stage3_model_persistence_threshold.value_or(unbounded);
  s.sharding.stage3.prefetch_bucket_size = z.stage3_prefetch_bucket_size.value_or(unbounded);
  s.sharding.stage3.max_live_parameters = z.stage3_max_live_parameters.value_or(unbounded);
  s.gradient_clipping = cfg.gradient_clipping;
  s.sharding.precision = cfg.fp16.enabled ? DType::F16 : cfg.bf16.enabled ? DType::BF16 : DType::F32;
  const Fp16Config& f = cfg.fp16;
  s.loss_scaler.static_scale = f.loss_scale;
  s.loss_scaler.initial_scale_power = f.initial_scale_power;
  s.loss_scaler.scale_window = f.loss_scale_window;
  s.loss_scaler.hysteresis = f.hysteresis;
  s.loss_scaler.consecutive_hysteresis = f.consecutive_hysteresis;
  s.loss_scaler.min_scale = f.min_loss_scale;
  s.synchronize_phases = cfg.wall_clock_breakdown;
  s.sequence_parallel = cfg.parallelism.sequence_parallel && cfg.derived.tp_size > 1;
  const PipelineConfig& pl = cfg.parallelism.pipeline;
  const int stages = cfg.derived.pp_size;
  s.pipeline.schedule = pl.schedule;
  s.pipeline.virtual_stages = s.pipeline.schedule == PipeSchedule::Interleaved ? pl.virtual_stages : 1;
  s.pipeline.micro_batches = cfg.derived.grad_accum;
  // STRATA_PIPE_COST_MS="F,B": every chunk's forward lasts at least F ms and its backward B ms,
  // so that micro-batches have a known, equal cost on every stage (measuring the bubble).
  if (const char* delay = std::getenv("STRATA_PIPE_COST_MS"); delay && *delay && stages > 1) {
    char comma = 0, rest = 0;
    double forward_ms = -1, backward_ms = -1;
    if (std::sscanf(delay, "%lf %c %lf %c", &forward_ms, &comma, &backward_ms, &rest) != 3 || comma != ',' ||
        !(forward_ms >= 0 && forward_ms <= 60000) || !(backward_ms >= 0 && backward_ms <= 60000)) {
      throw UserError(fmt::format("STRATA_PIPE_COST_MS: '{}' is not 'F,B' (the least milliseconds of every "
                                  "pipeline forward and backward, 0 to 60000 each)",
                                  delay));
    }
    s.pipeline.forward_seconds = forward_ms / 1e3;
    s.pipeline.backward_seconds = backward_ms / 1e3;
  }
  if (stages > 1) {
    const GptDims dims = gpt_dims_from_config(cfg);
    const int chunks = stages * s.pipeline.virtual_stages;
    switch (pl.partition) {
      case PipelinePartition::Uniform: s.pipeline.partition = uniform_partition(dims.n_layer, chunks); break;
      case PipelinePartition::Explicit: s.pipeline.partition = explicit_partition(pl.partition_layers); break;
      case PipelinePartition::Parameters: {
        // What each chunk's rank holds: a block; the embeddings on the first; ln_f and the tied
        // copy of the embeddings on the last.
        const std::vector<ParamSpec> one = gpt_param_specs(dims, {}, {0, 1, false, false});
        int64_t block = 0;
        for (const ParamSpec& spec : one) block += spec.numel;
        const int64_t embeddings = (int64_t{dims.padded_vocab} + dims.seq_len) * dims.d_model;
        s.pipeline.partition =
            parameter_partition(dims.n_layer, chunks, block, embeddings, embeddings + 2 * int64_t{dims.d_model});
        break;
      }
    }
  }
  return s;
}

void check_runnable(const Config& cfg, int world_size, bool dump_grads) {
  if (cfg.derived.dp_size * cfg.derived.tp_size * cfg.derived.pp_size != world_size) {
    throw UserError(fmt::format("the job has {} ranks but the layout is DP {} x TP {} x PP {}", world_size,
                                cfg.derived.dp_size, cfg.derived.tp_size, cfg.derived.pp_size));
  }
  if (dump_grads && cfg.derived.tp_size > 1) {
    throw UserError(fmt::format("--dump-grads writes the whole gradient from one rank, which tensor parallelism "
                                "splits over {} ranks; run it with --set parallelism.tensor_model_parallel_size=1",
                                cfg.derived.tp_size));
  }
  if (dump_grads && cfg.derived.pp_size > 1) {
    throw UserError(fmt::format("--dump-grads writes the whole gradient from one rank, which pipeline parallelism "
                                "splits over {} stages; run it with --set parallelism.pipeline_model_parallel_size=1",
                                cfg.derived.pp_size));
  }
  if (dump_grads && cfg.zero_optimization.stage != 0) {
    throw UserError(fmt::format("--dump-grads writes the whole gradient, which only ZeRO stage 0 keeps on one rank; "
                                "run it with --set zero_optimization.stage=0 (this config has stage {})",
                                cfg.zero_optimization.stage));
  }
  if (cfg.data.train.empty()) throw UserError("data.train: required to train (a glob of token shards, e.g. data/kjv/train_*.bin)");
}

}  // namespace strata
