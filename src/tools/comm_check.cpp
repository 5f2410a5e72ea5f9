// `strata comm-check`: a diagnostic for an installation or a cluster allocation. Rounds of
// all_reduce, reduce_scatter and all_gather on the world communicator; every rank rebuilds
// all ranks' inputs (they are pure functions of rank, round and index) and checks its
// result bit for bit against the rank-order reduction; rank 0 reports bandwidth per op.
#include <fmt/core.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "tools/tools.h"
#include "core/core.h"

namespace strata {
namespace {

enum CheckedOp { kAllReduce, kReduceScatter, kAllGather, kCheckedOps };
const char* const kOpNames[kCheckedOps] = {"all_reduce", "reduce_scatter", "all_gather"};

// The value rank `rank` contributes at `index` of op `op` in round `round`.
float input_value(int rank, int64_t round, int op, int64_t index) {
  return rng_normal(static_cast<uint64_t>(round), static_cast<uint64_t>(rank) * kCheckedOps + op,
                    static_cast<uint64_t>(index));
}

struct OpTiming {
  double seconds = 0;
  int64_t calls = 0;
};

class Checker {
 public:
  // The buffers live as long as the checker: an operation's first use of freshly mapped memory
  // costs it several times its steady time (measured: 1 MiB all_reduce on 2 ranks, 6.4 ms against
  // 0.43 ms the next time), which the warm-up round takes and a training run's long-lived
  // buffers never pay again.
  Checker(Comm& comm, int64_t elements)
      : comm_(comm), n_(elements), part_(elements / comm.size()), data_(static_cast<size_t>(n_)),
        expected_(static_cast<size_t>(n_)), shard_(static_cast<size_t>(part_)) {}

  void run_round(int64_t round, OpTiming* timing) {
    const int p = comm_.size(), me = comm_.rank();
    std::vector<float>& data = data_;
    std::vector<float>& expected = expected_;

    for (int64_t i = 0; i < n_; ++i) data[static_cast<size_t>(i)] = input_value(me, round, kAllReduce, i);
    for (int64_t i = 0; i < n_; ++i) {
      float sum = input_value(0, round, kAllReduce, i);
      for (int q = 1; q < p; ++q) sum += input_value(q, round, kAllReduce, i);
      expected[static_cast<size_t>(i)] = sum;
    }
    timed(&timing[kAllReduce], [&] { comm_.all_reduce(Tensor(data.data(), DType::F32, {n_})); });
    compare(kAllReduce, round, data.data(), expected.data(), n_);

    std::vector<float>& shard = shard_;
    for (int64_t i = 0; i < n_; ++i) data[static_cast<size_t>(i)] = input_value(me, round, kReduceScatter, i);
    for (int64_t i = 0; i < part_; ++i) {
      const int64_t global = me * part_ + i;
      float sum = input_value(0, round, kReduceScatter, global);
      for (int q = 1; q < p; ++q) sum += input_value(q, round, kReduceScatter, global);
      expected[static_cast<size_t>(i)] = sum;
    }
    timed(&timing[kReduceScatter], [&] {
      comm_.reduce_scatter(Tensor(data.data(), DType::F32, {n_}), Tensor(shard.data(), DType::F32, {part_}));
    });
    compare(kReduceScatter, round, shard.data(), expected.data(), part_);

    for (int64_t i = 0; i < part_; ++i) shard[static_cast<size_t>(i)] = input_value(me, round, kAllGather, i);
    for (int q = 0; q < p; ++q)
      for (int64_t i = 0; i < part_; ++i)
        expected[static_cast<size_t>(q * part_ + i)] = input_value(q, round, kAllGather, i);
    timed(&timing[kAllGather],
          [&] { comm_.all_gather(Tensor(shard.data(), DType::F32, {part_}), Tensor(data.data(), DType::F32, {n_})); });
    compare(kAllGather, round, data.data(), expected.data(), n_);
  }

  int64_t mismatches() const { return mismatches_; }

 private:
  // The barrier lines the ranks up, so the time is the operation's, not the slowest
  // rank's input generation.
  template <typename Fn>
  void timed(OpTiming* timing, Fn&& fn) {
    comm_.barrier();
    const Timer timer;
    fn();
    timing->seconds += timer.seconds();
    ++timing->calls;
  }

  void compare(int op, int64_t round, const float* got, const float* want, int64_t count) {
    if (std::memcmp(got, want, static_cast<size_t>(count) * sizeof(float)) == 0) return;
    for (int64_t i = 0; i < count; ++i) {
      if (std::memcmp(&got[i], &want[i], sizeof(float)) == 0) continue;
      if (mismatches_ == 0)
        log_error("comm-check: {} round {} element {}: got {:.9g}, expected {:.9g} (rank-order reduction)",
                  kOpNames[op], round, i, got[i], want[i]);
      ++mismatches_;
    }
  }

  Comm& comm_;
  int64_t n_, part_;
  std::vector<float> data_, expected_, shard_;
  int64_t mismatches_ = 0;
};

// A rank holds its input, the expected result and a shard: about (2 + 1/p) buffers. A size the
// node's memory cannot hold is the user's to lower, said before anything is allocated (the job
// would otherwise end in an allocation failure or the kernel's OOM killer).
void check_host_memory(const MpiRuntime& mpi, int64_t elements) {
  const double per_rank = (2.0 + 1.0 / mpi.world_size()) * static_cast<double>(elements) * 4;
  const double node = per_rank * mpi.local_size();
  const double available = static_cast<double>(meminfo_bytes("MemAvailable:"));
  if (available > 0 && node > available)
    throw UserError(fmt::format("strata comm-check --bytes {}: its buffers need {:.2f} GiB of host memory on this "
                                "node ({} rank(s) × {:.2f} GiB: input, expected result and shard), but {:.2f} GiB is "
                                "available; lower --bytes",
                                elements * 4, node / (1 << 30), mpi.local_size(), per_rank / (1 << 30),
                                available / (1 << 30)));
}

}  // namespace

int run_comm_check(const MpiRuntime& mpi, const CommCheckOptions& options) {
  if (!(options.seconds >= 0))
    throw UserError(fmt::format("strata comm-check --seconds {}: must be >= 0", options.seconds), RaisedOn::EveryRank);
  if (options.bytes < 4 || options.bytes > (int64_t{1} << 34))
    throw UserError(fmt::format("strata comm-check --bytes {}: must be between 4 and 2^34", options.bytes),
                    RaisedOn::EveryRank);
  std::unique_ptr<Comm> comm = make_mpi_comm(mpi.world(), "world");
  const int p = comm->size();
  // fp32 elements, a multiple of the world size so reduce_scatter and all_gather split evenly.
  const int64_t elements = std::max<int64_t>(p, options.bytes / 4 / p * p);
  check_host_memory(mpi, elements);
  log_info("comm-check: {} rank(s), {} backend, {} bytes per op, about {:g} s", p, comm->backend_name(), elements * 4,
           options.seconds);

  Checker checker(*comm, elements);
  // Round 0 warms up (page faults, connection set-up) and is timed apart; it is reported
  // only when it is the only round.
  OpTiming warm_up[kCheckedOps], timing[kCheckedOps];
  const Timer total;
  int64_t rounds = 0;
  int32_t keep_going = 1;
  while (keep_going) {
    checker.run_round(rounds, rounds == 0 ? warm_up : timing);
    ++rounds;
    // Rank 0's clock decides for everyone, so all ranks run the same number of rounds.
    keep_going = mpi.world_rank() == 0 && total.seconds() < options.seconds ? 1 : 0;
    comm->all_reduce(Tensor(&keep_going, DType::I32, {1}), ReduceOp::Max);
  }
  int32_t mismatches = static_cast<int32_t>(std::min<int64_t>(checker.mismatches(), 1 << 30));
  comm->all_reduce(Tensor(&mismatches, DType::I32, {1}), ReduceOp::Sum);

  // Bus bandwidth (nccl-tests' convention) scales the algorithm bandwidth by the share of
  // the buffer a ring moves through each link: 2(p-1)/p for all_reduce, (p-1)/p otherwise.
  const double bus_factor[kCheckedOps] = {2.0 * (p - 1) / p, 1.0 * (p - 1) / p, 1.0 * (p - 1) / p};
  log_info("{:<16} {:>12} {:>8} {:>14} {:>12} {:>12}", "op", "bytes", "calls", "time/call", "algbw GB/s", "busbw GB/s");
  if (rounds == 1) std::copy(warm_up, warm_up + kCheckedOps, timing);
  for (int op = 0; op < kCheckedOps; ++op) {
    const double per_call = timing[op].seconds / static_cast<double>(std::max<int64_t>(1, timing[op].calls));
    const double algbw = per_call > 0 ? static_cast<double>(elements * 4) / per_call / 1e9 : 0.0;
    log_info("{:<16} {:>12} {:>8} {:>11.1f} us {:>12.3f} {:>12.3f}", kOpNames[op], elements * 4, timing[op].calls,
             per_call * 1e6, algbw, algbw * bus_factor[op]);
  }
  if (mismatches > 0) {
    if (mpi.world_rank() == 0)
      log_error("comm-check FAILED: {} wrong element(s) over {} round(s); see the errors above for where", mismatches,
                rounds);
    return kExitDeviceFailure;
  }
  log_info("comm-check passed: {} round(s){}, every result bit-identical to the rank-order reduction on all {} rank(s)",
           rounds, rounds > 1 ? " (the first a warm-up, left out of the table)" : "", p);
  return 0;
}

}  // namespace strata
