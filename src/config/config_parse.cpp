// Reads a YAML tree into the typed Config by walking the field table (config_fields.h), whose
// order is the order keys are listed in messages and in config_to_yaml. Only types are checked
// here; ranges and cross-key rules are validate's job.
#include <algorithm>

#include <fmt/format.h>

#include "config/config_fields.h"

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
const EnumNames<AttentionProbabilities> kAttentionProbabilities = {{"rounded", AttentionProbabilities::Rounded},
                                                                  {"split", AttentionProbabilities::Split}};
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
const EnumNames<DType> kCommDataTypes = {{"fp32", DType::F32}, {"fp16", DType::F16}, {"bf16", DType::BF16}};

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

// parallelism.pipeline.partition: a list of layers per model chunk, or the name of a rule.
void read_partition(MapReader& pipeline, PipelineConfig& out) {
  if (pipeline.is_sequence("partition")) {
    pipeline.read("partition", out.partition_layers);
    out.partition = PipelinePartition::Explicit;
    return;
  }
  // An explicit partition is the list itself; "explicit" names the kind only when printed.
  const EnumNames<PipelinePartition> by_name = {kPipelinePartitions[0], kPipelinePartitions[1]};
  std::string name;
  pipeline.read("partition", name);
  if (name == "explicit") {
    pipeline.error("partition", "give the layers of each model chunk as a list, e.g. [3, 5]; the names are "
                                "uniform and parameters");
  } else {
    pipeline.read_enum("partition", out.partition, by_name);
  }
}


// The field table's reader: each field read from this map, each section from a nested one.
class FieldReader {
 public:
  explicit FieldReader(MapReader in) : in_(std::move(in)) {}
  template <typename T>
  void value(const char* name, T& out, Bound = {}) {
    in_.read(name, out);
  }
  template <typename T>
  void count(const char* name, T& out, Bound = {}) {
    in_.read_count(name, out);
  }
  template <typename E>
  void choice(const char* name, E& out, const EnumNames<E>& names) {
    in_.read_enum(name, out, names);
  }
  template <typename E>
  void choice_any_case(const char* name, E& out, const EnumNames<E>& names) {
    in_.read_enum(name, out, names, /*ignore_case=*/true);
  }
  template <typename Fn>
  void section(const char* name, Fn&& fields, const char* alias = nullptr) {
    const char* key = name;
    if (alias != nullptr && in_.has(alias)) {
      in_.section(alias);  // known either way
      if (in_.has(name)) {
        in_.error(alias, fmt::format("DeepSpeed's other name for {}, which is given too; keep one of them", name));
      } else {
        key = alias;
      }
    }
    FieldReader sub(in_.section(key));
    fields(sub);
    sub.in_.finish();
  }
  void scheduler(SchedulerConfig& out) { parse_scheduler(in_.section("scheduler"), out); }
  void pipeline_partition(PipelineConfig& out) { read_partition(in_, out); }
  void data_sources(const char* name, std::vector<DataSource>& out) { in_.read(name, out); }
  // Reports the keys no field asked for.
  void finish() { in_.finish(); }

 private:
  MapReader in_;
};

}  // namespace

void parse_config_tree(const YAML::Node& root, Config& cfg, ErrorLog& log) {
  FieldReader top(MapReader(root, "", log));
  config_fields(top, cfg);
  top.finish();
}

}  // namespace config_detail

const char* to_string(OptimizerType v) { return config_detail::name_in(config_detail::kOptimizerTypes, v); }
const char* to_string(LrScheduleType v) {
  return v == LrScheduleType::Constant ? "Constant" : config_detail::name_in(config_detail::kSchedulerTypes, v);
}
const char* to_string(WarmupType v) { return config_detail::name_in(config_detail::kWarmupTypes, v); }
const char* to_string(OffloadDevice v) { return config_detail::name_in(config_detail::kOffloadDevices, v); }
const char* to_string(ActivationRecompute v) { return config_detail::name_in(config_detail::kRecomputeModes, v); }
const char* to_string(AttentionProbabilities v) {
  return config_detail::name_in(config_detail::kAttentionProbabilities, v);
}
const char* to_string(PipeSchedule v) { return config_detail::name_in(config_detail::kPipelineSchedules, v); }
const char* to_string(PipelinePartition v) {
  return config_detail::name_in(config_detail::kPipelinePartitions, v);
}
const char* to_string(DeviceKind v) { return config_detail::name_in(config_detail::kDeviceKinds, v); }
const char* to_string(CommBackend v) { return config_detail::name_in(config_detail::kCommBackends, v); }

}  // namespace strata
