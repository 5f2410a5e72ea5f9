// Async-signal-safe stop flag for the training loop.
#include "train/signals.h"

#include <csignal>
#include <unistd.h>

namespace strata {
namespace {
volatile std::sig_atomic_t g_stop_signal = 0;

void on_signal(int sig) {
  if (g_stop_signal != 0) {
    // A closed terminal hangs up twice (the kernel's SIGHUP and the shell's): that is no insisting.
    if (sig == SIGHUP) return;
    _exit(128 + sig);  // second signal: the user insists
  }
  g_stop_signal = sig;
}
}  // namespace

void install_stop_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGUSR1, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
}

bool stop_requested() { return g_stop_signal != 0; }
int stop_signal() { return static_cast<int>(g_stop_signal); }

}  // namespace strata
