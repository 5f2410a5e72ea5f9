// Layer partitions and pipeline schedule tables. A table is built in two passes: the rank's
// computes in steps (all forwards then all backwards for GPipe; warm-up forwards, forward-backward
// pairs, cool-down backwards for 1F1B; the same over (micro-batch, chunk) pairs for the
// interleaved schedule), then one communication group between every two steps holding the
// outputs of the first and the inputs of the second (Megatron's batched send/recv), which is what
// makes the tables free of deadlock under blocking transfers (simulate.cpp proves it for each
// shape the tests try).
#include <algorithm>
#include <limits>
#include <map>
#include <mutex>
#include <numeric>
#include <string>
#include <tuple>

#include "pipeline/pipeline.h"

namespace strata {

std::vector<ChunkLayers> uniform_partition(int n_layer, int chunks) {
  std::vector<ChunkLayers> out;
  if (chunks <= 0) return out;
  const int base = n_layer / chunks, extra = n_layer % chunks;
  const int first_extra = (chunks - extra) / 2;  // the remainder goes to the middle chunks
  int begin = 0;
  for (int k = 0; k < chunks; ++k) {
    const int count = base + (k >= first_extra && k < first_extra + extra ? 1 : 0);
    out.push_back({begin, begin + count});
    begin += count;
  }
  return out;
}

std::vector<ChunkLayers> parameter_partition(int n_layer, int chunks, int64_t block_params, int64_t first_extra,
                                             int64_t last_extra) {
  const auto chunk_params = [&](int k, int layers) {
    return int64_t{layers} * block_params + (k == 0 ? first_extra : 0) + (k == chunks - 1 ? last_extra : 0);
  };
  const auto largest = [&](const std::vector<ChunkLayers>& p) {
    int64_t worst = 0;
    for (size_t k = 0; k < p.size(); ++k) worst = std::max(worst, chunk_params(static_cast<int>(k), p[k].count()));
    return worst;
  };
  // best[k][j]: the least possible largest chunk when chunks 0..k−1 hold the first j layers.
  constexpr int64_t kInf = std::numeric_limits<int64_t>::max();
  std::vector<std::vector<int64_t>> best(static_cast<size_t>(chunks + 1),
                                         std::vector<int64_t>(static_cast<size_t>(n_layer + 1), kInf));
  std::vector<std::vector<int>> cut(best.size(), std::vector<int>(static_cast<size_t>(n_layer + 1), 0));
  best[0][0] = 0;
  for (int k = 1; k <= chunks; ++k) {
    for (int j = k; j <= n_layer; ++j) {
      for (int i = k - 1; i < j; ++i) {
        if (best[k - 1][i] == kInf) continue;
        const int64_t value = std::max(best[k - 1][i], chunk_params(k - 1, j - i));
        if (value < best[k][j]) {
          best[k][j] = value;
          cut[k][j] = i;
        }
      }
    }
  }
  const std::vector<ChunkLayers> uniform = uniform_partition(n_layer, chunks);
  if (largest(uniform) <= best[chunks][n_layer]) return uniform;
  std::vector<ChunkLayers> out(static_cast<size_t>(chunks));
  for (int k = chunks, j = n_layer; k > 0; --k) {
    const int i = cut[k][j];
    out[static_cast<size_t>(k - 1)] = {i, j};
    j = i;
  }
  return out;
}

std::string explicit_partition_problem(const std::vector<int>& counts, int n_layer, int chunks) {
  if (static_cast<int>(counts.size()) != chunks) {
    return "lists " + std::to_string(counts.size()) + " chunks, but the pipeline has " + std::to_string(chunks) +
           " (pipeline_model_parallel_size × virtual_stages)";
  }
  for (int c : counts) {
    if (c < 1) return "every chunk needs at least one layer, got " + std::to_string(c);
  }
  const int sum = std::accumulate(counts.begin(), counts.end(), 0);
  if (sum != n_layer) {
    return "sums to " + std::to_string(sum) + " layers, but model.n_layer is " + std::to_string(n_layer);
  }
  return "";
}

std::vector<ChunkLayers> explicit_partition(const std::vector<int>& counts) {
  std::vector<ChunkLayers> out;
  int begin = 0;
  for (int c : counts) {
    out.push_back({begin, begin + c});
    begin += c;
  }
  return out;
}

const char* pipe_schedule_name(PipeSchedule s) {
  switch (s) {
    case PipeSchedule::GPipe: return "gpipe";
    case PipeSchedule::OneFOneB: return "1f1b";
    case PipeSchedule::Interleaved: return "interleaved";
  }
  return "?";
}

std::vector<PipeShapeProblem> pipe_shape_problems(const PipeShape& s, int n_layer) {
  if (s.stages < 1 || s.virtual_stages < 1 || s.micro_batches < 0) {
    return {{PipeSetting::Stages, "stages and virtual stages must be positive"}};
  }
  std::vector<PipeShapeProblem> out;
  const bool interleaved = s.schedule == PipeSchedule::Interleaved;
  const std::string p = std::to_string(s.stages), v = std::to_string(s.virtual_stages);
  if (!interleaved && s.virtual_stages > 1) {
    out.push_back({PipeSetting::VirtualStages, v + " model chunks per stage need the interleaved schedule (the schedule is " +
                                                   pipe_schedule_name(s.schedule) + ")"});
  }
  if (interleaved && s.virtual_stages < 2) {
    out.push_back({PipeSetting::Schedule, "the interleaved schedule needs 2 or more virtual stages (with 1 it is 1f1b)"});
  }
  if (interleaved && s.stages < 2) {
    out.push_back({PipeSetting::Schedule, "the interleaved schedule needs 2 or more pipeline stages"});
  }
  const int chunks = s.stages * (interleaved ? s.virtual_stages : 1);
  const std::string layers = ", but the model has " + std::to_string(n_layer);
  if (n_layer >= 1 && n_layer < s.stages) {
    out.push_back({PipeSetting::Stages, p + " pipeline stages need at least as many layers" + layers});
  } else if (n_layer >= 1 && n_layer < chunks) {
    out.push_back({PipeSetting::VirtualStages, p + " stages × " + v + " virtual stages = " + std::to_string(chunks) +
                                                   " model chunks need at least as many layers" + layers});
  }
  if (interleaved && s.stages >= 2 && s.micro_batches >= 1 && s.micro_batches % s.stages != 0) {
    out.push_back({PipeSetting::MicroBatches, std::to_string(s.micro_batches) +
                                                  " micro-batches per step: the interleaved schedule needs a multiple "
                                                  "of the " + p + " pipeline stages"});
  }
  return out;
}

namespace {

struct Compute {
  bool backward = false;
  int micro_batch = 0;
  int chunk = 0;  // local
};

// Megatron's interleaved order: virtual step k runs chunk (k mod p·v) / p (backward: counted
// from the last chunk) of micro-batch (k / p·v)·p + k mod p.
Compute interleaved_step(const PipeShape& s, int k, bool backward) {
  const int p = s.stages, v = s.virtual_stages;
  const int in_group = k % (p * v);
  int chunk = in_group / p;
  if (backward) chunk = v - 1 - chunk;
  return {backward, (k / (p * v)) * p + k % p, chunk};
}

int warmup_count(const PipeShape& s, int stage) {
  const int p = s.stages, v = s.virtual_stages, m = s.micro_batches;
  switch (s.schedule) {
    case PipeSchedule::GPipe: return m;
    case PipeSchedule::OneFOneB: return std::min(p - stage - 1, m);
    case PipeSchedule::Interleaved:
      if (v == 1) return std::min(p - stage - 1, m);  // one chunk per rank: 1F1B
      if (m == p) return m * v;  // as many micro-batches as stages: every forward first
      return std::min((p - stage - 1) * 2 + (v - 1) * p, m * v);
  }
  return 0;
}

// The rank's computes in steps: warm-up forwards alone, then forward-backward pairs, then
// cool-down backwards alone. Communication happens between steps, never inside one. With one
// chunk per rank each compute is a step of its own (Megatron's 1F1B: the activation leaves as
// soon as it is computed, and the next stage's backward does not wait for this one's); with
// interleaved chunks the steady pairs stay whole (Megatron's interleaved schedule: one batched
// send/recv per pair), or the tables deadlock under blocking transfers.
std::vector<std::vector<Compute>> compute_steps(const PipeShape& s, int stage) {
  const int total = s.micro_batches * s.virtual_stages;
  const auto forward = [&](int k) {
    return s.schedule == PipeSchedule::Interleaved ? interleaved_step(s, k, false) : Compute{false, k, 0};
  };
  const auto backward = [&](int k) {
    return s.schedule == PipeSchedule::Interleaved ? interleaved_step(s, k, true) : Compute{true, k, 0};
  };
  const int warmup = warmup_count(s, stage);
  std::vector<std::vector<Compute>> steps;
  for (int k = 0; k < warmup; ++k) steps.push_back({forward(k)});
  const bool pairs = s.schedule == PipeSchedule::Interleaved && s.virtual_stages > 1;
  for (int i = 0; i < total - warmup; ++i) {
    if (pairs) {
      steps.push_back({forward(warmup + i), backward(i)});
    } else {
      steps.push_back({forward(warmup + i)});
      steps.push_back({backward(i)});
    }
  }
  for (int i = total - warmup; i < total; ++i) steps.push_back({backward(i)});
  return steps;
}

}  // namespace

std::vector<PipeAction> pipe_schedule(const PipeShape& s, int stage) {
  const int p = s.stages, chunks = s.stages * s.virtual_stages;
  const auto model_chunk = [&](int local) { return local * p + stage; };
  const auto rank_of = [&](int k) { return k % p; };
  // What a compute needs from another rank, and what it hands on.
  const auto inputs = [&](const Compute& c, std::vector<PipeTransfer>& t) {
    const int k = model_chunk(c.chunk);
    if (!c.backward && k > 0) t.push_back({false, c.micro_batch, k, rank_of(k - 1)});
    if (c.backward && k < chunks - 1) t.push_back({true, c.micro_batch, k, rank_of(k + 1)});
  };
  const auto outputs = [&](const Compute& c, std::vector<PipeTransfer>& t) {
    const int k = model_chunk(c.chunk);
    if (!c.backward && k < chunks - 1) t.push_back({false, c.micro_batch, k + 1, rank_of(k + 1)});
    if (c.backward && k > 0) t.push_back({true, c.micro_batch, k - 1, rank_of(k - 1)});
  };
  std::vector<PipeAction> table;
  PipeAction group;
  group.kind = PipeAction::Kind::Communicate;
  const auto flush = [&] {
    if (group.sends.empty() && group.recvs.empty()) return;
    table.push_back(group);
    group.sends.clear();
    group.recvs.clear();
  };
  for (const std::vector<Compute>& step : compute_steps(s, stage)) {
    for (const Compute& c : step) inputs(c, group.recvs);
    flush();
    for (const Compute& c : step) {
      PipeAction a;
      a.kind = c.backward ? PipeAction::Kind::Backward : PipeAction::Kind::Forward;
      a.micro_batch = c.micro_batch;
      a.chunk = c.chunk;
      a.model_chunk = model_chunk(c.chunk);
      table.push_back(a);
      outputs(c, group.sends);
    }
  }
  flush();
  return table;
}

std::vector<std::vector<PipeAction>> pipe_schedules(const PipeShape& s) {
  std::vector<std::vector<PipeAction>> tables;
  for (int stage = 0; stage < s.stages; ++stage) tables.push_back(pipe_schedule(s, stage));
  return tables;
}

int pipe_in_flight_bound(const PipeShape& s, int stage) {
  switch (s.schedule) {
    case PipeSchedule::GPipe: return s.micro_batches;
    case PipeSchedule::OneFOneB: return std::min(s.stages - stage, s.micro_batches);
    case PipeSchedule::Interleaved: return std::min(warmup_count(s, stage) + 1, s.micro_batches * s.virtual_stages);
  }
  return s.micro_batches;
}

std::vector<int> pipe_chunk_in_flight(const PipeShape& s, int stage) {
  // Memoised: the memory estimate asks once per layout, and `strata plan` tries thousands of
  // layouts that share a few pipeline shapes (building a table is most of a plan's time).
  static std::mutex mutex;
  static std::map<std::tuple<int, int, int, int, int>, std::vector<int>> memo;
  const auto key = std::make_tuple(static_cast<int>(s.schedule), s.stages, s.virtual_stages, s.micro_batches, stage);
  {
    std::lock_guard<std::mutex> lock(mutex);
    const auto it = memo.find(key);
    if (it != memo.end()) return it->second;
  }
  // GPipe holds every micro-batch. 1F1B and interleaving reach their most by 2p micro-batches
  // (from there every chunk is in its steady phase; a unit test holds this to the tables up to
  // 8p), so a longer step is counted on 4p rather than on tables as long as the step.
  if (s.schedule == PipeSchedule::GPipe && s.micro_batches > 4 * s.stages)
    return std::vector<int>(static_cast<size_t>(s.virtual_stages), s.micro_batches);
  PipeShape counted = s;
  if (s.micro_batches > 4 * s.stages) counted.micro_batches = 4 * s.stages;
  std::vector<int> now(static_cast<size_t>(s.virtual_stages), 0), most(now.size(), 1);
  for (const PipeAction& a : pipe_schedule(counted, stage)) {
    int& n = now[static_cast<size_t>(a.chunk)];
    if (a.kind == PipeAction::Kind::Forward) most[static_cast<size_t>(a.chunk)] = std::max(most[static_cast<size_t>(a.chunk)], ++n);
    if (a.kind == PipeAction::Kind::Backward) --n;
  }
  std::lock_guard<std::mutex> lock(mutex);
  if (memo.size() >= 65536) memo.clear();  // a bound, far above what one plan needs
  memo.emplace(key, most);
  return most;
}

double pipe_bubble_theory(const PipeShape& s) {
  const double p = s.stages, m = s.micro_batches, v = s.virtual_stages;
  return (p - 1) / (v * m + p - 1);
}

}  // namespace strata
