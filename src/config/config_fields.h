// Private to src/config: the one table of the config's keys. Each section's fields are listed
// once, by name, with how their value is read and written; the parser (config_parse.cpp) and the
// writer (config_emit.cpp) walk the same functions, in this order, which is the written file's.
// A new key is its member in config.h (type, default, doc line) and one line here with its range;
// validation (config_validate.cpp) checks every range from this table and keeps by hand only the
// rules that join several keys or depend on another key's value.
#pragma once
#include "config/config_internal.h"

namespace strata::config_detail {

// The range a number's value must lie in. Unset optional values are not checked.
struct Bound {
  enum class Kind { Any, AtLeast, Positive, Within, Fraction };
  Kind kind = Kind::Any;
  double lo = 0;
  double hi = 0;
};
constexpr Bound at_least(double min) { return {Bound::Kind::AtLeast, min, 0}; }
constexpr Bound positive() { return {Bound::Kind::Positive, 0, 0}; }
constexpr Bound within(double lo, double hi) { return {Bound::Kind::Within, lo, hi}; }  // whole numbers
constexpr Bound fraction() { return {Bound::Kind::Fraction, 0, 1}; }

// A visitor V offers:
//   value(name, member, bound)     bool, number, string or list; an optional one is written only
//                                  when set; the bound (numbers only) may be left out
//   count(name, member, bound)     an element count (5e8 or 500000000)
//   choice(name, member, names)    one of `names` (choice_any_case: in any letter case)
//   section(name, fn[, alias])     a nested map whose fields fn(V&) visits; the reader also takes
//                                  it under DeepSpeed's other name `alias`
//   scheduler(member), pipeline_partition(member)   the two keys whose shape depends on a value
//   data_sources(name, member)     one glob, or a list of {path, weight} maps
// S is the section's type, const for the writer.

template <typename V, typename S>
void offload_fields(V& v, S& o) {
  v.choice("device", o.device, kOffloadDevices);
  v.value("pin_memory", o.pin_memory);
}

template <typename V, typename S>
void zero_fields(V& v, S& z) {
  v.value("stage", z.stage, within(0, 3));
  v.value("overlap_comm", z.overlap_comm);
  v.value("contiguous_gradients", z.contiguous_gradients);
  v.value("reduce_scatter", z.reduce_scatter);
  v.count("reduce_bucket_size", z.reduce_bucket_size, at_least(1));
  v.count("allgather_bucket_size", z.allgather_bucket_size, at_least(1));
  v.count("stage3_prefetch_bucket_size", z.stage3_prefetch_bucket_size, at_least(0));
  v.count("stage3_max_live_parameters", z.stage3_max_live_parameters, at_least(0));
  v.count("stage3_param_persistence_threshold", z.stage3_param_persistence_threshold, at_least(0));
  v.count("stage3_model_persistence_threshold", z.stage3_model_persistence_threshold, at_least(0));
  v.section("offload_optimizer", [&](V& s) {
    offload_fields(s, z.offload_optimizer);
    s.value("cpuadam_cores_perc", z.offload_optimizer.cpuadam_cores_perc, fraction());
    s.value("nvme_path", z.offload_optimizer.nvme_path);
    s.value("buffer_count", z.offload_optimizer.buffer_count, at_least(0));  // nvme: ≥ 2 (check_offload)
  });
  v.section("offload_param", [&](V& s) {
    offload_fields(s, z.offload_param);
    s.value("nvme_path", z.offload_param.nvme_path);
    s.value("buffer_count", z.offload_param.buffer_count, at_least(0));  // nvme: ≥ 3 (check_offload)
  });
}

// ds_config's sections, in DeepSpeed's order.
template <typename V, typename C>
void deepspeed_fields(V& v, C& c) {
  v.value("train_batch_size", c.train_batch_size, at_least(1));
  v.value("train_micro_batch_size_per_gpu", c.train_micro_batch_size_per_gpu, at_least(1));
  v.value("gradient_accumulation_steps", c.gradient_accumulation_steps, at_least(1));
  v.section("optimizer", [&](V& s) {
    s.choice_any_case("type", c.optimizer.type, kOptimizerTypes);
    s.section("params", [&](V& p) {
      p.value("lr", c.optimizer.params.lr, positive());
      p.value("betas", c.optimizer.params.betas);
      p.value("eps", c.optimizer.params.eps, positive());
      p.value("weight_decay", c.optimizer.params.weight_decay, at_least(0));
      p.value("adam_w_mode", c.optimizer.params.adam_w_mode);
    });
  });
  v.scheduler(c.scheduler);
  v.section("fp16", [&](V& s) {
    s.value("enabled", c.fp16.enabled);
    s.value("loss_scale", c.fp16.loss_scale, at_least(0));
    s.value("initial_scale_power", c.fp16.initial_scale_power, within(0, 64));
    s.value("loss_scale_window", c.fp16.loss_scale_window, at_least(1));
    s.value("hysteresis", c.fp16.hysteresis, at_least(1));
    s.value("consecutive_hysteresis", c.fp16.consecutive_hysteresis);
    s.value("min_loss_scale", c.fp16.min_loss_scale, positive());
  });
  v.section("bf16", [&](V& s) { s.value("enabled", c.bf16.enabled); }, "bfloat16");
  v.section("zero_optimization", [&](V& s) { zero_fields(s, c.zero_optimization); });
  v.choice_any_case("communication_data_type", c.communication_data_type, kCommDataTypes);
  v.value("gradient_clipping", c.gradient_clipping, at_least(0));
  v.value("steps_per_print", c.steps_per_print, at_least(0));
  v.value("wall_clock_breakdown", c.wall_clock_breakdown);
  v.section("csv_monitor", [&](V& s) {
    s.value("enabled", c.csv_monitor.enabled);
    s.value("output_path", c.csv_monitor.output_path);
    s.value("job_name", c.csv_monitor.job_name);
  });
  v.section("flops_profiler", [&](V& s) {
    auto& f = c.flops_profiler;
    s.value("enabled", f.enabled);
    s.value("recompute_fwd_factor", f.recompute_fwd_factor, at_least(0));
    s.value("profile_step", f.profile_step, at_least(1));
    s.value("module_depth", f.module_depth, at_least(-1));
    s.value("top_modules", f.top_modules, at_least(1));
    s.value("detailed", f.detailed);
    s.value("output_file", f.output_file);
  });
  v.section("activation_checkpointing", [&](V& s) {
    auto& a = c.activation_checkpointing;
    s.value("partition_activations", a.partition_activations);
    s.value("cpu_checkpointing", a.cpu_checkpointing);
  });
}

// strata's own sections.
template <typename V, typename C>
void strata_fields(V& v, C& c) {
  v.section("model", [&](V& s) {
    s.value("preset", c.model.preset);
    s.value("n_layer", c.model.n_layer, at_least(1));
    s.value("n_head", c.model.n_head, at_least(1));
    s.value("d_model", c.model.d_model, at_least(1));
    s.value("vocab_size", c.model.vocab_size, within(1, 1 << 30));  // padding stays within int
    s.value("seq_len", c.model.seq_len, at_least(1));
    s.choice("recompute", c.model.recompute, kRecomputeModes);
    s.choice("attention_probabilities", c.model.attention_probabilities, kAttentionProbabilities);
    s.value("init_from", c.model.init_from);
  });
  v.section("parallelism", [&](V& s) {
    s.value("tensor_model_parallel_size", c.parallelism.tensor_model_parallel_size, at_least(1));
    s.value("pipeline_model_parallel_size", c.parallelism.pipeline_model_parallel_size, at_least(1));
    s.value("sequence_parallel", c.parallelism.sequence_parallel);
    s.section("pipeline", [&](V& p) {
      p.choice("schedule", c.parallelism.pipeline.schedule, kPipelineSchedules);
      p.value("virtual_stages", c.parallelism.pipeline.virtual_stages, at_least(1));
      p.pipeline_partition(c.parallelism.pipeline);
    });
  });
  v.section("data", [&](V& s) {
    s.data_sources("train", c.data.train);
    s.value("val", c.data.val);
    s.value("shuffle", c.data.shuffle);
    s.value("tokenizer", c.data.tokenizer);
  });
  v.section("train", [&](V& s) {
    s.value("iters", c.train.iters, at_least(1));
    s.value("eval_interval", c.train.eval_interval, at_least(0));
    s.value("eval_iters", c.train.eval_iters, at_least(1));
    s.value("seed", c.train.seed, at_least(0));
    s.value("max_nonfinite_steps", c.train.max_nonfinite_steps, at_least(0));
  });
  v.section("checkpoint", [&](V& s) {
    s.value("dir", c.checkpoint.dir);
    s.value("save_interval", c.checkpoint.save_interval, at_least(0));
    s.value("save_initial", c.checkpoint.save_initial);
    s.value("keep_last", c.checkpoint.keep_last, at_least(0));
    s.value("resume", c.checkpoint.resume);
    s.value("overwrite", c.checkpoint.overwrite);
  });
  v.section("logging", [&](V& s) {
    s.value("metrics_file", c.logging.metrics_file);
    s.value("sample_interval", c.logging.sample_interval, at_least(0));
    s.value("sample_tokens", c.logging.sample_tokens, at_least(1));
    s.value("sample_prompt", c.logging.sample_prompt);
  });
  v.choice("device", c.device, kDeviceKinds);
  v.section("comm", [&](V& s) { s.choice("backend", c.comm.backend, kCommBackends); });
}

// Every key of the config file, in the written file's order.
template <typename V, typename C>
void config_fields(V& v, C& c) {
  deepspeed_fields(v, c);
  strata_fields(v, c);
}

}  // namespace strata::config_detail
