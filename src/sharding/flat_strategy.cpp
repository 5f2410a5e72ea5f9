// The flat store's bucketed gradient reduction that ZeRO 0-2 share (issued as backward completes
// each bucket's lowest layer group when overlapping, else after backward, and waited for before
// the reduced gradient is read), the helpers every strategy uses, and the choice of a strategy
// (make_sharding_strategy, and its memory estimate).
#include <algorithm>
#include <stdexcept>
#include <string>

#include "sharding/strategies.h"

namespace strata {

std::vector<ParamRange> shard_ranges(const std::vector<ParamSpec>& specs, const std::vector<OwnedRun>& runs) {
  std::vector<ParamRange> ranges;
  for (const OwnedRun& run : runs) {
    for (const SpecSlice& s : slices_by_spec(specs, run.flat_begin, run.count)) {
      ranges.push_back({run.shard_offset + s.span_offset, s.count, s.spec->weight_decay});
    }
  }
  return ranges;
}

std::vector<ParamRange> flat_ranges(const std::vector<ParamSpec>& specs) {
  std::vector<ParamRange> ranges;
  for (const ParamSpec& spec : specs) ranges.push_back({spec.offset, spec.numel, spec.weight_decay});
  return ranges;
}

std::vector<FlatSpan> spans_of(const std::vector<OwnedRun>& runs, float* flat, float* shard) {
  std::vector<FlatSpan> spans;
  for (const OwnedRun& r : runs) {
    spans.push_back({r.flat_begin, r.count, flat ? flat + r.flat_begin : shard + r.shard_offset});
  }
  return spans;
}

std::unique_ptr<ShardingStrategy> make_sharding_strategy(const ShardingPlace& place, const ShardingSettings& settings) {
  if (!place.backend || !place.dp || !place.specs || !place.groups || !place.comm_wait_seconds) {
    throw std::logic_error("make_sharding_strategy: an incomplete ShardingPlace");
  }
  switch (settings.zero_stage) {
    case 0: return std::make_unique<Replicated>(place, settings);
    case 1: return std::make_unique<ShardedState>(place, settings, /*reduce_every_micro_batch=*/false);
    case 2: return std::make_unique<ShardedState>(place, settings, /*reduce_every_micro_batch=*/true);
    case 3: return std::make_unique<ShardedParams>(place, settings);
    default:
      throw UserError("zero_optimization.stage: " + std::to_string(settings.zero_stage) +
                      " is not a ZeRO stage (0-3)");
  }
}

MemoryRecord estimate_sharding_memory(const ShardingSettings& settings, const std::vector<ParamSpec>& specs,
                                      const std::vector<LayerGroup>& groups, int dp_size) {
  LayoutSize size;
  size.n = specs.back().offset + specs.back().numel;
  size.padded = round_up(size.n, dp_size);
  size.shard = size.padded / dp_size;
  size.dp = dp_size;
  size.embedding_group = groups[0].numel();
  for (size_t g = 1; g < groups.size(); ++g) size.widest_group = std::max(size.widest_group, groups[g].numel());
  switch (settings.zero_stage) {
    case 0: return Replicated::estimate(settings, size);
    case 1: return ShardedState::estimate(settings, size, /*every_micro_batch=*/false);
    case 2: return ShardedState::estimate(settings, size, /*every_micro_batch=*/true);
    case 3: return ShardedParams::estimate(settings, size, plan_stage3(settings.stage3, specs, groups));
    default:
      throw UserError("zero_optimization.stage: " + std::to_string(settings.zero_stage) +
                      " is not a ZeRO stage (0-3)");
  }
}

FlatStrategy::FlatStrategy(const ShardingPlace& place, const ShardingSettings& settings,
                           const std::vector<FlatRange>& units)
    : backend_(*place.backend), dp_(*place.dp), specs_(*place.specs), groups_(*place.groups), settings_(settings),
      comm_wait_(place.comm_wait_seconds) {
  const int p = dp_.size();
  partition_ = std::make_unique<FlatPartition>(units, p, dp_.rank());
  store_ = std::make_unique<FlatParamStore>(backend_, specs_, round_up(partition_->numel(), p), settings.precision);
  if (narrow_comm())
    flat_twin_ = backend_.allocate(static_cast<size_t>(store_->capacity()) * dtype_size(settings.comm_dtype));
}

Tensor FlatStrategy::flat_twin(int64_t begin, int64_t count) const {
  return flat_twin_.view(static_cast<size_t>(begin) * dtype_size(settings_.comm_dtype), settings_.comm_dtype, {count});
}

Tensor FlatStrategy::reduction_input(int64_t begin, int64_t count) {
  const Tensor fp32 = f32_view(flat_grads(), begin, count, device());
  if (!narrow_comm()) return fp32;
  const Tensor twin = flat_twin(begin, count);
  backend_.cast(fp32, twin);
  return twin;
}

FlatStrategy::~FlatStrategy() {
  // Reductions in flight still write into the store: let them land before it is freed.
  for (CommHandle& h : in_flight_) {
    if (h) h->wait();
  }
}

void FlatStrategy::set_buckets(const std::vector<FlatRange>& ranges, bool unit_of_each) {
  // Under a pipeline every bucket is reduced after the schedule, so readiness plays no part.
  for (size_t k = ranges.size(); k-- > 0;) {
    buckets_.push_back({ranges[k], unit_of_each ? k : 0, settings_.pipelined ? 0 : lowest_group(ranges[k], groups_)});
  }
  in_flight_.resize(buckets_.size());
}

void FlatStrategy::begin_micro_batch(bool last) {
  before_micro_batch();
  reducing_ = reduces_every_micro_batch() || last;
  next_bucket_ = 0;
}

void FlatStrategy::grad_ready(int group) {
  if (!reducing_ || !settings_.overlap_comm) return;
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].lowest_group >= group) {
    issue_reduction(next_bucket_++);
  }
  for (CommHandle& h : in_flight_) {
    if (h) h->test();  // lets a progress-driven implementation move the earlier buckets along
  }
}

void FlatStrategy::end_micro_batch() {
  if (reducing_) {
    // Without overlap nothing was issued during backward; with it, whatever is left.
    while (next_bucket_ < buckets_.size()) issue_reduction(next_bucket_++);
    if (!settings_.overlap_comm) wait_reductions();
  }
  reducing_ = false;
}

void FlatStrategy::issue_reduction(size_t k) {
  in_flight_[k] = issue(buckets_[k]);
  if (!settings_.overlap_comm) {
    const Timer t;
    in_flight_[k]->wait();
    in_flight_[k].reset();
    *comm_wait_ += t.seconds();
  }
}

void FlatStrategy::issue_all_reductions() {
  for (size_t k = 0; k < buckets_.size(); ++k) issue_reduction(k);
  wait_reductions();
}

void FlatStrategy::wait_reductions() {
  const Timer t;
  for (CommHandle& h : in_flight_) {
    if (h) {
      h->wait();
      h.reset();
    }
  }
  *comm_wait_ += t.seconds();
  after_reductions();
}

void FlatStrategy::params_loaded() {
  // Loaded straight into the model's flat parameters when they are the master: current.
  if (!model_holds_master()) refresh_working(false);
}

Tensor FlatStrategy::embedding_grads() const {
  const LayerGroup& g = groups_[0];
  return f32_view(flat_grads(), g.begin, g.numel(), device());
}

std::vector<FlatSpan> FlatStrategy::owned_spans(float* flat, float* shard) const {
  return spans_of(partition_->owned_runs(), flat, shard);
}

}  // namespace strata
