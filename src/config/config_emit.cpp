// Writes a Config back in file format. Numbers use the shortest text that parses back to
// the same double and strings are always double-quoted, so load_config_text(config_to_yaml(c))
// reproduces c exactly; checkpoints rely on that to store the run's config.
#include <fmt/format.h>

#include "config/config_internal.h"

namespace strata {
namespace {

std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

// fmt's "{}" prints the shortest representation that round-trips (e.g. 0.0006, 1e-08). YAML 1.1
// readers (PyYAML) take "1e-08" for a string, so exponent forms get a mantissa dot: 1.0e-08.
std::string number(double value) {
  std::string text = fmt::format("{}", value);
  const size_t e = text.find('e');
  if (e != std::string::npos && text.find('.') == std::string::npos) text.insert(e, ".0");
  return text;
}
std::string number(int64_t value) { return fmt::format("{}", value); }
std::string number(int value) { return fmt::format("{}", value); }
std::string boolean(bool value) { return value ? "true" : "false"; }

class YamlWriter {
 public:
  void key(const std::string& name, const std::string& value) { line(name + ": " + value); }
  void open(const std::string& name) {
    line(name + ":");
    depth_ += 1;
  }
  void close() { depth_ -= 1; }
  void comment(const std::string& text) { line("# " + text); }
  std::string text() const { return text_; }

 private:
  void line(const std::string& content) {
    text_ += std::string(static_cast<size_t>(depth_) * 2, ' ') + content + "\n";
  }
  std::string text_;
  int depth_ = 0;
};

void write_scheduler(const SchedulerConfig& s, YamlWriter& w) {
  if (s.type == LrScheduleType::Constant) {
    w.comment("no scheduler section: constant learning rate");
    return;
  }
  w.open("scheduler");
  w.key("type", to_string(s.type));
  w.open("params");
  const SchedulerParams& q = s.params;
  for (const auto& name : config_detail::scheduler_param_names(s.type)) {
    if (name == "warmup_min_lr") w.key(name, number(q.warmup_min_lr));
    if (name == "warmup_max_lr") w.key(name, number(q.warmup_max_lr));
    if (name == "warmup_num_steps") w.key(name, number(q.warmup_num_steps));
    if (name == "warmup_type") w.key(name, to_string(q.warmup_type));
    if (name == "total_num_steps" && q.total_num_steps) w.key(name, number(*q.total_num_steps));
    if (name == "warmup_min_ratio") w.key(name, number(q.warmup_min_ratio));
    if (name == "cos_min_ratio") w.key(name, number(q.cos_min_ratio));
  }
  w.close();
  w.close();
}

void write_offload(const char* name, const OffloadConfig& o, YamlWriter& w) {
  w.open(name);
  w.key("device", to_string(o.device));
  w.key("pin_memory", boolean(o.pin_memory));
  w.close();
}

void write_deepspeed_sections(const Config& c, YamlWriter& w) {
  if (c.train_batch_size) w.key("train_batch_size", number(*c.train_batch_size));
  if (c.train_micro_batch_size_per_gpu)
    w.key("train_micro_batch_size_per_gpu", number(*c.train_micro_batch_size_per_gpu));
  if (c.gradient_accumulation_steps) w.key("gradient_accumulation_steps", number(*c.gradient_accumulation_steps));

  w.open("optimizer");
  w.key("type", to_string(c.optimizer.type));
  w.open("params");
  const AdamParams& a = c.optimizer.params;
  w.key("lr", number(a.lr));
  w.key("betas", "[" + number(a.betas[0]) + ", " + number(a.betas[1]) + "]");
  w.key("eps", number(a.eps));
  w.key("weight_decay", number(a.weight_decay));
  w.key("adam_w_mode", boolean(a.adam_w_mode));
  w.close();
  w.close();

  write_scheduler(c.scheduler, w);

  const Fp16Config& f = c.fp16;
  w.open("fp16");
  w.key("enabled", boolean(f.enabled));
  w.key("loss_scale", number(f.loss_scale));
  w.key("initial_scale_power", number(f.initial_scale_power));
  w.key("loss_scale_window", number(f.loss_scale_window));
  w.key("hysteresis", number(f.hysteresis));
  w.key("consecutive_hysteresis", boolean(f.consecutive_hysteresis));
  w.key("min_loss_scale", number(f.min_loss_scale));
  w.close();
  w.open("bf16");
  w.key("enabled", boolean(c.bf16.enabled));
  w.close();

  const ZeroConfig& z = c.zero_optimization;
  w.open("zero_optimization");
  w.key("stage", number(z.stage));
  if (z.overlap_comm) w.key("overlap_comm", boolean(*z.overlap_comm));
  w.key("contiguous_gradients", boolean(z.contiguous_gradients));
  w.key("reduce_scatter", boolean(z.reduce_scatter));
  w.key("reduce_bucket_size", number(z.reduce_bucket_size));
  if (z.allgather_bucket_size) w.key("allgather_bucket_size", number(*z.allgather_bucket_size));
  if (z.stage3_prefetch_bucket_size) w.key("stage3_prefetch_bucket_size", number(*z.stage3_prefetch_bucket_size));
  w.key("stage3_param_persistence_threshold", number(z.stage3_param_persistence_threshold));
  write_offload("offload_optimizer", z.offload_optimizer, w);
  write_offload("offload_param", z.offload_param, w);
  w.close();

  w.key("gradient_clipping", number(c.gradient_clipping));
  w.key("steps_per_print", number(c.steps_per_print));
  w.key("wall_clock_breakdown", boolean(c.wall_clock_breakdown));

  const ActivationCheckpointingConfig& ac = c.activation_checkpointing;
  w.open("activation_checkpointing");
  w.key("partition_activations", boolean(ac.partition_activations));
  w.key("cpu_checkpointing", boolean(ac.cpu_checkpointing));
  w.key("contiguous_memory_optimization", boolean(ac.contiguous_memory_optimization));
  w.key("synchronize_checkpoint_boundary", boolean(ac.synchronize_checkpoint_boundary));
  w.key("profile", boolean(ac.profile));
  w.key("number_checkpoints", ac.number_checkpoints ? number(*ac.number_checkpoints) : "null");
  w.close();
}

void write_strata_sections(const Config& c, YamlWriter& w) {
  const ModelConfig& m = c.model;
  w.open("model");
  w.key("preset", quoted(m.preset));
  if (m.n_layer) w.key("n_layer", number(*m.n_layer));
  if (m.n_head) w.key("n_head", number(*m.n_head));
  if (m.d_model) w.key("d_model", number(*m.d_model));
  w.key("vocab_size", number(m.vocab_size));
  w.key("seq_len", number(m.seq_len));
  w.key("recompute", to_string(m.recompute));
  w.close();

  const ParallelismConfig& p = c.parallelism;
  w.open("parallelism");
  w.key("tensor_model_parallel_size", number(p.tensor_model_parallel_size));
  w.key("pipeline_model_parallel_size", number(p.pipeline_model_parallel_size));
  w.key("sequence_parallel", boolean(p.sequence_parallel));
  w.open("pipeline");
  w.key("schedule", to_string(p.pipeline.schedule));
  w.key("virtual_stages", number(p.pipeline.virtual_stages));
  if (p.pipeline.partition == PipelinePartition::Explicit) {
    std::string list;
    for (int n : p.pipeline.partition_layers) list += (list.empty() ? "" : ", ") + number(n);
    w.key("partition", "[" + list + "]");
  } else {
    w.key("partition", to_string(p.pipeline.partition));
  }
  w.close();
  w.close();

  w.open("data");
  w.key("train", quoted(c.data.train));
  w.key("val", quoted(c.data.val));
  w.key("shuffle", boolean(c.data.shuffle));
  w.close();

  w.open("train");
  w.key("iters", number(c.train.iters));
  w.key("eval_interval", number(c.train.eval_interval));
  w.key("eval_iters", number(c.train.eval_iters));
  w.key("seed", number(c.train.seed));
  w.key("max_nonfinite_steps", number(c.train.max_nonfinite_steps));
  w.close();

  const CheckpointConfig& k = c.checkpoint;
  w.open("checkpoint");
  w.key("dir", quoted(k.dir));
  w.key("save_interval", number(k.save_interval));
  w.key("save_initial", boolean(k.save_initial));
  w.key("keep_last", number(k.keep_last));
  w.key("resume", quoted(k.resume));
  w.key("overwrite", boolean(k.overwrite));
  w.close();

  const LoggingConfig& l = c.logging;
  w.open("logging");
  w.key("metrics_file", quoted(l.metrics_file));
  w.key("sample_interval", number(l.sample_interval));
  w.key("sample_tokens", number(l.sample_tokens));
  w.key("sample_prompt", quoted(l.sample_prompt));
  w.close();

  w.key("device", to_string(c.device));
  w.open("comm");
  w.key("backend", to_string(c.comm.backend));
  w.close();
}

}  // namespace

std::string config_to_yaml(const Config& cfg) {
  YamlWriter w;
  w.comment("strata config: every key, defaults filled in");
  write_deepspeed_sections(cfg, w);
  write_strata_sections(cfg, w);
  return w.text();
}

std::string derived_to_yaml(const Config& cfg) {
  const Derived& d = cfg.derived;
  YamlWriter w;
  w.open("derived");
  w.key("world_size", number(d.world_size));
  w.key("dp_size", number(d.dp_size));
  w.key("tp_size", number(d.tp_size));
  w.key("pp_size", number(d.pp_size));
  w.key("micro_batch", number(d.micro_batch));
  w.key("grad_accum", number(d.grad_accum));
  w.key("global_batch", number(d.global_batch));
  w.key("tokens_per_step", number(d.tokens_per_step));
  w.key("padded_vocab", number(d.padded_vocab));
  w.key("n_params", number(d.n_params));
  w.key("n_params_unpadded", number(d.n_params_unpadded));
  w.key("flops_per_token", number(d.flops_per_token));
  w.close();
  return w.text();
}

}  // namespace strata
