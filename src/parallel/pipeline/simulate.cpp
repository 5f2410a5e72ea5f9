// The pipeline simulator: every rank walks its table; a compute takes its cost; a communication
// group posts all its transfers at once and completes when each of them met its counterpart
// posted by the peer (a send meets the peer's receive of the same message), which is blocking
// send/recv, the strictest model (NCCL's). If no rank can move while some are unfinished, the
// tables deadlock. Every compute is also checked to come after its inputs.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <set>
#include <string>
#include <tuple>

#include "parallel/pipeline/pipeline.h"

namespace strata {
namespace {

struct Posted {
  PipeTransfer transfer;
  bool send = false;
  bool matched = false;
  double matched_at = 0.0;
};

struct RankState {
  std::vector<PipeAction> table;
  size_t next = 0;
  double clock = 0.0, busy = 0.0;
  bool posted = false;
  std::vector<Posted> group;
  std::set<std::tuple<bool, int, int>> received;  // (gradient, micro-batch, consumer chunk)
  std::set<std::pair<int, int>> forwarded;         // (micro-batch, chunk) whose forward ran
  int in_flight = 0, max_in_flight = 0;
  int votes = 0;          // stop votes posted
  int checked = 0;        // micro-batches whose vote outcome this rank has taken
  int below = INT32_MAX;  // micro-batches this rank still runs (a decided stop lowers it)
  bool done() const { return next >= table.size(); }
};

// The stop votes being simulated: lag, and which vote says stop (−1: none).
struct VoteModel {
  bool on = false;
  int lag = 0, yes = -1;
};

std::string describe(const PipeAction& a) {
  if (a.kind == PipeAction::Kind::Communicate) return "a communication group";
  return std::string(a.kind == PipeAction::Kind::Forward ? "forward" : "backward") + " of micro-batch " +
         std::to_string(a.micro_batch) + " through chunk " + std::to_string(a.model_chunk);
}

}  // namespace

double PipeSimulation::bubble_fraction() const {
  if (busy.empty() || makespan <= 0) return 0.0;
  double idle = 0.0;
  for (double b : busy) idle += (makespan - b) / makespan;
  return idle / static_cast<double>(busy.size());
}

PipeSimulation simulate_pipeline(const PipeShape& shape, double forward_cost, double backward_cost) {
  std::vector<std::vector<PipeAction>> tables;
  for (int s = 0; s < shape.stages; ++s) tables.push_back(pipe_schedule(shape, s));
  return simulate_tables(shape, tables, forward_cost, backward_cost);
}

namespace {

PipeSimulation simulate(const PipeShape& shape, const std::vector<std::vector<PipeAction>>& tables,
                        double forward_cost, double backward_cost, const VoteModel& votes,
                        std::vector<int>* stopped_before) {
  PipeSimulation out;
  const int p = shape.stages, chunks = shape.stages * shape.virtual_stages;
  std::vector<RankState> ranks(static_cast<size_t>(p));
  for (int s = 0; s < p; ++s) ranks[static_cast<size_t>(s)].table = tables.at(static_cast<size_t>(s));
  const auto fail = [&](const std::string& why) {
    out.problem = why;
    return out;
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < p; ++s) {
      RankState& r = ranks[static_cast<size_t>(s)];
      while (!r.done()) {
        const PipeAction& a = r.table[r.next];
        // Votes for every micro-batch this action is the first to touch, in order.
        bool waiting = false;
        for (const int last = pipe_last_micro_batch(a); votes.on && r.below == INT32_MAX && r.checked <= last;) {
          const int j = r.checked;
          if (r.votes == j) {
            ++r.votes;
            progress = true;
          }
          if (j >= votes.lag) {
            waiting = !std::all_of(ranks.begin(), ranks.end(),
                                   [&](const RankState& q) { return q.votes > j - votes.lag; });
            if (waiting) break;  // for the vote's outcome
            if (j - votes.lag == votes.yes) r.below = j;
          }
          ++r.checked;
        }
        if (waiting) break;
        if (a.kind != PipeAction::Kind::Communicate && a.micro_batch >= r.below) {
          ++r.next;  // cut off by the stop
          progress = true;
          continue;
        }
        if (a.kind != PipeAction::Kind::Communicate) {
          const bool backward = a.kind == PipeAction::Kind::Backward;
          const bool first = a.model_chunk == 0, last = a.model_chunk == chunks - 1;
          const bool input_ready = backward ? (last || r.received.count({true, a.micro_batch, a.model_chunk}))
                                            : (first || r.received.count({false, a.micro_batch, a.model_chunk}));
          if (!input_ready) return fail("rank " + std::to_string(s) + " runs the " + describe(a) + " before its input");
          if (backward && !r.forwarded.count({a.micro_batch, a.chunk})) {
            return fail("rank " + std::to_string(s) + " runs the " + describe(a) + " before its forward");
          }
          const double cost = (backward ? backward_cost : forward_cost) / shape.virtual_stages;
          r.clock += cost;
          r.busy += cost;
          if (backward) {
            --r.in_flight;
          } else {
            r.forwarded.insert({a.micro_batch, a.chunk});
            r.max_in_flight = std::max(r.max_in_flight, ++r.in_flight);
          }
          ++r.next;
          progress = true;
          continue;
        }
        if (!r.posted) {
          r.group.clear();
          for (const PipeTransfer& t : a.sends)
            if (t.micro_batch < r.below) r.group.push_back({t, true, false, 0.0});
          for (const PipeTransfer& t : a.recvs)
            if (t.micro_batch < r.below) r.group.push_back({t, false, false, 0.0});
          if (r.group.empty()) {  // every transfer cut off by the stop
            ++r.next;
            progress = true;
            continue;
          }
          r.posted = true;
          progress = true;
        }
        // Meet what the peers have posted in their current groups.
        for (Posted& mine : r.group) {
          if (mine.matched) continue;
          RankState& peer = ranks[static_cast<size_t>(mine.transfer.peer)];
          if (!peer.posted) continue;
          for (Posted& theirs : peer.group) {
            if (theirs.matched || theirs.send == mine.send || theirs.transfer.peer != s ||
                !(theirs.transfer == mine.transfer)) {
              continue;
            }
            mine.matched = theirs.matched = true;
            mine.matched_at = theirs.matched_at = std::max(r.clock, peer.clock);
            progress = true;
            break;
          }
        }
        if (!std::all_of(r.group.begin(), r.group.end(), [](const Posted& g) { return g.matched; })) break;
        for (const Posted& g : r.group) {
          r.clock = std::max(r.clock, g.matched_at);
          if (!g.send) r.received.insert({g.transfer.gradient, g.transfer.micro_batch, g.transfer.consumer_chunk});
        }
        r.posted = false;
        r.group.clear();
        ++r.next;
        progress = true;
      }
    }
  }
  for (int s = 0; s < p; ++s) {
    const RankState& r = ranks[static_cast<size_t>(s)];
    if (!r.done()) {
      return fail("deadlock: rank " + std::to_string(s) + " waits at action " + std::to_string(r.next) + ", " +
                  describe(r.table[r.next]));
    }
    out.makespan = std::max(out.makespan, r.clock);
    out.busy.push_back(r.busy);
    out.max_in_flight.push_back(r.max_in_flight);
    if (stopped_before) stopped_before->push_back(std::min(r.below, shape.micro_batches));
  }
  out.completed = true;
  return out;
}

}  // namespace

PipeSimulation simulate_tables(const PipeShape& shape, const std::vector<std::vector<PipeAction>>& tables,
                               double forward_cost, double backward_cost) {
  return simulate(shape, tables, forward_cost, backward_cost, VoteModel{}, nullptr);
}

int pipe_stop_vote_lag(const PipeShape& shape) { return shape.stages * shape.virtual_stages + 1; }

int pipe_last_micro_batch(const PipeAction& action) {
  if (action.kind != PipeAction::Kind::Communicate) return action.micro_batch;
  int last = -1;
  for (const PipeTransfer& t : action.sends) last = std::max(last, t.micro_batch);
  for (const PipeTransfer& t : action.recvs) last = std::max(last, t.micro_batch);
  return last;
}

PipeStopSimulation simulate_stop_vote(const PipeShape& shape, int stop_vote, double forward_cost,
                                      double backward_cost) {
  std::vector<std::vector<PipeAction>> tables;
  for (int s = 0; s < shape.stages; ++s) tables.push_back(pipe_schedule(shape, s));
  PipeStopSimulation out;
  std::vector<int> below;
  out.run = simulate(shape, tables, forward_cost, backward_cost, VoteModel{true, pipe_stop_vote_lag(shape), stop_vote},
                     &below);
  out.stopped_before = shape.micro_batches;
  if (!out.run.completed) return out;
  out.stopped_before = below.front();
  for (int b : below) {
    if (b != below.front()) {
      out.run.completed = false;
      out.run.problem = "the ranks stopped at different micro-batches";
    }
  }
  return out;
}

}  // namespace strata
