// Process identity used by logging and the checking macros: this process's world rank
// (set once MPI is up; -1 before) and a hard-abort that takes every rank down.
#pragma once

namespace strata {

int process_rank();
void set_process_rank(int rank);
bool mpi_is_initialized();

// Prints nothing itself; calls MPI_Abort when MPI is up (so no rank hangs), else std::abort.
[[noreturn]] void abort_job(int code);

}  // namespace strata
