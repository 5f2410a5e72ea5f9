// The order of a blend of sources: each source's share of the sequences is its weight's within
// one block at every point, each source's sequences come in its own order 0, 1, 2, … with none
// skipped or repeated, and the order depends on the weights alone (two instances, any lookup order).
#include "catch_compat.h"

#include <cmath>
#include <stdexcept>
#include <vector>

#include "data/data.h"

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
