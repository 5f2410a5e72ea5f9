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

// launch/strata-mpirun's account of this node's ranks, by files in STRATA_EXIT_DIR when it is
// set (nothing otherwise). Open MPI's mpirun sleeps through its whole kill sequence (twice the
// wrapper's grace) after a rank exits non-zero or dies, though nothing is left to save; the
// wrapper ends it once the ranks have gone, with the code they noted.
// note_rank_started(): "DIR/rank-R.PID.started" holding this host's name and PID namespace (the
// wrapper looks up only the ranks it can see), once the rank is known:
// a started rank of the wrapper's node that is gone without an exit file was killed outright
// (the kernel's out-of-memory killer) or crashed.
void note_rank_started();
// note_exit(code): "DIR/rank-R.PID.exitCODE" for every exit code (0 and 3 included: the wrapper
// then knows the rank ended by itself, and leaves those to mpirun). abort_job() calls it.
void note_exit(int code);
// The file note_exit writes, without its code: "DIR/rank-R.PID.exit" ("" when
// STRATA_EXIT_DIR is unset), for a signal handler that can only append the digits.
std::string exit_note_prefix();
// note_exit from a signal handler, which may not allocate: prepare_exit_note_for_signals()
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
