// Predictions: a resolved config's memory (the trainer's own start-up estimate) and step time
// (time_model.cpp) on a hardware profile; and the planner's enumeration of every layout a
// config's model and global batch can be trained with on a number of GPUs.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/core.h"
#include "plan/plan_internal.h"
#include "train/train.h"

namespace strata {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

bool sixteen_bit(const Config& cfg) { return cfg.bf16.enabled || cfg.fp16.enabled; }

// Parameters of one chunk on one TP rank (layernorms counted as split: they are a rounding error).
double chunk_params(const Config& cfg, const ChunkShape& c) {
  const double h = *cfg.model.d_model, t = cfg.derived.tp_size, V = cfg.derived.padded_vocab;
  double n = c.layers * (12 * h * h + 13 * h) / t;
  if (c.embedding) n += V * h / t + cfg.model.seq_len * h;
  if (c.head) n += 2 * h + (c.embedding ? 0 : V * h / t);
  return n;
}

std::vector<StageShape> stage_shapes(const Config& cfg) {
  const int pp = cfg.derived.pp_size, n_layer = *cfg.model.n_layer;
  std::vector<StageShape> stages(static_cast<size_t>(pp));
  if (pp == 1) {
    stages[0].chunks = {{n_layer, true, true}};
  } else {
    const std::vector<ChunkLayers> parts = pipeline_partition_of(cfg);
    const int chunks = static_cast<int>(parts.size());
    for (int k = 0; k < chunks; ++k) {
      stages[static_cast<size_t>(k % pp)].chunks.push_back({parts[static_cast<size_t>(k)].count(), k == 0, k == chunks - 1});
    }
  }
  for (StageShape& st : stages) {
    for (const ChunkShape& c : st.chunks) st.params += chunk_params(cfg, c);
  }
  return stages;
}

ModelShape model_shape(const Config& cfg, const HardwareProfile& hw, int ranks_per_node) {
  const Derived& d = cfg.derived;
  ModelShape m;
  m.d_model = *cfg.model.d_model;
  m.n_head = *cfg.model.n_head;
  m.seq_len = cfg.model.seq_len;
  m.padded_vocab = d.padded_vocab;
  m.micro_batch = d.micro_batch;
  m.grad_accum = d.grad_accum;
  m.tp = d.tp_size;
  m.pp = d.pp_size;
  m.sp = cfg.parallelism.sequence_parallel && m.tp > 1;
  m.schedule = cfg.parallelism.pipeline.schedule;
  m.virtual_stages = m.schedule == PipeSchedule::Interleaved && m.pp > 1 ? cfg.parallelism.pipeline.virtual_stages : 1;
  m.recompute = cfg.model.recompute;
  m.elem_bytes = sixteen_bit(cfg) ? 2 : 4;
  // A CPU node's rates are shared by its ranks, and were measured with the profile's ranks per
  // node each running: fewer ranks do not get the rest (a rank's own passes use one core), so a
  // rank's share is at most that. The CPU backend computes in fp32 whatever it stores.
  const double share = hw.gpu ? 1 : std::max(ranks_per_node, hw.gpus_per_node);
  m.peak_tflops = (hw.gpu && sixteen_bit(cfg) ? hw.peak_tflops_16bit : hw.peak_tflops_fp32) / share;
  m.memory_bandwidth_gbs = hw.memory_bandwidth_gbs / share;
  return m;
}

// FLOPs per token as Narayanan et al. 2021 count them (their Eq. 3 with full recompute):
// forward 24h² + 4hs per layer (attention whole), backward twice that, a recomputed forward
// again (the attention core alone when selective), and the logits 6hV.
double flops_per_token(const Config& cfg) {
  const double h = *cfg.model.d_model, s = cfg.model.seq_len, l = *cfg.model.n_layer;
  const double V = cfg.derived.padded_vocab;
  const double layer = 24 * h * h + 4 * h * s;
  double recompute = 0;
  if (cfg.model.recompute == ActivationRecompute::Full) recompute = layer;
  if (cfg.model.recompute == ActivationRecompute::Selective) recompute = 4 * h * s;
  return l * (3 * layer + recompute) + 6 * h * V;
}

// Where one kind of group sits on nodes of gpn ranks (`groups` groups of `size` ranks, group g's
// i-th rank first(g) + i·stride): whether a group spans nodes, and the fewest ranks such a group
// has on one node, where its ring has that many network interfaces to cross on.
struct GroupPlacement {
  bool across_nodes = false;
  int ranks_per_node = 1;
};
template <typename First>
GroupPlacement place_groups(int groups, int size, int stride, int gpn, const First& first) {
  GroupPlacement out;
  int fewest = std::numeric_limits<int>::max();
  for (int g = 0; g < groups; ++g) {
    int node = -1, run = 0, runs = 0, least = std::numeric_limits<int>::max();
    for (int i = 0; i < size; ++i) {
      const int n = (first(g) + i * stride) / gpn;
      if (n != node) {
        if (run > 0) least = std::min(least, run);
        node = n, run = 0, ++runs;
      }
      ++run;
    }
    least = std::min(least, run);
    if (runs > 1) out.across_nodes = true, fewest = std::min(fewest, least);
  }
  if (out.across_nodes) out.ranks_per_node = fewest;
  return out;
}

}  // namespace

Prediction predict_layout(const Config& cfg, const HardwareProfile& hw, int gpus_per_node) {
  const Derived& d = cfg.derived;
  const int gpn = gpus_per_node > 0 ? gpus_per_node : hw.gpus_per_node;
  const int ranks_per_node = std::min(d.world_size, gpn);
  Prediction p;
  p.config = cfg;
  p.layout = layout_of(cfg);
  p.memory = estimate_rank_memory(cfg, hw.gpu ? Device::CUDA : Device::CPU);
  const double usable = (hw.memory_gib - hw.reserved_gib) * kGiB;
  if (hw.gpu) {
    p.memory_limit = static_cast<int64_t>(usable);
    p.host_limit = static_cast<int64_t>(hw.host_memory_gib * kGiB / ranks_per_node);
    p.fits = p.memory.total() <= p.memory_limit && p.memory.host <= p.host_limit;
  } else {
    p.memory_limit = static_cast<int64_t>(usable / ranks_per_node);
    p.host_limit = p.memory_limit;
    p.fits = p.memory.total() + p.memory.host <= p.memory_limit;
  }
  ModelShape m = model_shape(cfg, hw, ranks_per_node);
  // Ranks are numbered TP fastest, then DP, then PP: rank = (pp·DP + dp)·TP + tp.
  const int tp = d.tp_size, dps = d.dp_size;
  const GroupPlacement tp_groups = place_groups(d.pp_size * dps, tp, 1, gpn, [tp](int g) { return g * tp; });
  const GroupPlacement dp_groups =
      place_groups(d.pp_size * tp, dps, tp, gpn, [tp, dps](int g) { return g / tp * dps * tp + g % tp; });
  m.tp_across_nodes = tp_groups.across_nodes;
  m.tp_ranks_per_node = tp_groups.ranks_per_node;
  // The slowest stage boundary sets the pace: one crosses nodes once the job spans several.
  m.pp_across_nodes = d.pp_size > 1 && d.world_size > gpn;
  m.layer_groups = *cfg.model.n_layer / d.pp_size + 1;
  DpShape dp;
  dp.ranks = d.dp_size;
  dp.zero_stage = cfg.zero_optimization.stage;
  dp.overlap_comm = cfg.zero_optimization.overlap_comm.value_or(false);
  dp.across_nodes = dp_groups.across_nodes;
  dp.ranks_per_node = dp_groups.ranks_per_node;
  dp.comm_bytes = static_cast<double>(dtype_size(cfg.communication_data_type));
  dp.bucket_elements = static_cast<double>(cfg.zero_optimization.reduce_bucket_size);
  dp.offload_optimizer = cfg.zero_optimization.offload_optimizer.device != OffloadDevice::None;
  dp.offload_param = cfg.zero_optimization.offload_param.device != OffloadDevice::None;
  p.time = step_time(m, hw, stage_shapes(cfg), dp);
  const double step = p.time.total();
  p.tokens_per_s = static_cast<double>(d.tokens_per_step) / step;
  p.tflops_per_gpu = p.tokens_per_s * flops_per_token(cfg) / d.world_size / 1e12;
  p.mfu = p.tflops_per_gpu / m.peak_tflops;
  return p;
}

}  // namespace strata
