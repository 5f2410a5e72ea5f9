// ThreadPool runs every index of a loop exactly once, over and over, rethrows a task's
// exception, and sizes a rank's share of the node's cores.
#include "catch_compat.h"

#include <atomic>
#include <stdexcept>
#include <vector>

#include "core/core.h"

using namespace strata;

TEST_CASE("thread pool runs every index once per loop") {
  ThreadPool pool(4);
  CHECK(pool.threads() == 4);
  for (int round = 0; round < 50; ++round) {
    std::vector<std::atomic<int>> hits(257);
    pool.run(257, [&](int64_t i) { hits[static_cast<size_t>(i)]++; });
    for (const std::atomic<int>& h : hits) REQUIRE(h.load() == 1);
  }
  pool.run(0, [](int64_t) { FAIL("no task to run"); });
}

TEST_CASE("thread pool rethrows a task's exception and stays usable") {
  ThreadPool pool(3);
  CHECK_THROWS_AS(pool.run(40, [](int64_t i) {
    if (i == 17) throw std::runtime_error("task 17");
  }),
                  std::runtime_error);
  std::atomic<int> count{0};
  pool.run(40, [&](int64_t) { count++; });
  CHECK(count.load() == 40);
}

TEST_CASE("host threads per rank share the node's cores") {
  CHECK(host_threads_per_rank(6, 4) == 6);
  CHECK(host_threads_per_rank(0, 1) >= 1);
  CHECK(host_threads_per_rank(0, 100000) == 1);
}
