// Private to src/config: the one table of the config's keys. Each section's fields are listed
// once, by name, with how their value is read and written; the parser (config_parse.cpp) and the
// writer (config_emit.cpp) walk the same functions, in this order, which is the written file's.
// A new key is its member in config.h (type, default, doc line), one line here, and its range in
// config_validate.cpp.
#pragma once
#include "config/config_internal.h"

namespace strata::config_detail {

// A visitor V offers:
//   value(name, member)            bool, number, string or list; an optional one is written only
//                                  when set
//   nullable(name, member)         an optional number written as null when unset
//   count(name, member)            an element count (5e8 or 500000000)
//   choice(name, member, names)    one of `names` (choice_any_case: in any letter case)
//   section(name, fn)              a nested map whose fields fn(V&) visits
//   scheduler(member), pipeline_partition(member)   the two keys whose shape depends on a value
// S is the section's type, const for the writer.

template <typename V, typename S>
void offload_fields(V& v, S& o) {
  v.choice("device", o.device, kOffloadDevices);
  v.value("pin_memory", o.pin_memory);
}

template <typename V, typename S>
void zero_fields(V& v, S& z) {
  v.value("stage", z.stage);
  v.value("overlap_comm", z.overlap_comm);
  v.value("contiguous_gradients", z.contiguous_gradients);
  v.value("reduce_scatter", z.reduce_scatter);
  v.count("reduce_bucket_size", z.reduce_bucket_size);
  v.count("allgather_bucket_size", z.allgather_bucket_size);
  v.count("stage3_prefetch_bucket_size", z.stage3_prefetch_bucket_size);
  v.count("stage3_param_persistence_threshold", z.stage3_param_persistence_threshold);
  v.section("offload_optimizer", [&](V& s) { offload_fields(s, z.offload_optimizer); });
  v.section("offload_param", [&](V& s) { offload_fields(s, z.offload_param); });
}

// ds_config's sections, in DeepSpeed's order.
template <typename V, typename C>
void deepspeed_fields(V& v, C& c) {
  v.value("train_batch_size", c.train_batch_size);
  v.value("train_micro_batch_size_per_gpu", c.train_micro_batch_size_per_gpu);
  v.value("gradient_accumulation_steps", c.gradient_accumulation_steps);
  v.section("optimizer", [&](V& s) {
    s.choice_any_case("type", c.optimizer.type, kOptimizerTypes);
    s.section("params", [&](V& p) {
      p.value("lr", c.optimizer.params.lr);
      p.value("betas", c.optimizer.params.betas);
      p.value("eps", c.optimizer.params.eps);
      p.value("weight_decay", c.optimizer.params.weight_decay);
      p.value("adam_w_mode", c.optimizer.params.adam_w_mode);
    });
  });
  v.scheduler(c.scheduler);
  v.section("fp16", [&](V& s) {
    s.value("enabled", c.fp16.enabled);
    s.value("loss_scale", c.fp16.loss_scale);
    s.value("initial_scale_power", c.fp16.initial_scale_power);
    s.value("loss_scale_window", c.fp16.loss_scale_window);
    s.value("hysteresis", c.fp16.hysteresis);
    s.value("consecutive_hysteresis", c.fp16.consecutive_hysteresis);
    s.value("min_loss_scale", c.fp16.min_loss_scale);
  });
  v.section("bf16", [&](V& s) { s.value("enabled", c.bf16.enabled); });
  v.section("zero_optimization", [&](V& s) { zero_fields(s, c.zero_optimization); });
  v.value("gradient_clipping", c.gradient_clipping);
  v.value("steps_per_print", c.steps_per_print);
  v.value("wall_clock_breakdown", c.wall_clock_breakdown);
  v.section("activation_checkpointing", [&](V& s) {
    auto& a = c.activation_checkpointing;
    s.value("partition_activations", a.partition_activations);
    s.value("cpu_checkpointing", a.cpu_checkpointing);
    s.value("contiguous_memory_optimization", a.contiguous_memory_optimization);
    s.value("synchronize_checkpoint_boundary", a.synchronize_checkpoint_boundary);
    s.value("profile", a.profile);
    s.nullable("number_checkpoints", a.number_checkpoints);
  });
}

// strata's own sections.
template <typename V, typename C>
void strata_fields(V& v, C& c) {
  v.section("model", [&](V& s) {
    s.value("preset", c.model.preset);
    s.value("n_layer", c.model.n_layer);
    s.value("n_head", c.model.n_head);
    s.value("d_model", c.model.d_model);
    s.value("vocab_size", c.model.vocab_size);
    s.value("seq_len", c.model.seq_len);
    s.choice("recompute", c.model.recompute, kRecomputeModes);
  });
  v.section("parallelism", [&](V& s) {
    s.value("tensor_model_parallel_size", c.parallelism.tensor_model_parallel_size);
    s.value("pipeline_model_parallel_size", c.parallelism.pipeline_model_parallel_size);
    s.value("sequence_parallel", c.parallelism.sequence_parallel);
    s.section("pipeline", [&](V& p) {
      p.choice("schedule", c.parallelism.pipeline.schedule, kPipelineSchedules);
      p.value("virtual_stages", c.parallelism.pipeline.virtual_stages);
      p.pipeline_partition(c.parallelism.pipeline);
    });
  });
  v.section("data", [&](V& s) {
    s.value("train", c.data.train);
    s.value("val", c.data.val);
    s.value("shuffle", c.data.shuffle);
  });
  v.section("train", [&](V& s) {
    s.value("iters", c.train.iters);
    s.value("eval_interval", c.train.eval_interval);
    s.value("eval_iters", c.train.eval_iters);
    s.value("seed", c.train.seed);
    s.value("max_nonfinite_steps", c.train.max_nonfinite_steps);
  });
  v.section("checkpoint", [&](V& s) {
    s.value("dir", c.checkpoint.dir);
    s.value("save_interval", c.checkpoint.save_interval);
    s.value("save_initial", c.checkpoint.save_initial);
    s.value("keep_last", c.checkpoint.keep_last);
    s.value("resume", c.checkpoint.resume);
    s.value("overwrite", c.checkpoint.overwrite);
  });
  v.section("logging", [&](V& s) {
    s.value("metrics_file", c.logging.metrics_file);
    s.value("sample_interval", c.logging.sample_interval);
    s.value("sample_tokens", c.logging.sample_tokens);
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
