// Partition and bucket arithmetic over the model's flat layout: units padded to a multiple
// of the DP size and cut into equal pieces, reduction buckets, and cutting flat ranges along
// parameter boundaries (pure functions the unit tests pin down), and the small all-gathers of
// host scalars (doubles, floats) in rank order that the norms and the losses use.
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "parallel/parallel.h"

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

// ---- scalar collectives ---------------------------------------------------------------------

std::vector<double> all_gather_doubles(Comm& comm, const std::vector<double>& values) {
  // Two I32 words per double: gathers never combine values, so the bits arrive untouched.
  const int64_t words = static_cast<int64_t>(values.size()) * 2;
  std::vector<int32_t> mine(static_cast<size_t>(words));
  std::memcpy(mine.data(), values.data(), values.size() * sizeof(double));
  std::vector<int32_t> all(static_cast<size_t>(words * comm.size()));
  comm.all_gather(Tensor(mine.data(), DType::I32, {words}), Tensor(all.data(), DType::I32, {words * comm.size()}));
  std::vector<double> out(values.size() * static_cast<size_t>(comm.size()));
  std::memcpy(out.data(), all.data(), out.size() * sizeof(double));
  return out;
}

std::vector<float> all_gather_floats(Comm& comm, const std::vector<float>& values) {
  const int64_t n = static_cast<int64_t>(values.size());
  std::vector<float> mine = values;
  std::vector<float> all(static_cast<size_t>(n * comm.size()));
  comm.all_gather(Tensor(mine.data(), DType::F32, {n}), Tensor(all.data(), DType::F32, {n * comm.size()}));
  return all;
}

}  // namespace strata
