// Layouts: the axes a run can be laid out along, read from a resolved config and written back
// into one (re-resolved by the config's own rules, so a layout the planner offers is one that
// `strata train` accepts as is).
#include <fmt/format.h>

#include <sstream>

#include "core/core.h"
#include "plan/plan.h"

namespace strata {

Layout layout_of(const Config& cfg) {
  Layout l;
  l.dp = cfg.derived.dp_size;
  l.tp = cfg.derived.tp_size;
  l.pp = cfg.derived.pp_size;
  l.sp = cfg.parallelism.sequence_parallel && l.tp > 1;
  l.schedule = l.pp > 1 ? cfg.parallelism.pipeline.schedule : PipeSchedule::OneFOneB;
  l.virtual_stages = l.schedule == PipeSchedule::Interleaved ? cfg.parallelism.pipeline.virtual_stages : 1;
  l.micro_batch = cfg.derived.micro_batch;
  l.grad_accum = cfg.derived.grad_accum;
  l.zero_stage = cfg.zero_optimization.stage;
  l.recompute = cfg.model.recompute;
  l.offload_optimizer = cfg.zero_optimization.offload_optimizer.device;
  l.offload_param = cfg.zero_optimization.offload_param.device;
  return l;
}

Config config_for_layout(const Config& cfg, const Layout& layout, std::optional<bool> overlap_comm) {
  Config out = cfg;
  ParallelismConfig& par = out.parallelism;
  const bool same_pipeline = par.pipeline_model_parallel_size == layout.pp &&
                             par.pipeline.virtual_stages == layout.virtual_stages;
  par.tensor_model_parallel_size = layout.tp;
  par.pipeline_model_parallel_size = layout.pp;
  par.sequence_parallel = layout.sp;
  par.pipeline.schedule = layout.schedule;
  par.pipeline.virtual_stages = layout.virtual_stages;
  // An explicit list of layers belongs to the config's own pipeline shape.
  if (!same_pipeline && par.pipeline.partition == PipelinePartition::Explicit) {
    par.pipeline.partition = PipelinePartition::Uniform;
    par.pipeline.partition_layers.clear();
  }
  // Sequence parallelism is the layout's axis; DeepSpeed's spelling of it follows.
  out.activation_checkpointing.partition_activations = false;
  out.train_batch_size = cfg.derived.global_batch;
  out.train_micro_batch_size_per_gpu = layout.micro_batch;
  out.gradient_accumulation_steps.reset();
  ZeroConfig& zero = out.zero_optimization;
  zero.stage = layout.zero_stage;
  zero.overlap_comm = overlap_comm;  // resolve_config fills in the stage's default when unset
  zero.offload_optimizer.device = layout.offload_optimizer;
  zero.offload_param.device = layout.offload_param;
  out.model.recompute = layout.recompute;
  out.deepspeed_keys.clear();
  resolve_config(out, layout.dp * layout.tp * layout.pp);
  return out;
}

std::vector<std::string> layout_overrides(const Config& cfg, const Layout& layout, std::optional<bool> overlap_comm) {
  const ParallelismConfig& par = cfg.parallelism;
  const bool same_pipeline = par.pipeline_model_parallel_size == layout.pp &&
                             par.pipeline.virtual_stages == layout.virtual_stages;
  const auto on = [](bool v) { return std::string(v ? "true" : "false"); };
  std::vector<std::string> sets = {
      fmt::format("parallelism.tensor_model_parallel_size={}", layout.tp),
      fmt::format("parallelism.pipeline_model_parallel_size={}", layout.pp),
      "parallelism.sequence_parallel=" + on(layout.sp),
      fmt::format("parallelism.pipeline.schedule={}", pipe_schedule_name(layout.schedule)),
      fmt::format("parallelism.pipeline.virtual_stages={}", layout.virtual_stages),
      "activation_checkpointing.partition_activations=false",
      fmt::format("train_batch_size={}", cfg.derived.global_batch),
      fmt::format("train_micro_batch_size_per_gpu={}", layout.micro_batch),
      fmt::format("gradient_accumulation_steps={}", layout.grad_accum),
      fmt::format("zero_optimization.stage={}", layout.zero_stage),
      fmt::format("zero_optimization.offload_optimizer.device={}", to_string(layout.offload_optimizer)),
      fmt::format("zero_optimization.offload_param.device={}", to_string(layout.offload_param)),
      fmt::format("model.recompute={}", to_string(layout.recompute))};
  if (!same_pipeline && par.pipeline.partition == PipelinePartition::Explicit)
    sets.emplace_back("parallelism.pipeline.partition=uniform");
  const bool overlap = overlap_comm.value_or(layout.zero_stage == 3);
  sets.push_back("zero_optimization.overlap_comm=" + on(overlap));
  return sets;
}

std::string describe_layout(const Layout& l) {
  std::ostringstream s;
  s << "dp " << l.dp << " tp " << l.tp << " pp " << l.pp;
  if (l.pp > 1) {
    s << " (" << pipe_schedule_name(l.schedule);
    if (l.schedule == PipeSchedule::Interleaved) s << " v" << l.virtual_stages;
    s << ")";
  }
  if (l.sp) s << " sp";
  s << " mb " << l.micro_batch << " ga " << l.grad_accum << " zero " << l.zero_stage << " recompute "
    << to_string(l.recompute);
  if (l.offload_optimizer != OffloadDevice::None) s << " offload " << to_string(l.offload_optimizer);
  if (l.offload_param != OffloadDevice::None) s << "+param " << to_string(l.offload_param);
  return s.str();
}

PlanAxes plan_axes_keeping(const std::string& kept) {
  PlanAxes axes;
  std::istringstream in(kept);
  std::string name;
  while (std::getline(in, name, ',')) {
    if (name.empty()) continue;
    if (name == "dp" || name == "tp" || name == "pp" || name == "grid") axes.parallel = false;
    else if (name == "schedule") axes.schedule = false;
    else if (name == "sp") axes.sp = false;
    else if (name == "micro_batch" || name == "mb") axes.micro_batch = false;
    else if (name == "zero") axes.zero = false;
    else if (name == "recompute") axes.recompute = false;
    else if (name == "offload") axes.offload = false;
    else
      throw UserError(fmt::format("--keep: unknown axis '{}' (grid, schedule, sp, micro_batch, zero, recompute, "
                                  "offload)",
                                  name));
  }
  return axes;
}

}  // namespace strata
