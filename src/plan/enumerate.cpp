// The planner's search: every DP × TP × PP grid of the GPUs (TP inside a node unless asked),
// every schedule and interleave the layers allow, SP, every micro-batch that divides the global
// batch, ZeRO 0-3 and each recompute mode; offload only where nothing fits without it (it never
// makes a step faster). The config's own rules decide what is valid.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <tuple>

#include "core/core.h"
#include "plan/plan.h"

namespace strata {
namespace {

// In increasing order, in √n steps (a global batch can be in the millions).
std::vector<int> divisors(int n) {
  std::vector<int> low, high;
  for (int k = 1; static_cast<int64_t>(k) * k <= n; ++k) {
    if (n % k != 0) continue;
    low.push_back(k);
    if (k != n / k) high.push_back(n / k);
  }
  low.insert(low.end(), high.rbegin(), high.rend());
  return low;
}

struct Grid {
  int dp, tp, pp;
};

std::vector<Grid> grids(const Config& cfg, const PlanRequest& req, int gpn) {
  if (!req.axes.parallel) return {{cfg.derived.dp_size, cfg.derived.tp_size, cfg.derived.pp_size}};
  std::vector<Grid> out;
  for (int tp : divisors(req.gpus)) {
    if (!req.tp_across_nodes && (tp > gpn || gpn % tp != 0)) continue;  // a TP group inside one node
    if (*cfg.model.n_head % tp != 0) continue;
    for (int pp : divisors(req.gpus / tp)) {
      if (pp > *cfg.model.n_layer) continue;
      const int dp = req.gpus / (tp * pp);
      if (cfg.derived.global_batch % dp != 0) continue;
      out.push_back({dp, tp, pp});
    }
  }
  return out;
}

// (schedule, virtual stages) for pp stages: 1F1B, GPipe, and interleaving over every chunk count
// (up to 8) that splits the layers evenly.
std::vector<std::pair<PipeSchedule, int>> schedules(const Config& cfg, const PlanRequest& req, int pp) {
  if (pp == 1) return {{PipeSchedule::OneFOneB, 1}};
  if (!req.axes.schedule) {  // the config's schedule (its interleave may not split the layers: then none)
    const auto& pl = cfg.parallelism.pipeline;
    return {{pl.schedule, pl.schedule == PipeSchedule::Interleaved ? pl.virtual_stages : 1}};
  }
  // GPipe is not searched: the schedule tables give it 1F1B's bubble with every micro-batch's
  // activations held, so it is never faster and never smaller (a config's own is kept above).
  std::vector<std::pair<PipeSchedule, int>> out = {{PipeSchedule::OneFOneB, 1}};
  const int n_layer = *cfg.model.n_layer;
  // Up to 8 chunks per stage: past that the extra sends outweigh the smaller bubble.
  for (int v = 2; v <= 8 && pp * v <= n_layer; ++v) {
    if (n_layer % (pp * v) == 0) out.push_back({PipeSchedule::Interleaved, v});
  }
  return out;
}

template <typename T>
std::vector<T> axis(bool vary, std::vector<T> all, T kept) {
  return vary ? all : std::vector<T>{kept};
}

}  // namespace

std::vector<Prediction> plan_layouts(const Config& cfg, const HardwareProfile& hw, const PlanRequest& req,
                                     int* considered, std::string* refusal) {
  if (refusal) refusal->clear();
  const int gpn = req.gpus_per_node > 0 ? req.gpus_per_node : hw.gpus_per_node;
  const Layout own = layout_of(cfg);
  std::vector<Prediction> out;
  int tried = 0;
  const std::vector<ActivationRecompute> recomputes = axis(
      req.axes.recompute, {ActivationRecompute::None, ActivationRecompute::Selective, ActivationRecompute::Full},
      own.recompute);
  const std::vector<int> stages = axis(req.axes.zero, {0, 1, 2, 3}, own.zero_stage);
  for (const Grid& g : grids(cfg, req, gpn)) {
    const int per_replica = cfg.derived.global_batch / g.dp;
    const std::vector<int> micro = axis(req.axes.micro_batch, divisors(per_replica), own.micro_batch);
    const std::vector<bool> sps = g.tp > 1 ? axis(req.axes.sp, {false, true}, own.sp) : std::vector<bool>{false};
    for (const auto& [schedule, v] : schedules(cfg, req, g.pp)) {
      for (int mb : micro) {
        if (per_replica % mb != 0) continue;
        for (bool sp : sps) {
          for (int zero : stages) {
            for (ActivationRecompute rc : recomputes) {
              Layout l{g.dp, g.tp, g.pp, sp, schedule, v, mb, per_replica / mb, zero, rc,
                       req.axes.offload ? OffloadDevice::None : own.offload_optimizer,
                       req.axes.offload ? OffloadDevice::None : own.offload_param};
              // Offloading only where the layout does not fit without it: the optimizer state
              // first, then (ZeRO 3) the parameters too.
              std::vector<std::pair<OffloadDevice, OffloadDevice>> offloads = {{l.offload_optimizer, l.offload_param}};
              if (req.axes.offload && hw.gpu && zero >= 1) offloads.push_back({OffloadDevice::Cpu, OffloadDevice::None});
              if (req.axes.offload && hw.gpu && zero == 3) offloads.push_back({OffloadDevice::Cpu, OffloadDevice::Cpu});
              for (const auto& [opt, param] : offloads) {
                l.offload_optimizer = opt;
                l.offload_param = param;
                ++tried;
                Config c;
                try {
                  c = config_for_layout(cfg, l, req.overlap_comm);
                } catch (const UserError& e) {
                  if (refusal && refusal->empty()) *refusal = first_message(e);
                  continue;  // the config's rules refuse this combination
                }
                Prediction p = predict_layout(c, hw, gpn);
                const bool fits = p.fits;
                // ZeRO at DP 1 shards nothing: the same layout as stage 0, unless it carries offload.
                const bool as_stage_0 = g.dp == 1 && zero > 0 && req.axes.zero && opt == OffloadDevice::None &&
                                        param == OffloadDevice::None;
                if (!as_stage_0) out.push_back(std::move(p));
                if (fits) break;
              }
            }
          }
        }
      }
    }
  }
  if (considered) *considered = tried;
  // Speeds within half a percent of a group's fastest are a tie (the model is not that exact):
  // the simpler layout first, i.e. the lower ZeRO stage, less recompute, no offload, fewer
  // pipeline stages, fewer micro-batches per step (the model's one GEMM rate does not credit a
  // larger micro-batch's better efficiency), less memory. Groups are formed from the fastest
  // down, so two layouts a hair apart are never split by a fixed step between them.
  std::stable_sort(out.begin(), out.end(), [](const Prediction& a, const Prediction& b) {
    if (a.fits != b.fits) return a.fits;
    if (!a.fits) return a.memory.total() < b.memory.total();
    return a.tokens_per_s > b.tokens_per_s;
  });
  const auto simplicity = [](const Prediction& p) {
    const Layout& l = p.layout;
    return std::make_tuple(l.zero_stage, static_cast<int>(l.recompute), static_cast<int>(l.offload_optimizer),
                           static_cast<int>(l.offload_param), l.pp, l.tp, l.grad_accum, p.memory.total());
  };
  for (auto group = out.begin(); group != out.end() && group->fits;) {
    const double floor = group->tokens_per_s / 1.005;
    auto end = std::find_if(group, out.end(), [&](const Prediction& p) { return !p.fits || p.tokens_per_s < floor; });
    std::stable_sort(group, end, [&](const Prediction& a, const Prediction& b) { return simplicity(a) < simplicity(b); });
    group = end;
  }
  return out;
}

}  // namespace strata
