// The global gradient norm: each rank's share of Σ g² (its ZeRO shard, or the whole flat gradient
// when replicated; under TP its slices, with parameters replicated over TP counted on TP rank 0 only)
// gathered over the world and summed in rank order, so that every rank gets the same bits. And
// the finiteness checks built on the same sums: which parameter's gradient or saved state holds
// an inf or NaN.
#include <algorithm>
#include <cmath>
#include <string>

#include "engine/engine.h"

namespace strata {

double Engine::grad_norm_squared_part(const Tensor& grads) {
  double sum = 0.0;
  for (const FlatRange& r : strategy_->norm_runs()) {
    sum += backend_.sum_squares(Tensor(grads.f32() + r.begin, DType::F32, {r.numel()}, grads.device));
  }
  return sum;
}

double Engine::grad_norm_squared(const Tensor& grads) {
  const int tp = tp_->size();
  if (tp == 1 && !pp_) {
    // Replicated over DP (stage 0): every rank computes the same sum over the same values.
    // Padding is zero, so a shard's sum of squares is exactly its owned part's.
    if (strategy_->grads_replicated()) return backend_.sum_squares(grads);
    double total = 0.0;
    for (double part : all_gather_doubles(scalars_, {backend_.sum_squares(grads)})) total += part;
    return total;
  }
  // Under TP and PP each rank holds other parameters. scalars_ orders the world TP fastest, then
  // DP, then PP: replicated over DP (stage 0), the replicas hold the same gradient, so one
  // replica's ranks (DP rank 0) count.
  const std::vector<double> parts = all_gather_doubles(scalars_, {grad_norm_squared_part(grads)});
  double total = 0.0;
  for (size_t r = 0; r < parts.size(); ++r) {
    const int dp_rank = static_cast<int>(r) / tp % dp_.size();
    if (!strategy_->grads_replicated() || dp_rank == 0) total += parts[r];
  }
  return total;
}

int64_t Engine::first_nonfinite_spec(const std::vector<FlatSpan>& spans) {
  // A span's one sum of squares settles the common case; only a non-finite span is searched.
  // Offloaded state is host memory, which the backend's ops do not read on a device.
  // State in a file is read a parameter at a time.
  std::vector<float> read;
  auto finite_at = [&](const FlatSpan& span, int64_t offset, int64_t count) {
    const float* data = nullptr;
    if (!span.data) {
      read.resize(static_cast<size_t>(count));
      span.read(offset, count, read.data());
      data = read.data();
    } else if (!span.on_host) {
      return std::isfinite(backend_.sum_squares(Tensor(span.data + offset, DType::F32, {count}, device())));
    } else {
      data = span.data + offset;
    }
    return std::all_of(data, data + count, [](float x) { return std::isfinite(x); });
  };
  int64_t first = -1;
  for (const FlatSpan& span : spans) {
    if (span.data && finite_at(span, 0, span.count)) continue;
    for (const SpecSlice& s : slices_by_spec(specs_, span.flat_begin, span.count)) {
      if (finite_at(span, s.span_offset, s.count)) continue;
      const int64_t index = spec_order_[static_cast<size_t>(s.spec - specs_.data())];
      if (first < 0 || index < first) first = index;
      break;
    }
  }
  int64_t global = -1;
  for (double index : all_gather_doubles(scalars_, {static_cast<double>(first)})) {
    if (index >= 0 && (global < 0 || index < global)) global = static_cast<int64_t>(index);
  }
  return global;
}

std::string Engine::first_nonfinite_gradient() {
  const int64_t index = first_nonfinite_spec(strategy_->gradient_spans());
  return index < 0 ? std::string() : model_param_names_[static_cast<size_t>(index)];
}

std::string Engine::first_nonfinite_state() {
  const std::pair<StateKind, const char*> kinds[] = {
      {StateKind::Params, "model."}, {StateKind::ExpAvg, "optim.exp_avg."}, {StateKind::ExpAvgSq, "optim.exp_avg_sq."}};
  for (const auto& [kind, prefix] : kinds) {
    const int64_t index = first_nonfinite_spec(strategy_->saved_spans(kind));
    if (index >= 0) return prefix + model_param_names_[static_cast<size_t>(index)];
  }
  return "";
}

}  // namespace strata
