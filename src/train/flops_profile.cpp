// DeepSpeed's flops_profiler, from what strata knows: each module's parameters and forward FLOPs
// by the convention the MFU uses (2 per parameter per token, the embedding table's counted at the
// head that multiplies by it, plus the causal attention scores), and the profile step's measured
// forward, backward and optimizer times on rank 0.
#include "train/flops_profile.h"

#include <fmt/core.h>

#include <algorithm>
#include <string>
#include <vector>

namespace strata {
namespace {

struct Module {
  std::string name;
  int depth = 0;
  int64_t params = 0;
  double fwd_flops = 0;  // per step
};

// The model's modules in order, each with its depth (0 = the whole model).
std::vector<Module> model_modules(const GptDims& d, double tokens) {
  const int64_t C = d.d_model, T = d.seq_len, V = d.padded_vocab;
  const int64_t attn = 4 * C * C + 4 * C, mlp = 8 * C * C + 5 * C, norm = 2 * C;
  const int64_t block = attn + mlp + 2 * norm;
  const double scores = 2.0 * static_cast<double>(C * T);  // QKᵀ and AV: 4·C·T per token, halved by the mask
  auto flops = [&](int64_t params, double extra = 0) { return (2.0 * static_cast<double>(params) + extra) * tokens; };
  std::vector<Module> m;
  m.push_back({"GPT", 0, V * C + T * C + d.n_layer * block + norm, 0});
  m.push_back({"embeddings (wte, wpe)", 1, V * C + T * C, flops(T * C)});
  for (int l = 0; l < d.n_layer; ++l) {
    const std::string h = "h." + std::to_string(l);
    m.push_back({h, 1, block, flops(block, scores)});
    m.push_back({h + ".ln_1", 2, norm, flops(norm)});
    m.push_back({h + ".attn", 2, attn, flops(attn, scores)});
    m.push_back({h + ".ln_2", 2, norm, flops(norm)});
    m.push_back({h + ".mlp", 2, mlp, flops(mlp)});
  }
  m.push_back({"ln_f", 1, norm, flops(norm)});
  m.push_back({"lm_head (tied to wte)", 1, 0, flops(V * C)});
  for (size_t i = 1; i < m.size(); ++i) {
    if (m[i].depth == 1) m[0].fwd_flops += m[i].fwd_flops;
  }
  return m;
}

std::string count(double value, const char* unit) {
  const char* prefixes[] = {"", " K", " M", " G", " T", " P"};
  int i = 0;
  while (value >= 1000 && i < 5) value /= 1000, ++i;
  if (i == 0) return fmt::format("{:.0f}{}{}", value, *unit ? " " : "", unit);  // a count below 1000 is whole
  return fmt::format("{:.2f}{}{}", value, prefixes[i], unit);
}

std::string summary(const FlopsProfileInput& in, const std::vector<Module>& modules) {
  const Derived& d = in.cfg->derived;
  const double model_parallel = static_cast<double>(d.tp_size) * d.pp_size;
  const double fwd = modules[0].fwd_flops / d.dp_size / model_parallel;  // per GPU, on average
  const double factor = in.cfg->flops_profiler.recompute_fwd_factor;
  const StepMetrics& m = *in.metrics;
  std::string out = fmt::format("Profile Summary at step {}:\n", m.step);
  const auto line = [&](const std::string& what, const std::string& value) {
    out += fmt::format("{:<72}{}\n", what + ":", value);
  };
  line("world size", std::to_string(d.world_size));
  line("data parallel size", std::to_string(d.dp_size));
  line("model parallel size (tensor × pipeline)", std::to_string(d.tp_size * d.pp_size));
  line("batch size per GPU", fmt::format("{} ({} micro-batches of {} sequences of {} tokens)", d.micro_batch * d.grad_accum,
                                         d.grad_accum, d.micro_batch, in.dims->seq_len));
  line("params of model", count(static_cast<double>(modules[0].params), ""));
  line("params per GPU (model / (tensor × pipeline), on average)",
       count(static_cast<double>(modules[0].params) / model_parallel, ""));
  line("fwd flops of model per step", count(modules[0].fwd_flops, ""));
  line("fwd flops per GPU (on average)", count(fwd, ""));
  line("fwd latency (rank 0)", fmt::format("{:.2f} ms", m.forward_seconds * 1e3));
  line("fwd FLOPS per GPU = fwd flops per GPU / fwd latency", count(fwd / m.forward_seconds, "FLOPS"));
  line("bwd latency (rank 0)", fmt::format("{:.2f} ms", m.backward_seconds * 1e3));
  line(fmt::format("bwd FLOPS per GPU = {:g} × fwd flops per GPU / bwd latency", 2 + factor),
       count((2 + factor) * fwd / m.backward_seconds, "FLOPS"));
  line(fmt::format("fwd+bwd FLOPS per GPU = {:g} × fwd flops per GPU / (fwd+bwd latency)", 3 + factor),
       count((3 + factor) * fwd / (m.forward_seconds + m.backward_seconds), "FLOPS"));
  line("step latency (optimizer, rank 0)", fmt::format("{:.2f} ms", m.optimizer_seconds * 1e3));
  line("iter latency", fmt::format("{:.2f} ms", m.step_seconds * 1e3));
  line(fmt::format("FLOPS per GPU = {:g} × fwd flops per GPU / iter latency", 3 + factor),
       count((3 + factor) * fwd / m.step_seconds, "FLOPS"));
  line("samples/second", fmt::format("{:.2f}", d.global_batch / m.step_seconds));
  return out;
}

// The top modules of each depth by parameters and by forward FLOPs.
std::string aggregated(const std::vector<Module>& modules, int max_depth, int top) {
  std::string out = fmt::format("Top {} modules in terms of params and fwd FLOPs at different model depths:\n", top);
  for (int depth = 0; depth <= max_depth; ++depth) {
    std::vector<const Module*> at;
    for (const Module& m : modules) {
      if (m.depth == depth) at.push_back(&m);
    }
    if (at.empty()) break;
    auto listed = [&](auto key, const char* unit) {
      std::vector<const Module*> sorted = at;
      std::stable_sort(sorted.begin(), sorted.end(), [&](const Module* a, const Module* b) { return key(a) > key(b); });
      std::string text;
      for (size_t i = 0; i < sorted.size() && static_cast<int>(i) < top; ++i)
        text += fmt::format("{}'{}': '{}'", i ? ", " : "", sorted[i]->name, count(key(sorted[i]), unit));
      return "{" + text + "}";
    };
    out += fmt::format("depth {}:\n    params      - {}\n    fwd FLOPs   - {}\n", depth,
                       listed([](const Module* m) { return static_cast<double>(m->params); }, ""),
                       listed([](const Module* m) { return m->fwd_flops; }, ""));
  }
  return out;
}

std::string detailed(const std::vector<Module>& modules, int max_depth) {
  std::string out = "Each module: params, share of the model's params, fwd FLOPs per step, share of the "
                    "model's fwd FLOPs\n";
  for (const Module& m : modules) {
    if (m.depth > max_depth) continue;
    out += fmt::format("{}{}: {}, {:.2f}% params, {}, {:.2f}% fwd FLOPs\n", std::string(2 * m.depth, ' '), m.name,
                       count(static_cast<double>(m.params), ""),
                       100.0 * static_cast<double>(m.params) / static_cast<double>(modules[0].params),
                       count(m.fwd_flops, "FLOPs"), 100.0 * m.fwd_flops / modules[0].fwd_flops);
  }
  return out;
}

}  // namespace

double profiled_fwd_flops(const GptDims& dims, double tokens) { return model_modules(dims, tokens)[0].fwd_flops; }

std::string flops_profile(const FlopsProfileInput& in) {
  const FlopsProfilerConfig& p = in.cfg->flops_profiler;
  const std::vector<Module> modules =
      model_modules(*in.dims, static_cast<double>(in.cfg->derived.tokens_per_step));
  const int depth = p.module_depth < 0 ? 2 : p.module_depth;
  const std::string rule(30, '-');
  std::string out = rule + " strata flops profiler (DeepSpeed's flops_profiler) " + rule + "\n";
  out += summary(in, modules);
  out += rule + " Aggregated Profile per GPU " + rule + "\n" + aggregated(modules, depth, std::max(1, p.top_modules));
  if (p.detailed) out += rule + " Detailed Profile of the model " + rule + "\n" + detailed(modules, depth);
  out += "FLOPs count 2 per parameter per token forward (the tied embedding table's at lm_head) plus the causal "
         "attention scores, as the MFU does; latencies are rank 0's, measured with the device synchronized\n";
  return out;
}

}  // namespace strata
