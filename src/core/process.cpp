// Process-wide rank for log prefixes and fatal errors; the only global in strata, kept
// so that checking macros deep inside any subsystem can name the failing rank.
#include "core/process.h"

#include <mpi.h>

#include <atomic>
#include <cstdlib>

#include "core/log.h"

namespace strata {
namespace {
std::atomic<int> g_rank{-1};
}

int process_rank() { return g_rank.load(std::memory_order_relaxed); }
void set_process_rank(int rank) { g_rank.store(rank, std::memory_order_relaxed); }

bool mpi_is_initialized() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

void abort_job(int code) {
  log_flush();  // the message that explains the abort
  if (mpi_is_initialized()) MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();
}

}  // namespace strata
