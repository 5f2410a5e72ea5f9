// ZeRO stage 0: every DP rank holds the whole gradient (all-reduced bucket by bucket), the whole
// Adam state and, under mixed precision, the whole fp32 master; the update runs on the flat
// layout and rounds into the model's working copy in the same pass.
#include "sharding/strategies.h"

namespace strata {

Replicated::Replicated(const ShardingPlace& place, const ShardingSettings& settings)
    : FlatStrategy(place, settings, {{0, place.specs->back().offset + place.specs->back().numel}}) {
  const int64_t n = numel();
  set_buckets(make_buckets(n, settings.reduce_bucket_size, dp_.size()), /*unit_of_each=*/false);
  // Every rank holds the same gradient and counts all of it.
  norm_runs_ = tp_norm_runs(specs_, {{0, 0, n}}, place.tp_size);
  if (mixed()) master_ = backend_.allocate(static_cast<size_t>(store_->capacity()) * sizeof(float));
  optimizer_ = std::make_unique<AdamW>(backend_, settings.adamw, flat_ranges(specs_), n);
}

void Replicated::begin_step() { backend_.zero(store_->grads()); }

CommHandle Replicated::issue(const Bucket& b) {
  widen_ = narrow_comm();
  return dp_.all_reduce_async(reduction_input(b.range.begin, b.range.numel()), ReduceOp::Sum);
}

void Replicated::after_reductions() {
  if (!widen_) return;
  // The buckets cover the flat layout: widen it whole.
  backend_.cast(flat_twin(0, numel()), f32_view(flat_grads(), 0, numel(), device()));
  widen_ = false;
}

void Replicated::finish_pipeline(const std::function<void(const Tensor&)>& sum_tied) {
  sum_tied(embedding_grads());  // before the DP reduction, which then carries the sum
  issue_all_reductions();
}

Tensor Replicated::master() const {
  return mixed() ? master_.view(0, DType::F32, {numel()}) : store_->params();
}

Tensor Replicated::working() const {
  const Tensor flat = store_->padded_params();
  return Tensor(flat.data, flat.dtype, {numel()}, flat.device);
}

void Replicated::update(float lr, float grad_multiplier) {
  // Under mixed precision the update also writes the working copy; padding is zero in both.
  optimizer_->step(master(), grads(), lr, grad_multiplier, mixed() ? working() : Tensor());
  refresh_working(mixed());
}

void Replicated::refresh_working(bool working_current) {
  // fp32: the model's flat parameters are the master. Padding is zero in both copies from the
  // start, so the unpadded layout is all there is to round.
  if (mixed() && !working_current) backend_.cast(master(), working());
}

float* Replicated::state(StateKind kind) const {
  switch (kind) {
    case StateKind::Params: return master().f32();
    case StateKind::ExpAvg: return optimizer_->exp_avg().f32();
    case StateKind::ExpAvgSq: return optimizer_->exp_avg_sq().f32();
  }
  return nullptr;
}

std::vector<FlatSpan> Replicated::saved_spans(StateKind kind) { return owned_spans(state(kind), nullptr); }

std::vector<FlatSpan> Replicated::held_spans(StateKind kind) { return {{0, numel(), state(kind)}}; }

MemoryRecord Replicated::memory() const {
  MemoryRecord m;
  m.params = store_->capacity() * static_cast<int64_t>(dtype_size(settings_.precision));
  m.grads = store_->capacity() * static_cast<int64_t>(sizeof(float));
  m.optimizer = static_cast<int64_t>(optimizer_->state_bytes() + master_.bytes());
  m.workspace = twin_bytes();
  return m;
}

MemoryRecord Replicated::estimate(const ShardingSettings& settings, const LayoutSize& size) {
  const int64_t w = static_cast<int64_t>(dtype_size(settings.precision)), f = sizeof(float);
  MemoryRecord m;
  m.params = size.padded * w;
  m.grads = size.padded * f;
  m.optimizer = 2 * size.n * f + (settings.precision != DType::F32 ? size.padded * f : 0);
  m.workspace = settings.comm_dtype != DType::F32 ? size.padded * static_cast<int64_t>(dtype_size(settings.comm_dtype)) : 0;
  return m;
}

}  // namespace strata
