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

}  // namespace

ShardedParams::ShardedParams(const ShardingPlace& place, const ShardingSettings& settings)
    : backend_(*place.backend), settings_(settings) {
  partition_ = std::make_unique<FlatPartition>(group_units(*place.groups), place.dp->size(), place.dp->rank());
  store_ = std::make_unique<ShardedParamStore>(backend_, *place.dp, *place.groups, *partition_, settings.overlap_comm,
                                               place.comm_wait_seconds, settings.precision);
  const std::vector<OwnedRun> owned = partition_->owned_runs();
  optimizer_ =
      std::make_unique<AdamW>(backend_, settings.adamw, shard_ranges(*place.specs, owned), partition_->shard_numel());
  norm_runs_ = tp_norm_runs(*place.specs, owned, place.tp_size);
}

void ShardedParams::finish_pipeline(const std::function<void(const Tensor&)>& sum_tied) {
  store_->finish_reductions();
  // Both stages lay the embeddings' group out alike, so their DP ranks own the same piece.
  const PartitionUnit& u = partition_->units()[0];
  sum_tied(f32_view(store_->grads().f32(), u.shard_offset, u.piece, backend_.device()));
}

void ShardedParams::update(float lr, float grad_multiplier) {
  store_->wait_gathers();  // they read the working shard, which the fused update overwrites
  optimizer_->step(store_->params(), grads(), lr, grad_multiplier, store_->working_params());
  refresh_working(settings_.precision != DType::F32);
}

void ShardedParams::refresh_working(bool working_current) {
  store_->invalidate_params();  // before the cast: gathers read the working shard
  if (settings_.precision != DType::F32 && !working_current) backend_.cast(store_->params(), store_->working_params());
}

std::vector<FlatSpan> ShardedParams::owned_spans(float* shard) const {
  return spans_of(partition_->owned_runs(), nullptr, shard);
}

std::vector<FlatSpan> ShardedParams::saved_spans(StateKind kind) {
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
  m.optimizer = static_cast<int64_t>(optimizer_->state_bytes()) + store_->master_param_bytes();
  m.workspace = store_->workspace_bytes();
  return m;
}

MemoryRecord ShardedParams::estimate(const ShardingSettings& settings, const LayoutSize& size) {
  const int64_t w = static_cast<int64_t>(dtype_size(settings.precision)), f = sizeof(float);
  MemoryRecord m;
  m.params = size.shard * w;
  m.grads = size.shard * f;
  m.optimizer = 2 * size.shard * f + (settings.precision != DType::F32 ? size.shard * f : 0);
  // The reduce-scatter landing area, and the gathered groups: the embeddings in one slot, the
  // others in two, parameters and gradients each.
  m.workspace = size.shard * f + (size.embedding_group + 2 * size.widest_group) * (w + f);
  return m;
}

}  // namespace strata
