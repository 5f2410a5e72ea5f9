// The order of a blend of sources: each source's share of the sequences is its weight's within
// one block at every point, each source's sequences come in its own order 0, 1, 2, … with none
// skipped or repeated, and the order depends on the weights alone (two instances, any lookup order).
// TrainSequences reads each global sequence from the source and index the order gives, and a
// BatchLoader over a blend splits it over DP ranks as over one dataset.
#include "catch_compat.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "data/data.h"
#include "data_test_util.h"

using namespace strata;

namespace {

// Walks the first n global sequences: per source, how many, and whether they came as 0, 1, 2, ….
std::vector<int64_t> walk(const BlendOrder& order, int64_t n) {
  std::vector<int64_t> next(static_cast<size_t>(order.sources()), 0);
  for (int64_t g = 0; g < n; ++g) {
    const BlendOrder::Position p = order.locate(g);
    REQUIRE(p.source >= 0);
    REQUIRE(p.source < order.sources());
    REQUIRE(p.local_index == next[static_cast<size_t>(p.source)]);
    ++next[static_cast<size_t>(p.source)];
  }
  return next;
}

}  // namespace

TEST_CASE("blend: shares follow the weights within one block, each source in its own order") {
  for (const std::vector<double>& weights : {std::vector<double>{3.0, 1.0}, std::vector<double>{0.5, 0.3, 0.2},
                                             std::vector<double>{1.0, 1.0, 1.0, 997.0}}) {
    const BlendOrder order(weights);
    double total = 0.0;
    for (double w : weights) total += w;
    const int64_t n = 40 * order.block_size() + 123;  // not a block multiple
    const std::vector<int64_t> counts = walk(order, n);
    for (size_t s = 0; s < weights.size(); ++s) {
      const double expected = weights[s] / total * static_cast<double>(n);
      CHECK(std::abs(static_cast<double>(counts[s]) - expected) <= static_cast<double>(order.block_size()));
      CHECK(std::abs(static_cast<double>(counts[s]) - expected) <= 0.01 * expected + 2.0);
      CHECK(order.count_before(static_cast<int>(s), n) == counts[s]);
      // At a block boundary the share is the largest-remainder rounding: within one sequence.
      const int64_t at_block = 7 * order.block_size();
      CHECK(std::abs(static_cast<double>(order.count_before(static_cast<int>(s), at_block)) -
                     weights[s] / total * static_cast<double>(at_block)) < 1.0);
    }
  }
}

TEST_CASE("blend: the order depends on the weights alone, whatever the lookup order") {
  const BlendOrder a({2.0, 5.0, 1.0}), b({2.0, 5.0, 1.0});
  const int64_t block = a.block_size();
  // b jumps between blocks (its one-block cache is rebuilt each time); a walks in order.
  std::vector<BlendOrder::Position> in_order;
  for (int64_t g = 0; g < 3 * block; ++g) in_order.push_back(a.locate(g));
  for (int64_t g : {2 * block + 5, int64_t{0}, block - 1, 3 * block - 1, block, int64_t{17}}) {
    const BlendOrder::Position p = b.locate(g);
    CHECK(p.source == in_order[static_cast<size_t>(g)].source);
    CHECK(p.local_index == in_order[static_cast<size_t>(g)].local_index);
  }
  // The sources interleave: no run of one source longer than its share calls for.
  int longest = 0, run = 0;
  for (size_t g = 1; g < in_order.size(); ++g) {
    run = in_order[g].source == in_order[g - 1].source ? run + 1 : 0;
    longest = std::max(longest, run + 1);
  }
  CHECK(longest <= 3);  // the 5/8 source: at most 2 in a row by the greedy rule, 3 at a block seam
}

TEST_CASE("blend: one source is the identity, and a tiny share still gets a sequence per block") {
  const BlendOrder one({4.0});
  for (int64_t g : {int64_t{0}, int64_t{1}, int64_t{5000}, int64_t{123456789}}) {
    CHECK(one.locate(g).source == 0);
    CHECK(one.locate(g).local_index == g);
  }
  const BlendOrder skewed({1.0, 999.0});
  CHECK(skewed.block_size() >= 2000);
  for (int64_t k = 0; k < 5; ++k) {
    CHECK(skewed.count_before(0, (k + 1) * skewed.block_size()) > skewed.count_before(0, k * skewed.block_size()));
  }
}

TEST_CASE("blend: weights must be positive, finite and not vanishingly small") {
  CHECK_THROWS_AS(BlendOrder({}), std::invalid_argument);
  CHECK_THROWS_AS(BlendOrder({1.0, 0.0}), std::invalid_argument);
  CHECK_THROWS_AS(BlendOrder({1.0, -2.0}), std::invalid_argument);
  CHECK_THROWS_AS(BlendOrder({1.0, NAN}), std::invalid_argument);
  CHECK_THROWS_AS(BlendOrder({1.0, 1e-9}), std::invalid_argument);
}

namespace {
// A source whose token i is base + i: a row's first token says which source and where.
strata::TrainSequences::Source token_source(const strata::test::TempDir& dir, const std::string& name, int32_t base,
                                            int64_t tokens, bool shuffle, uint64_t seed, double weight) {
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < tokens; ++i) ids.push_back(base + static_cast<int32_t>(i));
  strata::write_token_shard(dir.file(name + ".bin"), ids, false);
  const strata::TokenDataset dataset = strata::TokenDataset::open(dir.file(name + ".bin"), 60000, "data.train");
  return {dataset, strata::GlobalSampler(dataset, 8, shuffle, seed), weight};
}
}  // namespace

TEST_CASE("TrainSequences: global sequence g is the BlendOrder's sequence of its source, in that source's order") {
  const strata::test::TempDir dir;
  const auto a = token_source(dir, "a", 0, 8 * 50 + 1, true, 7, 2.0);       // 50 sequences, shuffled
  const auto b = token_source(dir, "b", 30000, 8 * 20 + 1, false, 0, 1.0);  // 20 sequences
  const strata::TrainSequences blend({a, b});
  REQUIRE(blend.blended());
  CHECK(blend.num_tokens() == a.dataset.num_tokens() + b.dataset.num_tokens());
  const strata::BlendOrder order({2.0, 1.0});
  const int n = 700;  // several epochs of both
  std::vector<int32_t> tokens(static_cast<size_t>(n) * 8), targets(tokens.size());
  blend.read(0, n, tokens.data(), targets.data());
  for (int g = 0; g < n; ++g) {
    const strata::BlendOrder::Position at = order.locate(g);
    const auto& s = at.source == 0 ? a : b;
    const int64_t start = s.sampler.sequence_start(at.local_index);
    INFO("g " << g);
    REQUIRE(tokens[static_cast<size_t>(g) * 8] == (at.source == 0 ? 0 : 30000) + start);
    REQUIRE(targets[static_cast<size_t>(g) * 8 + 7] == (at.source == 0 ? 0 : 30000) + start + 8);
  }
  CHECK(blend.count_before(0, n) == order.count_before(0, n));
  // A window read later in the stream equals the same rows of the whole read.
  std::vector<int32_t> part(80), part_targets(80);
  blend.read(333, 10, part.data(), part_targets.data());
  CHECK(std::equal(part.begin(), part.end(), tokens.begin() + 333 * 8));
  // One source is read in its sampler's order, whatever its weight.
  const strata::TrainSequences alone({a});
  CHECK_FALSE(alone.blended());
  alone.read(0, 60, tokens.data(), targets.data());
  for (int g = 0; g < 60; ++g) CHECK(tokens[static_cast<size_t>(g) * 8] == a.sampler.sequence_start(g));
}

TEST_CASE("BatchLoader over a blend: DP ranks' slices make up one rank's stream") {
  const strata::test::TempDir dir;
  const strata::TrainSequences blend({token_source(dir, "a", 0, 8 * 30 + 1, true, 3, 0.3),
                                      token_source(dir, "b", 30000, 8 * 9 + 1, true, 4, 0.7)});
  strata::BatchLayout one{2, 4, 1, 0, 8};
  strata::BatchLoader whole(blend, one, false);
  std::vector<int32_t> expected;
  for (int m = 0; m < 4 * 5; ++m) {
    const strata::MicroBatch batch = whole.next();
    expected.insert(expected.end(), batch.tokens.begin(), batch.tokens.end());
  }
  std::vector<std::vector<int32_t>> per_rank(2);
  for (int r = 0; r < 2; ++r) {
    strata::BatchLoader loader(blend, strata::BatchLayout{2, 2, 2, r, 8}, /*prefetch=*/true);
    for (int m = 0; m < 2 * 5; ++m) {
      const strata::MicroBatch batch = loader.next();
      per_rank[static_cast<size_t>(r)].insert(per_rank[static_cast<size_t>(r)].end(), batch.tokens.begin(),
                                               batch.tokens.end());
    }
  }
  // Step s: rank 0's 2 micro-batches, then rank 1's, are one rank's 4.
  std::vector<int32_t> joined;
  const size_t step_rows = 2 * 2 * 8;
  for (size_t s = 0; s < 5; ++s)
    for (const auto& rank : per_rank) joined.insert(joined.end(), rank.begin() + s * step_rows, rank.begin() + (s + 1) * step_rows);
  CHECK(joined == expected);
}

TEST_CASE("TrainSequences refuses samplers of other sequence lengths") {
  const strata::test::TempDir dir;
  auto a = token_source(dir, "a", 0, 101, false, 0, 1.0);
  auto b = token_source(dir, "b", 1000, 101, false, 0, 1.0);
  b.sampler = strata::GlobalSampler(b.dataset, 4, false, 0);
  CHECK_THROWS_AS(strata::TrainSequences({a, b}), std::invalid_argument);
}
