// `strata plan`: loads the config and the hardware profile, ranks the layouts (or explains the
// config's own), prints them as a table with each one's memory and step-time breakdown or as
// JSON, and writes the best as a config `strata train` runs as is.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "backend/backend.h"
#include "core/core.h"
#include "plan/plan_internal.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string gib(double bytes) { return fmt::format("{:.2f}", bytes / kGiB); }

// The terms in GiB, or MiB for a rank needing less than one (two decimals of GiB would show zeros).
bool in_mib(const Prediction& p) { return static_cast<double>(p.memory.total()) < kGiB; }

std::string memory_line(const Prediction& p) {
  const MemoryRecord& m = p.memory;
  const bool mib = in_mib(p);
  const auto size = [mib](double bytes) { return mib ? fmt::format("{:.1f}", bytes / (1 << 20)) : gib(bytes); };
  std::string line = fmt::format("params {} + grads {} + optimizer {} + workspace {} + activations {} = {} {}of {} GiB",
                                 size(m.params), size(m.grads), size(m.optimizer), size(m.workspace),
                                 size(m.activations), size(m.total()), mib ? "MiB " : "", gib(p.memory_limit));
  if (m.host > 0) line += fmt::format("; host {} of {} GiB", gib(m.host), gib(p.host_limit));
  if (m.nvme > 0) line += fmt::format("; files {} GiB", gib(m.nvme));
  return line;
}

// Every term with the total's decimals (4 significant digits of it), so the printed terms add up.
std::string time_line(const StepTime& t) {
  const double total = t.total();
  const int decimals = total > 0 ? std::clamp(3 - static_cast<int>(std::floor(std::log10(total))), 0, 9) : 3;
  const auto s = [decimals](double v) { return fmt::format("{:.{}f}", v, decimals); };
  return fmt::format("compute {} + tp comm {} + pp comm {} + bubble {} + dp/zero comm {} (hidden {}) + optimizer {} + "
                     "offload {} = {} s",
                     s(t.compute), s(t.tp_comm), s(t.pp_comm), s(t.bubble), s(t.dp_comm), s(t.dp_hidden),
                     s(t.optimizer), s(t.offload), s(total));
}

void print_breakdown(const Prediction& p) {
  std::printf("    memory per rank (%s, the stage needing most): %s\n", in_mib(p) ? "MiB" : "GiB", memory_line(p).c_str());
  std::printf("    step time: %s\n", time_line(p.time).c_str());
}

// The user's zero_optimization.overlap_comm (the resolved config holds the stage's default too).
std::optional<bool> given_overlap_comm(const PlanOptions& o) {
  const std::optional<std::string> v = given_config_value(o, "zero_optimization.overlap_comm");
  if (!v || (*v != "true" && *v != "false")) return std::nullopt;
  return *v == "true";
}

// `sets`: the layout as --set overrides of the config file (layout_overrides).
nlohmann::json to_json(const Prediction& p, const std::vector<std::string>& sets) {
  const Layout& l = p.layout;
  const StepTime& t = p.time;
  const MemoryRecord& m = p.memory;
  return {{"layout", describe_layout(l)},
          {"dp", l.dp}, {"tp", l.tp}, {"pp", l.pp}, {"sequence_parallel", l.sp},
          {"schedule", pipe_schedule_name(l.schedule)}, {"virtual_stages", l.virtual_stages},
          {"micro_batch", l.micro_batch}, {"grad_accum", l.grad_accum}, {"zero_stage", l.zero_stage},
          {"recompute", to_string(l.recompute)}, {"offload_optimizer", to_string(l.offload_optimizer)},
          {"offload_param", to_string(l.offload_param)}, {"sets", sets}, {"fits", p.fits},
          {"tokens_per_s", p.tokens_per_s}, {"tflops_per_gpu", p.tflops_per_gpu}, {"mfu", p.mfu},
          {"step_time_s", t.total()},
          {"time_s", {{"compute", t.compute}, {"tp_comm", t.tp_comm}, {"pp_comm", t.pp_comm}, {"bubble", t.bubble},
                      {"dp_comm", t.dp_comm}, {"dp_comm_hidden", t.dp_hidden}, {"optimizer", t.optimizer},
                      {"offload", t.offload}}},
          {"memory_bytes", {{"params", m.params}, {"grads", m.grads}, {"optimizer", m.optimizer},
                            {"workspace", m.workspace}, {"activations", m.activations}, {"total", m.total()},
                            {"host", m.host}, {"nvme", m.nvme}, {"limit", p.memory_limit},
                            {"host_limit", p.host_limit}}}};
}

void write_config(const std::string& path, const Prediction& p, const HardwareProfile& hw) {
  std::ofstream out(path);
  out << fmt::format("# strata plan: {} on {} × {} — predicted {:.0f} tokens/s, {:.1f} TFLOP/s per GPU\n"
                     "# run: mpirun -np {} strata train --config {}\n",
                     describe_layout(p.layout), p.config.derived.world_size, hw.name, p.tokens_per_s,
                     p.tflops_per_gpu, p.config.derived.world_size, path);
  out << config_to_yaml(p.config);
  if (!out) throw UserError(fmt::format("--write: cannot write {}", path));
}

[[noreturn]] void throw_nothing_fits(const std::vector<Prediction>& all, int gpus, const HardwareProfile& hw,
                                     const Config& cfg, const std::string& refusal) {
  if (all.empty()) {
    throw UserError(fmt::format(
        "no layout of {} GPUs is valid for this config: a split DP × TP × PP of them needs DP to divide the global "
        "batch ({}), TP to divide n_head ({}) within a node, and PP at most n_layer ({}){}",
        gpus, cfg.derived.global_batch, *cfg.model.n_head, *cfg.model.n_layer,
        refusal.empty() ? fmt::format(", and no split of {} does", gpus)
                        : fmt::format("; the config refused the splits that do (the first: {})", refusal)));
  }
  const Prediction& least = all.front();  // sorted by memory when none fits
  throw UserError(fmt::format("no layout of {} × {} fits: the smallest, {}, needs {} GiB per rank ({}) but a rank "
                              "has {} GiB. Use more GPUs, a smaller model, micro-batch or seq_len",
                              gpus, hw.name, describe_layout(least.layout), gib(least.memory.total()),
                              memory_line(least), gib(least.memory_limit)));
}

// strata's own GPU attention takes some head sizes only: a plan for a GPU with strata's (fused)
// kernels says so for a model whose heads it cannot run (`strata train` refuses it at start-up).
void warn_unsupported_heads(const Config& cfg, const HardwareProfile& hw) {
  const int head_dim = *cfg.model.d_model / *cfg.model.n_head;
  if (!hw.gpu || hw.attention_unfused || cuda_attention_head_dim_supported(head_dim)) return;
  std::fprintf(stderr,
               "warning: heads of %d channels: strata's CUDA attention takes a multiple of 16 up to 128, so "
               "`strata train` refuses this model on GPUs (change n_head); the times below assume kernels that "
               "take it\n",
               head_dim);
}

int print_plan(const PlanOptions& o, const Config& cfg, const HardwareProfile& hw, int gpn) {
  PlanRequest req{o.gpus, gpn, o.tp_across_nodes, plan_axes_keeping(o.keep), given_overlap_comm(o)};
  int considered = 0;
  std::string refusal;
  const std::vector<Prediction> all = plan_layouts(cfg, hw, req, &considered, &refusal);
  const auto fitting = static_cast<int>(std::count_if(all.begin(), all.end(), [](const Prediction& p) { return p.fits; }));
  if (fitting == 0) throw_nothing_fits(all, o.gpus, hw, cfg, refusal);
  const int shown = std::min(o.top > 0 ? o.top : 5, fitting);
  if (!o.write_path.empty()) write_config(o.write_path, all.front(), hw);
  if (o.json) {
    nlohmann::json j = {{"hardware", hw.name}, {"gpus", o.gpus}, {"gpus_per_node", gpn},
                        {"global_batch", cfg.derived.global_batch}, {"considered", considered},
                        {"valid", static_cast<int>(all.size())}, {"fit", fitting},
                        {"layouts", nlohmann::json::array()}};
    for (int i = 0; i < shown; ++i) {
      const Prediction& p = all[static_cast<size_t>(i)];
      j["layouts"].push_back(to_json(p, layout_overrides(cfg, p.layout, req.overlap_comm)));
    }
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  const double n = static_cast<double>(cfg.derived.n_params);
  const std::string params = n >= 1e9 ? fmt::format("{:.2f}B", n / 1e9) : fmt::format("{:.1f}M", n / 1e6);
  std::printf("strata plan: %s parameters, seq_len %d, global batch %d on %d × %s (%d per node)\n", params.c_str(),
              cfg.model.seq_len, cfg.derived.global_batch, o.gpus, hw.name.c_str(), gpn);
  std::printf("%d layouts considered, %d valid, %d fit; the best %d by predicted tokens/s (within 0.5%%, the simpler "
              "first):\n", considered,
              static_cast<int>(all.size()), fitting, shown);
  for (int i = 0; i < shown; ++i) {
    const Prediction& p = all[static_cast<size_t>(i)];
    const double total = static_cast<double>(p.memory.total());
    const std::string memory = in_mib(p) ? fmt::format("{:.1f} MiB", total / (1 << 20)) : gib(total) + " GiB";
    std::printf("%2d. %-72s %11.0f tok/s %8.3g TFLOP/s/GPU  MFU %4.1f%%  %s\n", i + 1,
                describe_layout(p.layout).c_str(), p.tokens_per_s, p.tflops_per_gpu, 100 * p.mfu, memory.c_str());
    print_breakdown(p);
  }
  if (!o.write_path.empty()) std::printf("wrote the best layout to %s\n", o.write_path.c_str());
  return 0;
}

}  // namespace

// Options that do nothing in the mode asked for are refused, not ignored.
void check_plan_options(const PlanOptions& o) {
  std::vector<std::string> unused;
  const auto refuse_with = [&](bool given, const char* option) {
    if (given) unused.emplace_back(option);
  };
  const bool planning = !o.calibrate && !o.explain;
  refuse_with(!planning && !o.write_path.empty(), "--write");
  refuse_with(!planning && !o.keep.empty(), "--keep");
  refuse_with(!planning && o.top > 0, "--top");
  refuse_with(!planning && o.tp_across_nodes, "--tp-across-nodes");
  if (o.calibrate) {
    refuse_with(o.explain, "--explain");
    refuse_with(o.json, "--json");
    refuse_with(!o.hardware.empty(), "--hardware");
    refuse_with(o.gpus > 0, "--gpus");
    refuse_with(o.gpus_per_node > 0, "--gpus-per-node");
  }
  if (!unused.empty()) {
    throw UserError(fmt::format("strata plan {}: {} {} no effect with it", o.calibrate
                                    ? "--calibrate measures the ranks mpirun starts and writes a profile"
                                    : "--explain predicts the config's own layout",
                                fmt::join(unused, ", "), unused.size() == 1 ? "has" : "have"));
  }
  if (!o.calibrate && !o.calibrate_out.empty())
    throw UserError("strata plan: --out is the profile --calibrate writes; --write writes a planned config");
  std::error_code ec;
  if (!o.write_path.empty() && !o.config_path.empty() && fs::exists(o.write_path, ec) &&
      fs::equivalent(o.write_path, o.config_path, ec))
    throw UserError(fmt::format("--write {}: that is the config being planned; write the plan to another file",
                                o.write_path));
}

int run_plan(const MpiRuntime* mpi, const PlanOptions& o) {
  check_plan_options(o);
  if (o.calibrate) return run_calibration(mpi, o);
  if (o.config_path.empty()) throw UserError("strata plan: give --config FILE");
  const HardwareProfile hw = load_hardware_profile(o.hardware.empty() ? "h100-sxm" : o.hardware);
  const int gpn = o.gpus_per_node > 0 ? o.gpus_per_node : hw.gpus_per_node;
  if (o.explain) {
    if (o.gpus <= 0) throw UserError("strata plan --explain: give --gpus N (the ranks the config will run on)");
    const Config cfg = load_plan_config(o, o.gpus);
    warn_unsupported_heads(cfg, hw);
    const Prediction p = predict_layout(cfg, hw, gpn);
    if (o.json) {
      std::printf("%s\n", to_json(p, layout_overrides(cfg, p.layout, given_overlap_comm(o))).dump(2).c_str());
      return 0;
    }
    std::printf("strata plan --explain: %s on %d × %s (%d per node)%s\n", describe_layout(p.layout).c_str(),
                cfg.derived.world_size, hw.name.c_str(), gpn, p.fits ? "" : " — DOES NOT FIT");
    std::printf("    predicted %.0f tokens/s, %.3g TFLOP/s per GPU, MFU %.1f%%\n", p.tokens_per_s, p.tflops_per_gpu,
                100 * p.mfu);
    print_breakdown(p);
    return 0;
  }
  if (o.gpus <= 0) throw UserError("strata plan: give --gpus N (the ranks to plan for; with --explain, the ranks the config runs on)");
  if (o.gpus > gpn && o.gpus % gpn != 0)
    throw UserError(fmt::format("--gpus {} is not a multiple of the {} GPUs per node (--gpus-per-node or the "
                                "profile's gpus_per_node)",
                                o.gpus, gpn));
  std::string refused;
  const Config cfg = load_plan_config(o, o.gpus, &refused);
  const PlanAxes axes = plan_axes_keeping(o.keep);
  // The config's own grid, schedule or micro-batch cannot be kept where it does not run at all.
  if (!refused.empty() && (!axes.parallel || !axes.schedule || !axes.sp || !axes.micro_batch))
    throw UserError(fmt::format("--keep {}: the config's own layout does not run on {} GPUs ({}); keep only zero, "
                                "recompute or offload, or plan for GPUs it runs on",
                                o.keep, o.gpus, refused));
  warn_unsupported_heads(cfg, hw);
  return print_plan(o, cfg, hw, gpn);
}

}  // namespace strata
