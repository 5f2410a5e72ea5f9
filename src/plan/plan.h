// Public header of src/plan: `strata plan`, which ranks every layout of a config for a cluster
// (DP × TP × PP, schedule and interleave, SP, micro-batch, ZeRO stage, recompute, offload) by
// predicted tokens/s. Memory comes from the trainer's own start-up estimate, communication from
// the volumes the traffic tests hold the communicators to, the bubble from the schedule tables'
// simulator; only the rates (FLOP/s, bandwidths, latencies) come from a hardware profile.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "config/config.h"
#include "sharding/sharding.h"

namespace strata {

// ---- hardware profiles ------------------------------------------------------------------------
// One link class: what one GPU (or rank) sends in one direction while every other one does too.
struct LinkProfile {
  double bandwidth_gbs = 0;  // 10^9 bytes/s
  double latency_us = 0;     // per message (a collective's step)
};

// A machine type as configs/hardware/*.yaml describes it (every number there has its source).
struct HardwareProfile {
  std::string name;         // the file's `name`
  std::string path;         // the file it was read from
  bool gpu = true;          // device: gpu (the CUDA backend's memory) or cpu (host memory)
  double memory_gib = 0;    // per device (GPU), or per node (cpu: shared by its ranks)
  double reserved_gib = 0;  // of it, kept by the runtime (CUDA context, communicator buffers)
  double memory_bandwidth_gbs = 0;
  double peak_tflops_16bit = 0;  // dense bf16/fp16
  double peak_tflops_fp32 = 0;   // what fp32 matrix products run at on this backend
  double gemm_efficiency = 0;       // share of peak the model's matrix products sustain
  // Streaming multiprocessors a matrix product's tiles are spread over, one tile each at a time:
  // a product whose tiles leave the last wave partly empty (or whose edges fill tiles partly) runs
  // below gemm_efficiency. 0: no such loss (CPUs, and profiles whose gemm_efficiency was measured
  // at the model's own shapes, where it is already in the rate).
  int multiprocessors = 0;
  double attention_efficiency = 0;  // share of peak a fused attention core sustains
  // How the attention core runs: fused (tiles of the scores in on-chip memory, as strata's kernels
  // and FlashAttention), or unfused (the scores stored in device memory and passed over by the
  // softmax and the attention dropout, as Megatron-LM of 2021 and eager PyTorch compute it).
  bool attention_unfused = false;
  double memory_efficiency = 0;     // share of memory_bandwidth elementwise kernels sustain
  double op_overhead_us = 0;        // per kernel (launch and tail)
  int gpus_per_node = 1;            // ranks per node (cpu: the ranks a node runs)
  LinkProfile intra_node, inter_node;
  double host_link_gbs = 0;               // host <-> device, per GPU
  double host_memory_gib = 0;             // per node
  double host_memory_bandwidth_gbs = 0;   // per node
};

// `name_or_path`: a file, or a profile name looked up in STRATA_HARDWARE_DIR, then beside the
// executable (../share/strata/hardware, ../../configs/hardware). UserError naming the known
// profiles for an unknown name, and every missing or invalid field of a file.
HardwareProfile load_hardware_profile(const std::string& name_or_path);
// The profile names found where load_hardware_profile looks.
std::vector<std::string> known_hardware_profiles();
// The profile as a file load_hardware_profile reads (calibration writes it), with `sources`
// as the comment of each measured line.
std::string hardware_profile_yaml(const HardwareProfile& hw, const std::string& source);

// ---- layouts -----------------------------------------------------------------------------------
struct Layout {
  int dp = 1, tp = 1, pp = 1;
  bool sp = false;
  PipeSchedule schedule = PipeSchedule::OneFOneB;
  int virtual_stages = 1;
  int micro_batch = 1, grad_accum = 1;
  int zero_stage = 0;
  ActivationRecompute recompute = ActivationRecompute::None;
  OffloadDevice offload_optimizer = OffloadDevice::None;
  OffloadDevice offload_param = OffloadDevice::None;
};
// The layout a resolved config trains with.
Layout layout_of(const Config& cfg);
// `cfg` re-resolved for `layout` on layout.dp × tp × pp ranks; UserError when the config refuses it.
// overlap_comm: zero_optimization.overlap_comm as the user gave it (unset: each stage's default).
Config config_for_layout(const Config& cfg, const Layout& layout, std::optional<bool> overlap_comm = std::nullopt);
// The same as `--set key=value` overrides of the config file (what `sweep.sh --from-plan` runs):
// loading the file with them at dp × tp × pp ranks gives config_for_layout's config.
std::vector<std::string> layout_overrides(const Config& cfg, const Layout& layout,
                                          std::optional<bool> overlap_comm = std::nullopt);
// "dp 4 tp 2 pp 2 (interleaved v2) sp mb 2 ga 8 zero 1 recompute selective offload cpu"
std::string describe_layout(const Layout& layout);

// ---- prediction ----------------------------------------------------------------------------
// Seconds per optimizer step on the slowest rank, by part. compute: forward, backward and
// recompute of every micro-batch; bubble: the pipeline's idle time over it (schedule tables);
// dp_comm: the data-parallel/ZeRO collectives' time, of which dp_hidden runs under backward.
struct StepTime {
  double compute = 0, tp_comm = 0, pp_comm = 0, bubble = 0, dp_comm = 0, dp_hidden = 0;
  double optimizer = 0, offload = 0;
  double total() const { return compute + tp_comm + pp_comm + bubble + dp_comm - dp_hidden + optimizer + offload; }
};

struct Prediction {
  Layout layout;
  Config config;
  MemoryRecord memory;       // the start-up estimate (worst stage)
  int64_t memory_limit = 0;  // what a rank may use on this hardware (bytes)
  int64_t host_limit = 0;    // host memory per rank (bytes)
  bool fits = false;
  StepTime time;
  double tokens_per_s = 0;
  // FLOPs computed per step (forward, backward and recomputed forward; attention counted whole,
  // as Narayanan et al. 2021's Eq. 3 counts it) per GPU per second.
  double tflops_per_gpu = 0;
  double mfu = 0;  // tflops_per_gpu over the profile's 16-bit (or fp32) peak
};

// Which axes a plan varies; a held one keeps the config's value.
struct PlanAxes {
  bool parallel = true;   // dp × tp × pp
  bool schedule = true;   // schedule and virtual stages
  bool sp = true;
  bool micro_batch = true;
  bool zero = true;
  bool recompute = true;
  bool offload = true;
};
// Parses "--keep" names (tp, pp, dp = the grid; schedule, sp, micro_batch, zero, recompute,
// offload), comma-separated; UserError for an unknown one.
PlanAxes plan_axes_keeping(const std::string& kept);

struct PlanRequest {
  int gpus = 1;
  int gpus_per_node = 0;  // 0: the profile's
  bool tp_across_nodes = false;
  PlanAxes axes;
  std::optional<bool> overlap_comm;  // as the user gave it (unset: each stage's default)
};

// Prediction for the config's own layout (strata plan --explain).
Prediction predict_layout(const Config& cfg, const HardwareProfile& hw, int gpus_per_node);
// Every layout of `gpus` ranks for the config's model and global batch that the config accepts,
// predicted; those that fit first, fastest first. `considered` gets how many were tried, and
// `refusal` the config's reason for the first one it refused ("" when none was).
std::vector<Prediction> plan_layouts(const Config& cfg, const HardwareProfile& hw, const PlanRequest& request,
                                     int* considered = nullptr, std::string* refusal = nullptr);

// ---- the subcommand ----------------------------------------------------------------------------
struct PlanOptions {
  std::string config_path;
  std::vector<std::string> overrides;
  int gpus = 0;  // required (with --explain too: the config's DP comes from it)
  int gpus_per_node = 0;
  std::string hardware;  // "": h100-sxm
  int top = 0;           // 0: 5
  std::string write_path;
  std::string keep;
  bool tp_across_nodes = false;
  bool explain = false;
  bool json = false;
  bool calibrate = false;  // measure this machine and write a profile to calibrate_out
  std::string calibrate_out;
};
int run_plan(const MpiRuntime* mpi, const PlanOptions& options);

}  // namespace strata
