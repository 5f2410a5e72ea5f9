// The global gradient norm: each rank's share of Σ g² (its ZeRO shard, or the whole flat gradient
// at stage 0; under TP its slices, with parameters replicated over TP counted on TP rank 0 only)
// gathered over the world and summed in rank order, so that every rank gets the same bits. And
// the finiteness checks built on the same sums: which parameter's gradient or saved state holds
// an inf or NaN.
#include <algorithm>
#include <cmath>
#include <string>

#include "parallel/parallel.h"
#include "parallel/sharded_store.h"

namespace strata {

std::vector<FlatRange> tp_norm_runs(const std::vector<ParamSpec>& specs, const std::vector<OwnedRun>& runs,
                                    int tp_size) {
  std::vector<FlatRange> out;
  auto add = [&](int64_t begin, int64_t count) {
    if (count <= 0) return;
    if (!out.empty() && out.back().end == begin) {
      out.back().end += count;
    } else {
      out.push_back({begin, begin + count});
    }
  };
  for (const OwnedRun& run : runs) {
    for (const SpecSlice& s : slices_by_spec(specs, run.flat_begin, run.count)) {
      // The last pipeline stage's copy of the embeddings is the first stage's, counted there.
      const bool counted_here =
          !s.spec->tied_copy && (tp_size == 1 || s.spec->tp_sharded() || s.spec->tp_rank == 0);
      if (counted_here) add(run.shard_offset + s.span_offset, s.count);
    }
  }
  return out;
}

double Engine::grad_norm_squared_part(const Tensor& grads) {
  double sum = 0.0;
  for (const FlatRange& r : norm_runs_) {
    sum += backend_.sum_squares(Tensor(grads.f32() + r.begin, DType::F32, {r.numel()}, grads.device));
  }
  return sum;
}

double Engine::grad_norm_squared(const Tensor& grads) {
  const int tp = tp_->size();
  if (tp == 1 && !pp_) {
    // Stage 0: replicated over DP, every rank computes the same sum over the same values. Padding
    // is zero, so a shard's sum of squares is exactly its owned part's.
    if (settings_.zero_stage == 0) return backend_.sum_squares(grads);
    double total = 0.0;
    for (double part : all_gather_doubles(scalars_, {backend_.sum_squares(grads)})) total += part;
    return total;
  }
  // Under TP and PP each rank holds other parameters. scalars_ orders the world TP fastest, then
  // DP, then PP: at stage 0 the DP replicas hold the same gradient, so one replica's ranks (DP
  // rank 0) count.
  const std::vector<double> parts = all_gather_doubles(scalars_, {grad_norm_squared_part(grads)});
  double total = 0.0;
  for (size_t r = 0; r < parts.size(); ++r) {
    const int dp_rank = static_cast<int>(r) / tp % dp_.size();
    if (settings_.zero_stage > 0 || dp_rank == 0) total += parts[r];
  }
  return total;
}

std::vector<FlatSpan> Engine::gradient_spans() {
  const int64_t n = partition_->numel();
  switch (settings_.zero_stage) {
    case 0: return {{0, n, model_->grads_flat().f32()}};
    case 1:
    case 2: return spans_of(partition_->owned_runs(), nullptr, static_cast<float*>(grad_shard_.data()));
    default: return spans_of(partition_->owned_runs(), nullptr, sharded_store_->grads().f32());
  }
}

int64_t Engine::first_nonfinite_spec(const std::vector<FlatSpan>& spans) {
  // A span's one sum of squares settles the common case; only a non-finite span is searched.
  int64_t first = -1;
  for (const FlatSpan& span : spans) {
    if (std::isfinite(backend_.sum_squares(Tensor(span.data, DType::F32, {span.count}, device())))) continue;
    for (const SpecSlice& s : slices_by_spec(specs_, span.flat_begin, span.count)) {
      const Tensor part(span.data + s.span_offset, DType::F32, {s.count}, device());
      if (std::isfinite(backend_.sum_squares(part))) continue;
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
  const int64_t index = first_nonfinite_spec(gradient_spans());
  return index < 0 ? std::string() : model_param_names_[static_cast<size_t>(index)];
}

std::string Engine::first_nonfinite_state() {
  const std::pair<StateKind, const char*> kinds[] = {
      {StateKind::Params, "model."}, {StateKind::ExpAvg, "optim.exp_avg."}, {StateKind::ExpAvgSq, "optim.exp_avg_sq."}};
  for (const auto& [kind, prefix] : kinds) {
    const int64_t index = first_nonfinite_spec(device_saved_spans(kind));
    if (index >= 0) return prefix + model_param_names_[static_cast<size_t>(index)];
  }
  return "";
}

}  // namespace strata
