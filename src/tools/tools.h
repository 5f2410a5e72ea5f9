// Public header of src/tools: the diagnostics `strata info`, `strata comm-check` and
// `strata adam-check`. They sit above comm (they drive communicators and the rank grid), optim
// (the host AdamW) and the kernels (`info` queries the GPUs), and nothing below includes them.
#pragma once
#include <cstdint>
#include <string>

#include "comm/comm.h"

namespace strata {

// `strata info [--tp N] [--pp N]`: prints the job's ranks with their (dp, pp, tp)
// coordinates, hosts, GPUs and library versions (rank 0). A world size not divisible by
// tp × pp is a UserError.
struct InfoOptions {
  int tp = 1;
  int pp = 1;
};
int run_info(const MpiRuntime& mpi, const InfoOptions& options = {});

// `strata comm-check [--seconds S] [--bytes N]`: rounds of all_reduce, reduce_scatter and
// all_gather on the world communicator, each result checked bit for bit against the
// rank-order reduction recomputed locally; rank 0 prints the bandwidth of each op.
// Returns 0, or kExitDeviceFailure when a result was wrong.
struct CommCheckOptions {
  double seconds = 3.0;     // run rounds for about this long (at least one round)
  int64_t bytes = 1 << 20;  // size of each op's full buffer
};
int run_comm_check(const MpiRuntime& mpi, const CommCheckOptions& options);

// `strata adam-check [--params N] [--threads T] [--rounds R]`: the host AdamW of offloaded
// optimizer state on this node: each instruction set checked bit for bit against the scalar
// reference, then timed (parameters/s, GB/s at 28 bytes per parameter) beside the node's
// streaming bandwidth; the last line is the figures as JSON. Returns 0, or
// kExitDeviceFailure when a result was wrong.
// nvme_path: also time writing and reading nvme_bytes of an offload file there.
struct AdamCheckOptions {
  int64_t params = 50000000;
  int threads = 0;  // 0: every core
  int rounds = 5;
  std::string nvme_path;
  int64_t nvme_bytes = int64_t{1} << 30;
};
int run_adam_check(const AdamCheckOptions& options);

}  // namespace strata
