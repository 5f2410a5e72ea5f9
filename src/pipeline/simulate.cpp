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

#include "pipeline/pipeline.h"

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
  return simulate_tables(shape, pipe_schedules(shape), forward_cost, backward_cost);
}

namespace {

// Posts rank r's stop votes for every micro-batch action `a` is the first to touch, in order,
// and takes the outcomes that are lag votes behind; false while r waits for an outcome.
bool take_votes(RankState& r, const std::vector<RankState>& ranks, const PipeAction& a, const VoteModel& votes,
                bool& progress) {
  for (const int last = pipe_last_micro_batch(a); votes.on && r.below == INT32_MAX && r.checked <= last;) {
    const int j = r.checked;
    if (r.votes == j) {
      ++r.votes;
      progress = true;
    }
    if (j >= votes.lag) {
      const bool known = std::all_of(ranks.begin(), ranks.end(),
                                     [&](const RankState& q) { return q.votes > j - votes.lag; });
      if (!known) return false;
      if (j - votes.lag == votes.yes) r.below = j;
    }
    ++r.checked;
  }
  return true;
}

// Rank s runs a forward or backward action for its cost; the problem when its input or (for a
// backward) its forward has not come first, else "".
std::string run_compute(int s, RankState& r, const PipeAction& a, const PipeShape& shape, double forward_cost,
                        double backward_cost) {
  const int chunks = shape.stages * shape.virtual_stages;
  const bool backward = a.kind == PipeAction::Kind::Backward;
  const bool first = a.model_chunk == 0, last = a.model_chunk == chunks - 1;
  const bool input_ready = backward ? (last || r.received.count({true, a.micro_batch, a.model_chunk}))
                                    : (first || r.received.count({false, a.micro_batch, a.model_chunk}));
  if (!input_ready) return "rank " + std::to_string(s) + " runs the " + describe(a) + " before its input";
  if (backward && !r.forwarded.count({a.micro_batch, a.chunk})) {
    return "rank " + std::to_string(s) + " runs the " + describe(a) + " before its forward";
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
  return "";
}

// Rank s at a communication group: posts it (the transfers a stop has not cut off), meets what
// the peers have posted, and completes it when every transfer met its counterpart. True when
// the rank got past the group.
bool run_communicate(int s, RankState& r, std::vector<RankState>& ranks, const PipeAction& a, bool& progress) {
  if (!r.posted) {
    r.group.clear();
    for (const PipeTransfer& t : a.sends)
      if (t.micro_batch < r.below) r.group.push_back({t, true, false, 0.0});
    for (const PipeTransfer& t : a.recvs)
      if (t.micro_batch < r.below) r.group.push_back({t, false, false, 0.0});
    progress = true;
    if (r.group.empty()) return true;  // every transfer cut off by the stop
    r.posted = true;
  }
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
  if (!std::all_of(r.group.begin(), r.group.end(), [](const Posted& g) { return g.matched; })) return false;
  for (const Posted& g : r.group) {
    r.clock = std::max(r.clock, g.matched_at);
    if (!g.send) r.received.insert({g.transfer.gradient, g.transfer.micro_batch, g.transfer.consumer_chunk});
  }
  r.posted = false;
  r.group.clear();
  progress = true;
  return true;
}

PipeSimulation simulate(const PipeShape& shape, const std::vector<std::vector<PipeAction>>& tables,
                        double forward_cost, double backward_cost, const VoteModel& votes,
                        std::vector<int>* stopped_before) {
  PipeSimulation out;
  const int p = shape.stages;
  std::vector<RankState> ranks(static_cast<size_t>(p));
  for (int s = 0; s < p; ++s) ranks[static_cast<size_t>(s)].table = tables.at(static_cast<size_t>(s));
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < p; ++s) {
      RankState& r = ranks[static_cast<size_t>(s)];
      while (!r.done()) {
        const PipeAction& a = r.table[r.next];
        if (!take_votes(r, ranks, a, votes, progress)) break;  // waiting for a vote's outcome
        if (a.kind == PipeAction::Kind::Communicate) {
          if (!run_communicate(s, r, ranks, a, progress)) break;
        } else if (a.micro_batch < r.below) {  // else cut off by the stop
          const std::string problem = run_compute(s, r, a, shape, forward_cost, backward_cost);
          if (!problem.empty()) {
            out.problem = problem;
            return out;
          }
        }
        ++r.next;
        progress = true;
      }
    }
  }
  for (int s = 0; s < p; ++s) {
    const RankState& r = ranks[static_cast<size_t>(s)];
    if (!r.done()) {
      out.problem = "deadlock: rank " + std::to_string(s) + " waits at action " + std::to_string(r.next) + ", " +
                    describe(r.table[r.next]);
      return out;
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
  const std::vector<std::vector<PipeAction>> tables = pipe_schedules(shape);
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
