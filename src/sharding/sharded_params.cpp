// ZeRO stage 3: one partition unit per layer group, so that a group is one all-gather when the
// model reaches it and one reduce-scatter when backward releases its gradient (both inside the
// ShardedParamStore); AdamW on the owned shard, whose fp32 values are the master.
#include "sharding/strategies.h"

namespace strata {
namespace {

std::vector<FlatRange> group_units(const std::vector<LayerGroup>& groups) {
  std::vector<FlatRange> units;
  for (const LayerGroup& g : groups) units.push_back({g.begin, g.end});
  return units;
}

// Whether the layer group after (or before) `group` can ever be gathered while `group` is in use.
bool can_prefetch_after(const Stage3Bounds& b, const std::vector<LayerGroup>& groups, const Stage3Plan& plan,
                        size_t group, size_t next) {
  if (plan.persistent[group] || plan.persistent[next] || groups[next].numel() == 0) return false;
  return groups[next].numel() <= b.prefetch_bucket_size &&
         groups[group].numel() + groups[next].numel() <= b.max_live_parameters;
}

// The owned runs cut where layer groups meet: with the parameters in a file each group's piece is
// a record of its own, so no piece of the host update may span two.
std::vector<OwnedRun> runs_per_group(const std::vector<OwnedRun>& runs, const std::vector<PartitionUnit>& units) {
  std::vector<OwnedRun> cut;
  for (const OwnedRun& r : runs) {
    for (const PartitionUnit& u : units) {
      const int64_t lo = std::max(r.shard_offset, u.shard_offset);
      const int64_t hi = std::min(r.shard_offset + r.count, u.shard_offset + u.piece);
      if (hi > lo) cut.push_back({r.flat_begin + (lo - r.shard_offset), lo, hi - lo});
    }
  }
  return cut;
}

}  // namespace

Stage3Plan plan_stage3(const Stage3Bounds& bounds, const std::vector<ParamSpec>& specs,
                       const std::vector<LayerGroup>& groups) {
  Stage3Plan plan;
  plan.persistent.assign(groups.size(), false);
  if (bounds.param_persistence_threshold > 0) {
    std::vector<int64_t> largest(groups.size(), 0);
    for (const ParamSpec& spec : specs) {
      const size_t g = static_cast<size_t>(param_group(spec));
      if (g < groups.size()) largest[g] = std::max(largest[g], spec.numel);
    }
    for (size_t g = 0; g < groups.size(); ++g) {
      const int64_t n = groups[g].numel();
      if (n == 0 || largest[g] > bounds.param_persistence_threshold) continue;
      if (plan.persistent_elements + n > bounds.model_persistence_threshold) continue;
      plan.persistent[g] = true;
      plan.persistent_elements += n;
    }
  }
  // Layer groups (1 and up) follow one another in both passes; the embeddings have a slot of
  // their own.
  bool any = false;
  for (size_t g = 1; g + 1 < groups.size() && !any; ++g) {
    any = can_prefetch_after(bounds, groups, plan, g, g + 1) || can_prefetch_after(bounds, groups, plan, g + 1, g);
  }
  plan.layer_slots = any ? 2 : 1;
  return plan;
}

ShardedParams::ShardedParams(const ShardingPlace& place, const ShardingSettings& settings)
    : backend_(*place.backend), settings_(settings) {
  partition_ = std::make_unique<FlatPartition>(group_units(*place.groups), place.dp->size(), place.dp->rank());
  store_ = std::make_unique<ShardedParamStore>(backend_, *place.dp, *place.groups, *partition_, settings.overlap_comm,
                                               place.comm_wait_seconds, settings.precision, settings.comm_dtype,
                                               settings.stage3,
                                               plan_stage3(settings.stage3, *place.specs, *place.groups),
                                               settings.offload);
  const std::vector<OwnedRun> owned = partition_->owned_runs();
  if (settings.offload.optimizer) {
    const bool per_group = settings.offload.params && !settings.offload.params_nvme_path.empty();
    host_ = std::make_unique<HostOptimizerState>(backend_, settings.offload,
                                                 per_group ? runs_per_group(owned, partition_->units()) : owned,
                                                 partition_->shard_numel(), settings.precision);
    optimizer_ = host_->make_optimizer(settings.adamw, shard_ranges(*place.specs, owned));
  } else {
    optimizer_ = std::make_unique<AdamW>(backend_, settings.adamw, shard_ranges(*place.specs, owned),
                                         partition_->shard_numel());
  }
  norm_runs_ = tp_norm_runs(*place.specs, owned, place.tp_size);
}

ShardedParams::~ShardedParams() = default;

void ShardedParams::finish_pipeline(const std::function<void(const Tensor&)>& sum_tied) {
  store_->finish_reductions();
  // Both stages lay the embeddings' group out alike, so their DP ranks own the same piece.
  const PartitionUnit& u = partition_->units()[0];
  sum_tied(f32_view(store_->grads().f32(), u.shard_offset, u.piece, backend_.device()));
}

void ShardedParams::update(float lr, float grad_multiplier) {
  store_->wait_gathers();  // they read the working shard, which the fused update overwrites
  if (host_) {
    host_->update(*optimizer_, grads(), store_->gather_source(), lr, grad_multiplier, store_->working_sink());
    refresh_working(true);
    return;
  }
  optimizer_->step(store_->params(), grads(), lr, grad_multiplier, store_->working_params());
  refresh_working(settings_.precision != DType::F32);
}

void ShardedParams::refresh_working(bool working_current) {
  store_->invalidate_params();  // before the cast or upload: gathers read the working shard
  if (working_current) return;
  if (host_) {
    host_->loaded(store_->gather_source(), store_->working_sink());
  } else if (settings_.precision != DType::F32) {
    backend_.cast(store_->params(), store_->working_params());
  }
}

std::vector<FlatSpan> ShardedParams::owned_spans(float* shard) const {
  return spans_of(partition_->owned_runs(), nullptr, shard);
}

std::vector<FlatSpan> ShardedParams::host_spans(StateKind kind) {
  return host_->spans(kind, *optimizer_, partition_->owned_runs());
}

std::vector<FlatSpan> ShardedParams::held_spans(StateKind kind) {
  return host_ ? host_spans(kind) : saved_spans(kind);
}

std::vector<FlatSpan> ShardedParams::saved_spans(StateKind kind) {
  if (host_) return host_spans(kind);
  switch (kind) {
    case StateKind::Params: return owned_spans(store_->params().f32());
    case StateKind::ExpAvg: return owned_spans(optimizer_->exp_avg().f32());
    case StateKind::ExpAvgSq: return owned_spans(optimizer_->exp_avg_sq().f32());
  }
  return {};
}

std::vector<FlatSpan> ShardedParams::gradient_spans() { return owned_spans(store_->grads().f32()); }

MemoryRecord ShardedParams::memory() const {
  MemoryRecord m;
  m.params = store_->persistent_param_bytes();
  m.grads = partition_->shard_numel() * static_cast<int64_t>(sizeof(float));
  m.optimizer = host_ ? 0 : static_cast<int64_t>(optimizer_->state_bytes()) + store_->master_param_bytes();
  m.workspace = store_->workspace_bytes();
  if (host_) host_->add_to(m);
  m.host += store_->host_param_bytes();
  m.nvme += store_->nvme_param_bytes();
  return m;
}

MemoryRecord ShardedParams::estimate(const ShardingSettings& settings, const LayoutSize& size, const Stage3Plan& plan) {
  const int64_t w = static_cast<int64_t>(dtype_size(settings.precision)), f = sizeof(float);
  MemoryRecord m;
  // The shard (in host memory when offloaded), and the groups kept whole.
  const OffloadSettings& o = settings.offload;
  m.params = (o.params ? 0 : size.shard * w) + plan.persistent_elements * w;
  if (o.params && o.params_nvme_path.empty()) m.host += size.shard * w;
  if (o.params && !o.params_nvme_path.empty()) {
    m.nvme += size.shard * w;
    const int64_t largest = (std::max(size.embedding_group, size.widest_group) + size.dp - 1) / size.dp;
    const int64_t ring = ParamFile::ring_bytes(o.params_buffer_count, largest, settings.precision);
    m.host += ring;
    m.host_buffers += ring;
  }
  m.grads = size.shard * f;
  if (settings.offload.optimizer) {
    HostOptimizerState::estimate(settings.offload, size.shard, settings.precision, m);
  } else {
    m.optimizer = 2 * size.shard * f + (settings.precision != DType::F32 ? size.shard * f : 0);
  }
  // The reduce-scatter landing area (none at DP 1 in fp32, where gradients are added in place),
  // and the gathered groups: the embeddings in one slot, the others in two (one when nothing can
  // be prefetched) for parameters, two for gradients.
  const bool folds = size.dp == 1 && settings.comm_dtype == DType::F32;
  m.workspace = (folds ? 0 : size.shard * f) + size.embedding_group * (w + f) +
                size.widest_group * (plan.layer_slots * w + 2 * f);
  // A 16-bit comm_dtype: twins of the gradient slots and of the landing area.
  const int64_t c = static_cast<int64_t>(dtype_size(settings.comm_dtype));
  if (settings.comm_dtype != DType::F32) m.workspace += (size.shard + size.embedding_group + 2 * size.widest_group) * c;
  return m;
}

}  // namespace strata
