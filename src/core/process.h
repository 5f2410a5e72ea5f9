// Process identity used by logging and the checking macros: this process's world rank
// (set once MPI is up; -1 before) and a hard-abort that takes every rank down.
#pragma once
#include <cstdint>
#include <string>

namespace strata {

int process_rank();
void set_process_rank(int rank);
bool mpi_is_initialized();

// Prints nothing itself; calls MPI_Abort when MPI is up (so no rank hangs), else std::abort.
[[noreturn]] void abort_job(int code);

// Tells launch/strata-mpirun that this rank ends with exit `code` (2: a user error; 1: an
// internal error or a stop for non-finite values; not 3, a device or communication failure,
// which may be a lost node that mpirun reports itself), by a file in STRATA_EXIT_DIR when it is set: Open MPI's mpirun sleeps through its whole kill sequence
// (twice the wrapper's grace) after a rank exits non-zero, though nothing is left to save; the
// wrapper ends it once the ranks have gone, with this code. abort_job() calls it.
void note_failed_exit(int code);
// The file note_failed_exit writes, without its code: "DIR/rank-R.PID.exit" ("" when
// STRATA_EXIT_DIR is unset), for a signal handler that can only append the digits.
std::string exit_note_prefix();
// The same file from a signal handler, which may not allocate: prepare_exit_note_for_signals()
// keeps exit_note_prefix() in a static buffer (call it once the rank is known; a call that would
// change nothing writes nothing, so a handler never reads a path half rewritten), and
// note_exit_from_signal(code) then creates "prefix" + code with open(2) and close(2) only.
void prepare_exit_note_for_signals();
void note_exit_from_signal(int code);  // code 0..999; nothing when no prefix is prepared
// True when launch/strata-mpirun has been asked to stop the job (its file STRATA_EXIT_DIR/stop,
// written before it signals the ranks): a rank that mpirun had not started when the signal came
// never received it.
bool launcher_asked_to_stop();

// A line of /proc/meminfo in bytes (key "MemTotal:", "MemAvailable:", ...); 0 when unknown.
int64_t meminfo_bytes(const char* key);

}  // namespace strata
