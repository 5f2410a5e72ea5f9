// Partition and bucket arithmetic of the data-parallel engine: pieces tile each unit, shards
// are equal, padding stays out of owned runs, buckets align to DP, flat ranges split per tensor.
#include "catch_compat.h"

#include <algorithm>
#include <numeric>

#include "sharding/sharding.h"

using namespace strata;

namespace {

GptDims tiny_dims() {
  GptDims d;
  d.n_layer = 2;
  d.n_head = 2;
  d.d_model = 16;
  d.vocab_size = 37;
  d.padded_vocab = 64;
  d.seq_len = 8;
  return d;
}

}  // namespace

TEST_CASE("one unit is the classic ZeRO layout: N padded to DP, rank r owns elements r·S up to (r+1)·S") {
  const int64_t n = 1001;
  for (int p : {1, 2, 3, 4, 8}) {
    const FlatPartition part({{0, n}}, p, 0);
    const int64_t s = round_up(n, p) / p;
    CHECK(part.shard_numel() == s);
    int64_t covered = 0;
    for (int r = 0; r < p; ++r) {
      const std::vector<OwnedRun> runs = part.owned_runs(r);
      REQUIRE(runs.size() == 1);
      CHECK(runs[0].flat_begin == r * s);
      CHECK(runs[0].shard_offset == 0);
      CHECK(runs[0].count == std::min(s, n - r * s));  // the last rank's piece holds the padding
      covered += runs[0].count;
    }
    CHECK(covered == n);
  }
}

TEST_CASE("several units: every rank owns one equal piece of each, and the pieces tile the flat range") {
  const std::vector<FlatRange> units = {{0, 10}, {10, 13}, {13, 40}};
  const int p = 4;
  std::vector<int> owner(40, -1);
  int64_t shard = -1;
  for (int r = 0; r < p; ++r) {
    const FlatPartition part(units, p, r);
    // Pieces: ceil(10/4)=3, ceil(3/4)=1, ceil(27/4)=7.
    REQUIRE(part.units().size() == 3);
    CHECK(part.units()[0].piece == 3);
    CHECK(part.units()[1].piece == 1);
    CHECK(part.units()[2].piece == 7);
    CHECK(part.units()[2].shard_offset == 4);
    if (shard < 0) shard = part.shard_numel();
    CHECK(part.shard_numel() == shard);
    CHECK(shard == 11);
    for (const OwnedRun& run : part.owned_runs()) {
      CHECK(run.shard_offset + run.count <= shard);
      for (int64_t i = run.flat_begin; i < run.flat_begin + run.count; ++i) {
        CHECK(owner[static_cast<size_t>(i)] == -1);
        owner[static_cast<size_t>(i)] = r;
      }
    }
  }
  CHECK(std::count(owner.begin(), owner.end(), -1) == 0);
  // Rank 3 owns nothing of the 3-element unit (its piece is all padding).
  const FlatPartition last(units, p, 3);
  for (const OwnedRun& run : last.owned_runs()) CHECK((run.flat_begin >= 13 || run.flat_begin + run.count <= 10));
  // With DP 1 each unit is one piece and the runs merge into the whole range.
  const std::vector<OwnedRun> whole = FlatPartition(units, 1, 0).owned_runs();
  REQUIRE(whole.size() == 1);
  CHECK(whole[0].count == 40);
  CHECK_THROWS_AS(FlatPartition({{0, 5}, {6, 9}}, 2, 0), std::invalid_argument);
  CHECK_THROWS_AS(FlatPartition({{0, 5}}, 2, 2), std::invalid_argument);
}

TEST_CASE("buckets are cut from the front in multiples of DP, so only the last needs padding") {
  const std::vector<FlatRange> b = make_buckets(100, 30, 4);  // 30 → 32
  REQUIRE(b.size() == 4);
  CHECK(b[0].begin == 0);
  CHECK(b[0].end == 32);
  CHECK(b[2].end == 96);
  CHECK(b[3].begin == 96);
  CHECK(b[3].end == 100);
  const FlatPartition part(b, 4, 0);
  int64_t padded_end = 0;
  for (const PartitionUnit& u : part.units()) {
    CHECK(u.begin == padded_end);  // padded units tile [0, round_up(N, DP))
    padded_end = u.begin + u.padded;
  }
  CHECK(padded_end == round_up(100, 4));
  CHECK(make_buckets(100, 500000000, 2).size() == 1);
  CHECK(make_buckets(7, 0, 3).size() == 3);  // a bucket size below DP rounds up to DP
}

TEST_CASE("layer groups, a bucket's lowest group, and cutting a range along parameters") {
  const std::vector<ParamSpec> specs = gpt_param_specs(tiny_dims());
  const std::vector<LayerGroup> groups = gpt_layer_groups(specs);
  REQUIRE(groups.size() == 4);  // embeddings, two blocks, ln_f
  CHECK(groups[0].begin == 0);
  CHECK(groups[0].end == 64 * 16 + 8 * 16);
  CHECK(groups[3].end == gpt_param_count(tiny_dims()));
  CHECK(groups[3].numel() == 32);
  for (size_t g = 1; g < groups.size(); ++g) CHECK(groups[g].begin == groups[g - 1].end);
  CHECK(lowest_group({groups[1].begin, groups[3].end}, groups) == 1);
  CHECK(lowest_group({groups[1].begin - 1, groups[1].begin + 1}, groups) == 0);
  CHECK(lowest_group({groups[3].begin, groups[3].end}, groups) == 3);

  // wpe's last 5 elements and the first 3 of h.0.ln_1.weight.
  const ParamSpec& wpe = specs[1];
  const std::vector<SpecSlice> s = slices_by_spec(specs, wpe.offset + wpe.numel - 5, 8);
  REQUIRE(s.size() == 2);
  CHECK(s[0].spec->name == "wpe.weight");
  CHECK(s[0].begin == wpe.numel - 5);
  CHECK(s[0].count == 5);
  CHECK(s[0].span_offset == 0);
  CHECK(s[1].spec->name == "h.0.ln_1.weight");
  CHECK(s[1].begin == 0);
  CHECK(s[1].count == 3);
  CHECK(s[1].span_offset == 5);
}

TEST_CASE("initial values of any slice equal the same elements of the whole tensor") {
  const GptDims dims = tiny_dims();
  for (const ParamSpec& spec : gpt_param_specs(dims)) {
    std::vector<float> whole(static_cast<size_t>(spec.numel)), part(static_cast<size_t>(spec.numel / 2 + 1));
    gpt_init_values(dims, spec, 11, 0, spec.numel, whole.data());
    const int64_t begin = spec.numel / 3;
    const int64_t count = std::min<int64_t>(static_cast<int64_t>(part.size()), spec.numel - begin);
    gpt_init_values(dims, spec, 11, begin, count, part.data());
    INFO(spec.name);
    CHECK(std::equal(part.begin(), part.begin() + count, whole.begin() + begin));
  }
}

TEST_CASE("the gradient norm counts a TP rank's split parameters, and the replicated ones on TP rank 0 only") {
  const GptDims dims = tiny_dims();
  const std::vector<ParamSpec> whole = gpt_param_specs(dims);
  const int64_t n = whole.back().offset + whole.back().numel;
  // Without TP: everything, merged into one range.
  const std::vector<FlatRange> all = tp_norm_runs(whole, {{0, 0, n}}, 1);
  REQUIRE(all.size() == 1);
  CHECK((all[0].begin == 0 && all[0].end == n));
  for (int rank = 0; rank < 2; ++rank) {
    const std::vector<ParamSpec> mine = gpt_param_specs(dims, {rank, 2});
    const int64_t local = mine.back().offset + mine.back().numel;
    int64_t counted = 0, replicated = 0, split = 0;
    for (const FlatRange& r : tp_norm_runs(mine, {{0, 0, local}}, 2)) counted += r.numel();
    for (const ParamSpec& s : mine) (s.tp_sharded() ? split : replicated) += s.numel;
    CHECK(counted == split + (rank == 0 ? replicated : 0));
    // A shard: owned runs placed at shard offsets; the ranges are in shard coordinates.
    const std::vector<OwnedRun> owned = {{mine[2].offset, 100, mine[2].numel + mine[4].numel}};  // ln_1.weight..c_attn
    const std::vector<FlatRange> shard = tp_norm_runs(mine, owned, 2);
    REQUIRE(shard.size() == 1);
    const int64_t ln1 = mine[2].numel + mine[3].numel;  // ln_1 weight and bias: replicated
    CHECK(shard[0].begin == (rank == 0 ? 100 : 100 + ln1));
    CHECK(shard[0].end == 100 + mine[2].numel + mine[4].numel);
  }
}
