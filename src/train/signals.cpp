// Stop signals: during set-up they end the process at once (exit 128 + signal, said to the launch
// wrapper by its exit file); from the training loop on, an async-signal-safe flag the loop polls.
#include "train/signals.h"

#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/process.h"

namespace strata {
namespace {
volatile std::sig_atomic_t g_stop_signal = 0;

// Prepared before any signal: a handler may only copy bytes and call open, write, close, _exit.
char g_setup_message[128];
size_t g_setup_message_length = 0;

void on_signal(int sig) {
  if (g_stop_signal != 0) {
    // A closed terminal hangs up twice (the kernel's SIGHUP and the shell's): that is no insisting.
    if (sig == SIGHUP) return;
    note_exit_from_signal(128 + sig);
    _exit(128 + sig);  // second signal: the user insists
  }
  g_stop_signal = sig;
}

// Set-up may wait minutes (a checkpoint, a peer that failed): nothing is trained yet, so a stop
// ends the process now, and leaves the exit file that lets launch/strata-mpirun end mpirun at once
// (a rank killed by the signal's default action would make mpirun sleep through its kill sequence).
void on_setup_signal(int sig) {
  const int code = 128 + sig;
  note_exit_from_signal(code);
  if (g_setup_message_length > 0) {
    const ssize_t ignored = write(STDERR_FILENO, g_setup_message, g_setup_message_length);
    (void)ignored;
  }
  _exit(code);
}

void install(void (*handler)(int)) {
  struct sigaction sa {};
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGUSR1, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
}
}  // namespace

void install_setup_signal_handlers() {
  prepare_exit_note_for_signals();
  // Rank 0 says why the job ends (every rank would say the same); before MPI is up, the rank the
  // launcher gave in the environment tells.
  bool first = process_rank() <= 0;
  if (process_rank() < 0) {
    for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) {
      const char* value = std::getenv(name);
      if (value && *value) {
        first = std::string(value) == "0";
        break;
      }
    }
  }
  const std::string message = first ? "strata: a stop signal during set-up: stopping now, nothing to save yet\n" : "";
  std::memcpy(g_setup_message, message.c_str(), message.size());
  g_setup_message_length = message.size();
  install(on_setup_signal);
}

void install_stop_signal_handlers() {
  // The launch wrapper was asked to stop before this rank could receive the signal: set-up ends.
  if (launcher_asked_to_stop()) on_setup_signal(SIGUSR1);
  install(on_signal);
}

bool stop_requested() { return g_stop_signal != 0; }
int stop_signal() { return static_cast<int>(g_stop_signal); }

}  // namespace strata
