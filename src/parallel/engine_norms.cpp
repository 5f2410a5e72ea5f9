// The global gradient norm: each rank's share of Σ g² (its ZeRO shard, or the whole flat gradient
// at stage 0; under TP its slices, with parameters replicated over TP counted on TP rank 0 only)
// gathered over the world and summed in rank order, so that every rank gets the same bits.
#include "parallel/parallel.h"

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
      const bool counted_here = tp_size == 1 || s.spec->tp_sharded() || s.spec->tp_rank == 0;
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
  if (tp == 1) {
    // Stage 0: replicated over DP, every rank computes the same sum over the same values. Padding
    // is zero, so a shard's sum of squares is exactly its owned part's.
    if (settings_.zero_stage == 0) return backend_.sum_squares(grads);
    double total = 0.0;
    for (double part : all_gather_doubles(scalars_, {backend_.sum_squares(grads)})) total += part;
    return total;
  }
  // Under TP each rank holds other parameters. scalars_ orders the world TP fastest, then DP: at
  // stage 0 the DP replicas hold the same gradient, so one replica's TP ranks (DP rank 0) count.
  const std::vector<double> parts = all_gather_doubles(scalars_, {grad_norm_squared_part(grads)});
  double total = 0.0;
  for (size_t r = 0; r < parts.size(); ++r) {
    const int dp_rank = static_cast<int>(r) / tp % dp_.size();
    if (settings_.zero_stage > 0 || dp_rank == 0) total += parts[r];
  }
  return total;
}

}  // namespace strata
