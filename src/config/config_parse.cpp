// The schema as code: walks a YAML tree section by section into the typed Config. The
// order of the reads is the order keys are listed in messages and in config_to_yaml.
// Only types are checked here; ranges and cross-key rules are validate's job.
#include <algorithm>

#include <fmt/format.h>

#include "config/config_internal.h"

namespace strata {
namespace config_detail {

const EnumNames<OptimizerType> kOptimizerTypes = {{"AdamW", OptimizerType::AdamW}, {"Adam", OptimizerType::Adam}};
const EnumNames<LrScheduleType> kSchedulerTypes = {{"WarmupLR", LrScheduleType::WarmupLR},
                                                  {"WarmupDecayLR", LrScheduleType::WarmupDecayLR},
                                                  {"WarmupCosineLR", LrScheduleType::WarmupCosineLR}};
const EnumNames<WarmupType> kWarmupTypes = {{"log", WarmupType::Log}, {"linear", WarmupType::Linear}};
const EnumNames<OffloadDevice> kOffloadDevices = {
    {"none", OffloadDevice::None}, {"cpu", OffloadDevice::Cpu}, {"nvme", OffloadDevice::Nvme}};
const EnumNames<ActivationRecompute> kRecomputeModes = {
    {"none", ActivationRecompute::None}, {"selective", ActivationRecompute::Selective}, {"full", ActivationRecompute::Full}};
const EnumNames<PipeSchedule> kPipelineSchedules = {
    {pipe_schedule_name(PipeSchedule::OneFOneB), PipeSchedule::OneFOneB},
    {pipe_schedule_name(PipeSchedule::GPipe), PipeSchedule::GPipe},
    {pipe_schedule_name(PipeSchedule::Interleaved), PipeSchedule::Interleaved}};
const EnumNames<PipelinePartition> kPipelinePartitions = {{"uniform", PipelinePartition::Uniform},
                                                          {"parameters", PipelinePartition::Parameters},
                                                          {"explicit", PipelinePartition::Explicit}};
const EnumNames<DeviceKind> kDeviceKinds = {
    {"auto", DeviceKind::Auto}, {"cpu", DeviceKind::Cpu}, {"cuda", DeviceKind::Cuda}};
const EnumNames<CommBackend> kCommBackends = {
    {"auto", CommBackend::Auto}, {"nccl", CommBackend::Nccl}, {"mpi", CommBackend::Mpi}};

std::vector<std::string> scheduler_param_names(LrScheduleType type) {
  switch (type) {
    case LrScheduleType::WarmupLR:
      return {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type"};
    case LrScheduleType::WarmupDecayLR:
      return {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type", "total_num_steps"};
    case LrScheduleType::WarmupCosineLR:
      return {"total_num_steps", "warmup_min_ratio", "warmup_num_steps", "cos_min_ratio", "warmup_type"};
    case LrScheduleType::Constant:
      break;
  }
  return {};
}

namespace {

template <typename E>
const char* name_in(const EnumNames<E>& names, E value) {
  for (const auto& n : names) {
    if (n.second == value) return n.first.c_str();
  }
  return "?";
}

// ds_config sections strata does not implement get a clearer message than "unknown key".
const std::map<std::string, std::string>& deepspeed_only_keys() {
  static const std::map<std::string, std::string> hints = [] {
    std::map<std::string, std::string> h;
    for (const char* key :
         {"amp", "aio", "autotuning", "comms_logger", "communication_data_type", "compression_training",
          "csv_monitor", "data_efficiency", "data_types", "dump_state", "elasticity", "flops_profiler",
          "gradient_predivide_factor", "memory_breakdown", "prescale_gradients", "sparse_attention",
          "sparse_gradients", "tensorboard", "wandb", "zero_allow_untested_optimizer",
          "zero_force_ds_cpu_optimizer"}) {
      h[key] = "a DeepSpeed setting strata does not implement; remove it";
    }
    return h;
  }();
  return hints;
}

void parse_optimizer(MapReader in, OptimizerConfig& out) {
  in.read_enum("type", out.type, kOptimizerTypes, /*ignore_case=*/true);
  MapReader params = in.section("params");
  params.read("lr", out.params.lr);
  params.read("betas", out.params.betas);
  params.read("eps", out.params.eps);
  params.read("weight_decay", out.params.weight_decay);
  params.read("adam_w_mode", out.params.adam_w_mode);
  params.finish();
  in.finish();
}



void read_scheduler_param(MapReader& in, const std::string& name, SchedulerParams& out) {
  if (name == "warmup_min_lr") in.read(name, out.warmup_min_lr);
  if (name == "warmup_max_lr") in.read(name, out.warmup_max_lr);
  if (name == "warmup_num_steps") in.read(name, out.warmup_num_steps);
  if (name == "warmup_type") in.read_enum(name, out.warmup_type, kWarmupTypes);
  if (name == "total_num_steps") in.read(name, out.total_num_steps);
  if (name == "warmup_min_ratio") in.read(name, out.warmup_min_ratio);
  if (name == "cos_min_ratio") in.read(name, out.cos_min_ratio);
}

void parse_scheduler(MapReader in, SchedulerConfig& out) {
  if (!in.present()) return;
  std::vector<std::string> type_names;
  for (const auto& t : kSchedulerTypes) type_names.push_back(t.first);
  if (!in.has("type")) {
    in.error("type", "required when a scheduler section is given; one of " + join(type_names) +
                         " (leave out the scheduler section for a constant learning rate)");
  }
  LrScheduleType type = LrScheduleType::Constant;
  const bool type_ok = in.read_enum("type", type, kSchedulerTypes);
  MapReader params = in.section("params");
  if (type_ok && type != LrScheduleType::Constant) {
    out.type = type;
    const std::vector<std::string> names = scheduler_param_names(type);
    for (const auto& name : names) read_scheduler_param(params, name, out.params);
    // A parameter of another scheduler type is a likelier mistake than a typo; say so.
    std::map<std::string, std::string> hints;
    for (const auto& t : kSchedulerTypes) {
      for (const auto& other : scheduler_param_names(t.second)) {
        if (std::find(names.begin(), names.end(), other) == names.end())
          hints[other] = fmt::format("not a parameter of {} (its parameters: {})", to_string(type), join(names));
      }
    }
    params.finish(hints);
  }
  in.finish();
}

void parse_fp16(MapReader in, Fp16Config& out) {
  in.read("enabled", out.enabled);
  in.read("loss_scale", out.loss_scale);
  in.read("initial_scale_power", out.initial_scale_power);
  in.read("loss_scale_window", out.loss_scale_window);
  in.read("hysteresis", out.hysteresis);
  in.read("consecutive_hysteresis", out.consecutive_hysteresis);
  in.read("min_loss_scale", out.min_loss_scale);
  in.finish();
}

void parse_offload(MapReader in, OffloadConfig& out) {
  in.read_enum("device", out.device, kOffloadDevices);
  in.read("pin_memory", out.pin_memory);
  in.finish();
}

void parse_zero(MapReader in, ZeroConfig& out) {
  in.read("stage", out.stage);
  in.read("overlap_comm", out.overlap_comm);
  in.read("contiguous_gradients", out.contiguous_gradients);
  in.read("reduce_scatter", out.reduce_scatter);
  in.read_count("reduce_bucket_size", out.reduce_bucket_size);
  in.read_count("allgather_bucket_size", out.allgather_bucket_size);
  in.read_count("stage3_prefetch_bucket_size", out.stage3_prefetch_bucket_size);
  in.read_count("stage3_param_persistence_threshold", out.stage3_param_persistence_threshold);
  parse_offload(in.section("offload_optimizer"), out.offload_optimizer);
  parse_offload(in.section("offload_param"), out.offload_param);
  in.finish();
}

void parse_activation_checkpointing(MapReader in, ActivationCheckpointingConfig& out) {
  in.read("partition_activations", out.partition_activations);
  in.read("cpu_checkpointing", out.cpu_checkpointing);
  in.read("contiguous_memory_optimization", out.contiguous_memory_optimization);
  in.read("synchronize_checkpoint_boundary", out.synchronize_checkpoint_boundary);
  in.read("profile", out.profile);
  in.read("number_checkpoints", out.number_checkpoints);
  in.finish();
}

void parse_model(MapReader in, ModelConfig& out) {
  in.read("preset", out.preset);
  in.read("n_layer", out.n_layer);
  in.read("n_head", out.n_head);
  in.read("d_model", out.d_model);
  in.read("vocab_size", out.vocab_size);
  in.read("seq_len", out.seq_len);
  in.read_enum("recompute", out.recompute, kRecomputeModes);
  in.finish();
}

void parse_parallelism(MapReader in, ParallelismConfig& out) {
  in.read("tensor_model_parallel_size", out.tensor_model_parallel_size);
  in.read("pipeline_model_parallel_size", out.pipeline_model_parallel_size);
  in.read("sequence_parallel", out.sequence_parallel);
  MapReader pipeline = in.section("pipeline");
  pipeline.read_enum("schedule", out.pipeline.schedule, kPipelineSchedules);
  pipeline.read("virtual_stages", out.pipeline.virtual_stages);
  if (pipeline.is_sequence("partition")) {
    pipeline.read("partition", out.pipeline.partition_layers);
    out.pipeline.partition = PipelinePartition::Explicit;
  } else {
    // An explicit partition is the list itself; "explicit" names the kind only when printed.
    const EnumNames<PipelinePartition> by_name = {kPipelinePartitions[0], kPipelinePartitions[1]};
    std::string name;
    pipeline.read("partition", name);
    if (name == "explicit") {
      pipeline.error("partition", "give the layers of each model chunk as a list, e.g. [3, 5]; the names are "
                                  "uniform and parameters");
    } else {
      pipeline.read_enum("partition", out.pipeline.partition, by_name);
    }
  }
  pipeline.finish();
  in.finish();
}

void parse_data(MapReader in, DataConfig& out) {
  in.read("train", out.train);
  in.read("val", out.val);
  in.read("shuffle", out.shuffle);
  in.finish();
}

void parse_train(MapReader in, TrainConfig& out) {
  in.read("iters", out.iters);
  in.read("eval_interval", out.eval_interval);
  in.read("eval_iters", out.eval_iters);
  in.read("seed", out.seed);
  in.read("max_nonfinite_steps", out.max_nonfinite_steps);
  in.finish();
}

void parse_checkpoint(MapReader in, CheckpointConfig& out) {
  in.read("dir", out.dir);
  in.read("save_interval", out.save_interval);
  in.read("save_initial", out.save_initial);
  in.read("keep_last", out.keep_last);
  in.read("resume", out.resume);
  in.read("overwrite", out.overwrite);
  in.finish();
}

void parse_logging(MapReader in, LoggingConfig& out) {
  in.read("metrics_file", out.metrics_file);
  in.read("sample_interval", out.sample_interval);
  in.read("sample_tokens", out.sample_tokens);
  in.read("sample_prompt", out.sample_prompt);
  in.finish();
}

}  // namespace

void parse_config_tree(const YAML::Node& root, Config& cfg, ErrorLog& log) {
  MapReader top(root, "", log);
  top.read("train_batch_size", cfg.train_batch_size);
  top.read("train_micro_batch_size_per_gpu", cfg.train_micro_batch_size_per_gpu);
  top.read("gradient_accumulation_steps", cfg.gradient_accumulation_steps);
  parse_optimizer(top.section("optimizer"), cfg.optimizer);
  parse_scheduler(top.section("scheduler"), cfg.scheduler);
  parse_fp16(top.section("fp16"), cfg.fp16);
  {
    MapReader bf16 = top.section("bf16");
    bf16.read("enabled", cfg.bf16.enabled);
    bf16.finish();
  }
  parse_zero(top.section("zero_optimization"), cfg.zero_optimization);
  top.read("gradient_clipping", cfg.gradient_clipping);
  top.read("steps_per_print", cfg.steps_per_print);
  top.read("wall_clock_breakdown", cfg.wall_clock_breakdown);
  parse_activation_checkpointing(top.section("activation_checkpointing"), cfg.activation_checkpointing);
  parse_model(top.section("model"), cfg.model);
  parse_parallelism(top.section("parallelism"), cfg.parallelism);
  parse_data(top.section("data"), cfg.data);
  parse_train(top.section("train"), cfg.train);
  parse_checkpoint(top.section("checkpoint"), cfg.checkpoint);
  parse_logging(top.section("logging"), cfg.logging);
  top.read_enum("device", cfg.device, kDeviceKinds);
  {
    MapReader comm = top.section("comm");
    comm.read_enum("backend", cfg.comm.backend, kCommBackends);
    comm.finish();
  }
  top.finish(deepspeed_only_keys());
}

}  // namespace config_detail

const char* to_string(OptimizerType v) { return config_detail::name_in(config_detail::kOptimizerTypes, v); }
const char* to_string(LrScheduleType v) {
  return v == LrScheduleType::Constant ? "Constant" : config_detail::name_in(config_detail::kSchedulerTypes, v);
}
const char* to_string(WarmupType v) { return config_detail::name_in(config_detail::kWarmupTypes, v); }
const char* to_string(OffloadDevice v) { return config_detail::name_in(config_detail::kOffloadDevices, v); }
const char* to_string(ActivationRecompute v) { return config_detail::name_in(config_detail::kRecomputeModes, v); }
const char* to_string(PipeSchedule v) { return config_detail::name_in(config_detail::kPipelineSchedules, v); }
const char* to_string(PipelinePartition v) {
  return config_detail::name_in(config_detail::kPipelinePartitions, v);
}
const char* to_string(DeviceKind v) { return config_detail::name_in(config_detail::kDeviceKinds, v); }
const char* to_string(CommBackend v) { return config_detail::name_in(config_detail::kCommBackends, v); }

}  // namespace strata
