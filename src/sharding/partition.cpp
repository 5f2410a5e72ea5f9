// Partition and bucket arithmetic over the model's flat layout: units padded to a multiple
// of the DP size and cut into equal pieces, reduction buckets, and cutting flat ranges along
// parameter boundaries, and the ranges the gradient norm counts: pure functions the unit tests
// pin down.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "sharding/sharding.h"

namespace strata {

int64_t round_up(int64_t value, int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

FlatPartition::FlatPartition(const std::vector<FlatRange>& units, int dp_size, int dp_rank)
    : dp_size_(dp_size), dp_rank_(dp_rank) {
  if (dp_size < 1 || dp_rank < 0 || dp_rank >= dp_size) {
    throw std::invalid_argument("FlatPartition: rank " + std::to_string(dp_rank) + " outside DP size " +
                                std::to_string(dp_size));
  }
  int64_t expected_begin = 0;
  for (const FlatRange& r : units) {
    // Empty units stand for layer groups a pipeline stage does not hold: no elements, no piece.
    if (r.begin != expected_begin || r.end < r.begin) {
      throw std::invalid_argument("FlatPartition: units must be consecutive ranges from 0");
    }
    PartitionUnit u;
    u.begin = r.begin;
    u.numel = r.numel();
    u.padded = round_up(u.numel, dp_size);
    u.piece = u.padded / dp_size;
    u.shard_offset = shard_numel_;
    shard_numel_ += u.piece;
    units_.push_back(u);
    expected_begin = r.end;
  }
  numel_ = expected_begin;
}

std::vector<OwnedRun> FlatPartition::owned_runs(int rank) const {
  std::vector<OwnedRun> runs;
  for (const PartitionUnit& u : units_) {
    const int64_t first = u.piece * rank;                      // inside the unit
    const int64_t last = std::min(u.numel, first + u.piece);   // padding excluded
    if (last <= first) continue;
    OwnedRun run{u.begin + first, u.shard_offset, last - first};
    // Adjacent pieces (a rank's piece of one unit ending where its next one starts) merge.
    if (!runs.empty() && runs.back().flat_begin + runs.back().count == run.flat_begin &&
        runs.back().shard_offset + runs.back().count == run.shard_offset) {
      runs.back().count += run.count;
    } else {
      runs.push_back(run);
    }
  }
  return runs;
}

std::vector<FlatRange> make_buckets(int64_t numel, int64_t bucket_size, int dp_size) {
  const int64_t size = round_up(std::max<int64_t>(bucket_size, 1), dp_size);
  std::vector<FlatRange> buckets;
  for (int64_t begin = 0; begin < numel; begin += size) buckets.push_back({begin, std::min(numel, begin + size)});
  return buckets;
}

int lowest_group(const FlatRange& range, const std::vector<LayerGroup>& groups) {
  for (size_t g = 0; g < groups.size(); ++g) {
    if (range.begin >= groups[g].begin && range.begin < groups[g].end) return static_cast<int>(g);
  }
  throw std::invalid_argument("lowest_group: range starts outside every layer group");
}

std::vector<SpecSlice> slices_by_spec(const std::vector<ParamSpec>& specs, int64_t flat_begin, int64_t count) {
  std::vector<SpecSlice> slices;
  const int64_t flat_end = flat_begin + count;
  for (const ParamSpec& spec : specs) {
    const int64_t a = std::max(flat_begin, spec.offset);
    const int64_t b = std::min(flat_end, spec.offset + spec.numel);
    if (a < b) slices.push_back({&spec, a - spec.offset, b - a, a - flat_begin});
  }
  return slices;
}

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

}  // namespace strata
