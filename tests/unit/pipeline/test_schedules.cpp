// Pipeline layer partitions and schedule tables: every table of GPipe, 1F1B and interleaved 1F1B
// for p ∈ {2, 3, 4}, v ∈ {1, 2}, m ∈ {p, 2p, 4p} runs in the simulator under blocking transfers
// without deadlock, each compute after its inputs, holds at most the schedule's bound of
// micro-batches in flight, runs every forward and backward once, and its bubble equals theory.
#include "catch_compat.h"

#include <algorithm>
#include <map>
#include <vector>
#include <set>
#include <tuple>

#include "pipeline/pipeline.h"

using namespace strata;

TEST_CASE("uniform partition gives the remainder to the middle chunks") {
  const auto p = uniform_partition(14, 4);  // 3, 4, 4, 3
  REQUIRE(p.size() == 4);
  CHECK(p[0].count() == 3);
  CHECK(p[1].count() == 4);
  CHECK(p[2].count() == 4);
  CHECK(p[3].count() == 3);
  CHECK(p[3].end == 14);
  const auto q = uniform_partition(13, 4);  // one extra layer: a middle chunk
  CHECK((q[0].count() == 3 && q[3].count() == 3));
  CHECK(q[1].count() + q[2].count() == 7);
  for (size_t k = 1; k < q.size(); ++k) CHECK(q[k].begin == q[k - 1].end);
}

TEST_CASE("parameter partition moves layers away from the chunks holding the embeddings and head") {
  // Blocks of 100 parameters; the embeddings and the head each weigh two blocks.
  const auto p = parameter_partition(12, 4, 100, 200, 200);
  REQUIRE(p.size() == 4);
  CHECK(p[0].count() == 2);
  CHECK(p[3].count() == 2);
  CHECK(p[1].count() + p[2].count() == 8);
  CHECK(p[3].end == 12);
  // Light extras change nothing: the uniform split is already optimal.
  const auto q = parameter_partition(12, 4, 100, 10, 10);
  CHECK(q[0].count() == 3);
  CHECK(q[3].count() == 3);
}

TEST_CASE("an explicit partition must cover n_layer with one entry per chunk") {
  CHECK(explicit_partition_problem({3, 4, 4, 3}, 14, 4).empty());
  CHECK(explicit_partition_problem({3, 4, 4}, 14, 4).find("lists 3 chunks") != std::string::npos);
  CHECK(explicit_partition_problem({3, 4, 4, 4}, 14, 4).find("sums to 15 layers") != std::string::npos);
  CHECK(explicit_partition_problem({0, 5, 5, 4}, 14, 4).find("at least one layer") != std::string::npos);
  const auto e = explicit_partition({3, 4, 4, 3});
  CHECK((e[1].begin == 3 && e[1].end == 7 && e[3].end == 14));
}

TEST_CASE("shapes a schedule cannot run are named with the setting at fault") {
  // The one problem of a shape, as "setting: message".
  auto only = [](const PipeShape& shape, int n_layer) {
    const std::vector<PipeShapeProblem> problems = pipe_shape_problems(shape, n_layer);
    REQUIRE(problems.size() == 1);
    return std::make_pair(problems[0].setting, problems[0].message);
  };
  CHECK(only({PipeSchedule::OneFOneB, 2, 2, 4}, 0) ==
        std::make_pair(PipeSetting::VirtualStages,
                       std::string("2 model chunks per stage need the interleaved schedule (the schedule is 1f1b)")));
  CHECK(only({PipeSchedule::Interleaved, 4, 2, 6}, 0) ==
        std::make_pair(PipeSetting::MicroBatches,
                       std::string("6 micro-batches per step: the interleaved schedule needs a multiple of the 4 "
                                   "pipeline stages")));
  CHECK(only({PipeSchedule::Interleaved, 1, 2, 4}, 0).first == PipeSetting::Schedule);
  CHECK(only({PipeSchedule::Interleaved, 2, 1, 4}, 0).first == PipeSetting::Schedule);
  CHECK(only({PipeSchedule::OneFOneB, 4, 1, 4}, 3) ==
        std::make_pair(PipeSetting::Stages, std::string("4 pipeline stages need at least as many layers, but the model "
                                                        "has 3")));
  CHECK(only({PipeSchedule::Interleaved, 2, 3, 4}, 5).first == PipeSetting::VirtualStages);
  // Unknown layer and micro-batch counts (0) are not checked.
  CHECK(pipe_shape_problems({PipeSchedule::Interleaved, 4, 2, 0}, 0).empty());
  CHECK(pipe_shape_problems({PipeSchedule::Interleaved, 4, 2, 8}, 8).empty());
}

TEST_CASE("every schedule table runs without deadlock, within its in-flight bound, at the theoretical bubble") {
  for (PipeSchedule kind : {PipeSchedule::GPipe, PipeSchedule::OneFOneB, PipeSchedule::Interleaved}) {
    for (int p : {2, 3, 4}) {
      for (int v : {1, 2}) {
        // Two chunks per stage are the interleaved schedule's, and only its (with one it is 1f1b).
        if ((v == 2) != (kind == PipeSchedule::Interleaved)) continue;
        for (int m : {p, 2 * p, 4 * p}) {
          const PipeShape shape{kind, p, v, m};
          INFO(pipe_schedule_name(kind) << " p=" << p << " v=" << v << " m=" << m);
          REQUIRE(pipe_shape_problems(shape, 0).empty());
          // Each rank runs every forward and backward of its chunks exactly once.
          for (int s = 0; s < p; ++s) {
            std::map<std::tuple<int, int, int>, int> runs;  // (backward, micro-batch, chunk)
            for (const PipeAction& a : pipe_schedule(shape, s)) {
              if (a.kind == PipeAction::Kind::Communicate) {
                CHECK(!(a.sends.empty() && a.recvs.empty()));
                continue;
              }
              CHECK(a.model_chunk == a.chunk * p + s);
              ++runs[{a.kind == PipeAction::Kind::Backward, a.micro_batch, a.chunk}];
            }
            CHECK(runs.size() == static_cast<size_t>(2 * m * v));
            for (const auto& entry : runs) CHECK(entry.second == 1);
          }
          const PipeSimulation sim = simulate_pipeline(shape, 1.0, 2.0);
          INFO(sim.problem);
          REQUIRE(sim.completed);
          for (int s = 0; s < p; ++s) {
            CHECK(sim.max_in_flight[static_cast<size_t>(s)] <= pipe_in_flight_bound(shape, s));
          }
          if (kind == PipeSchedule::OneFOneB) CHECK(sim.max_in_flight[0] == std::min(p, m));
          if (kind == PipeSchedule::GPipe) CHECK(sim.max_in_flight[0] == m);
          CHECK(sim.bubble_fraction() == Approx(pipe_bubble_theory(shape)).epsilon(1e-9));
        }
      }
    }
  }
}

TEST_CASE("a stop voted part-way through a step stops every rank at one micro-batch, never deadlocks, never stalls") {
  for (PipeSchedule kind : {PipeSchedule::GPipe, PipeSchedule::OneFOneB, PipeSchedule::Interleaved}) {
    for (int p : {2, 3, 4}) {
      for (int v : {1, 2}) {
        if ((v == 2) != (kind == PipeSchedule::Interleaved)) continue;
        for (int m : {p, 2 * p, 4 * p, 8 * p}) {
          const PipeShape shape{kind, p, v, m};
          INFO(pipe_schedule_name(kind) << " p=" << p << " v=" << v << " m=" << m);
          // No stop: the votes cost the pipeline nothing (the same span as without them).
          const PipeStopSimulation none = simulate_stop_vote(shape, -1);
          INFO(none.run.problem);
          REQUIRE(none.run.completed);
          CHECK(none.stopped_before == m);
          CHECK(none.run.makespan == Approx(simulate_pipeline(shape).makespan).epsilon(1e-12));
          const int lag = pipe_stop_vote_lag(shape);
          for (int vote = 0; vote < m; ++vote) {
            INFO("stop voted at " << vote);
            const PipeStopSimulation stop = simulate_stop_vote(shape, vote);
            INFO(stop.run.problem);
            REQUIRE(stop.run.completed);
            CHECK(stop.stopped_before == std::min(vote + lag, m));
          }
        }
      }
    }
  }
}

TEST_CASE("the simulator catches a deadlock and a compute before its input") {
  const PipeShape shape{PipeSchedule::OneFOneB, 2, 1, 2};
  std::vector<std::vector<PipeAction>> tables = {pipe_schedule(shape, 0), pipe_schedule(shape, 1)};
  REQUIRE(simulate_tables(shape, tables).completed);
  // Rank 0 first waits for micro-batch 1's gradient, which needs its own activations first.
  PipeAction wait;
  wait.kind = PipeAction::Kind::Communicate;
  wait.recvs.push_back({true, 1, 0, 1});
  std::vector<std::vector<PipeAction>> stuck = tables;
  stuck[0].insert(stuck[0].begin(), wait);
  const PipeSimulation deadlock = simulate_tables(shape, stuck);
  CHECK(!deadlock.completed);
  CHECK(deadlock.problem.rfind("deadlock: rank", 0) == 0);
  // The last stage computes a forward whose activation it has not received.
  std::vector<std::vector<PipeAction>> eager = tables;
  eager[1].erase(eager[1].begin());  // its first group: the receive of micro-batch 0
  const PipeSimulation early = simulate_tables(shape, eager);
  CHECK(!early.completed);
  CHECK(early.problem.find("before its input") != std::string::npos);
}

// The per-chunk bound: a chunk's micro-batches in flight are consecutive and never more than its
// count, so copy (micro-batch mod count) is never taken by another in flight; the counts are the
// most the table reaches; under interleaving they add up to less than a copy per chunk of the
// stage's whole bound (what each chunk kept before).
// Past 4p micro-batches the counts come from 4p's tables (they settle by 2p): held here to the
// whole step's tables up to 8p.
TEST_CASE("each chunk keeps copies for its own micro-batches in flight, and copy j mod k never collides") {
  for (PipeSchedule kind : {PipeSchedule::GPipe, PipeSchedule::OneFOneB, PipeSchedule::Interleaved}) {
    for (int p : {2, 3, 4, 7}) {
      for (int v : {1, 2, 3, 4}) {
        if ((v > 1) != (kind == PipeSchedule::Interleaved)) continue;
        for (int m : {p, 2 * p, 4 * p, 5 * p, 8 * p}) {
          const PipeShape shape{kind, p, v, m};
          INFO(pipe_schedule_name(kind) << " p=" << p << " v=" << v << " m=" << m);
          int total_copies = 0;
          for (int s = 0; s < p; ++s) {
            const std::vector<int> slots = pipe_chunk_in_flight(shape, s);
            REQUIRE(slots.size() == static_cast<size_t>(v));
            std::vector<std::map<int, int>> held(static_cast<size_t>(v));  // chunk: copy -> micro-batch
            std::vector<int> most(static_cast<size_t>(v), 0);
            for (const PipeAction& a : pipe_schedule(shape, s)) {
              if (a.kind == PipeAction::Kind::Communicate) continue;
              std::map<int, int>& h = held[static_cast<size_t>(a.chunk)];
              const int copy = a.micro_batch % slots[static_cast<size_t>(a.chunk)];
              if (a.kind == PipeAction::Kind::Forward) {
                CHECK(h.count(copy) == 0);
                h[copy] = a.micro_batch;
                most[static_cast<size_t>(a.chunk)] = std::max(most[static_cast<size_t>(a.chunk)], static_cast<int>(h.size()));
              } else {
                REQUIRE(h.count(copy) == 1);
                CHECK(h[copy] == a.micro_batch);
                h.erase(copy);
              }
            }
            for (int c = 0; c < v; ++c) CHECK(most[static_cast<size_t>(c)] == slots[static_cast<size_t>(c)]);
            if (v == 1) CHECK(slots[0] == pipe_in_flight_bound(shape, s));
            for (int k : slots) total_copies += k;
            if (v > 1 && s == 0) CHECK(total_copies < v * pipe_in_flight_bound(shape, s));
          }
        }
      }
    }
  }
}
