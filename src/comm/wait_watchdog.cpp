// The watchdog over the MPI backend's waits. wait_operation checks STRATA_COMM_TIMEOUT_S between
// MPI calls, but a rank can block inside one: when a peer's node is lost, Open MPI's TCP
// transport reports the broken connection through mpirun, which is busy ending the job, and the
// rank never returns to check. A thread of its own watches each wait from outside.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "comm/mpi_progress.h"
#include "core/core.h"

namespace strata::comm_detail {
namespace {

using Clock = std::chrono::steady_clock;
// How long the waiting thread must be gone inside MPI before the watchdog acts for it: far
// more than one MPI_Testsome takes, and the margin it leaves the waiting thread's own abort.
constexpr double kInsideMpiSeconds = 2.0;

struct Watch {
  std::mutex mutex;
  const MpiOperation* op = nullptr;  // the wait under way; null when none
  Clock::time_point started;
  double limit_seconds = 0;
  std::string pending;                // the waiting thread's last describe_pending()
  bool aborting = false;              // the waiting thread has reported and calls MPI_Abort
  std::atomic<Clock::rep> alive_at{0};  // when the waiting thread was last between MPI calls
  bool thread_started = false;
};

// Never destroyed: the detached thread may look at it while the process exits.
Watch& the_watch() {
  static Watch* watch = new Watch;
  return *watch;
}

double seconds_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

[[noreturn]] void watchdog_loop() {
  constexpr int kPollMilliseconds = 250;
  Watch& w = the_watch();
  Clock::rep last_alive_at = 0;
  int polls_unchanged = 0;  // counted by this thread, so that a stopped and continued process
                            // (both threads frozen) does not look as if MPI had not returned
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(kPollMilliseconds));
    const std::lock_guard<std::mutex> lock(w.mutex);
    if (w.op == nullptr) {
      polls_unchanged = 0;
      continue;
    }
    const Clock::rep alive_at = w.alive_at.load();
    polls_unchanged = alive_at == last_alive_at ? polls_unchanged + 1 : 0;
    last_alive_at = alive_at;
    const Clock::time_point now = Clock::now();
    const double waited = seconds_between(w.started, now);
    const double inside_mpi = seconds_between(Clock::time_point(Clock::duration(alive_at)), now);
    if (polls_unchanged * kPollMilliseconds < kInsideMpiSeconds * 1000 || (waited <= w.limit_seconds && !w.aborting))
      continue;
    if (w.aborting) {
      log_error("MPI_Abort has not ended the job after {:.0f} s (a lost node can keep it waiting): ending this process",
                inside_mpi);
      log_flush();
      note_exit(kExitDeviceFailure);
      _exit(kExitDeviceFailure);
    }
    // The op stays alive while it is watched: its wait cannot end without this lock.
    log_error(
        "communication timeout: waited {:.0f} s for {}; this rank has been inside the MPI library for {:.0f} s "
        "without returning, as when a node or its network is lost. Ending this process (limit "
        "STRATA_COMM_TIMEOUT_S={:g} s)",
        waited, w.pending.empty() ? w.op->describe() : w.pending, inside_mpi, w.limit_seconds);
    log_flush();
    note_exit(kExitDeviceFailure);
    _exit(kExitDeviceFailure);
  }
}

}  // namespace

WaitWatch::WaitWatch(const MpiOperation& op, double limit_seconds) : active_(limit_seconds > 0) {
  if (!active_) return;
  Watch& w = the_watch();
  const std::lock_guard<std::mutex> lock(w.mutex);
  if (!w.thread_started) {
    std::thread(watchdog_loop).detach();
    w.thread_started = true;
  }
  w.op = &op;
  w.started = Clock::now();
  w.limit_seconds = limit_seconds;
  w.pending.clear();
  w.aborting = false;
  w.alive_at.store(w.started.time_since_epoch().count());
}

WaitWatch::~WaitWatch() {
  if (!active_) return;
  Watch& w = the_watch();
  const std::lock_guard<std::mutex> lock(w.mutex);
  w.op = nullptr;
}

void WaitWatch::alive() {
  if (active_) the_watch().alive_at.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
}

void WaitWatch::aborting() {
  if (!active_) return;
  Watch& w = the_watch();
  const std::lock_guard<std::mutex> lock(w.mutex);
  w.aborting = true;
  w.alive_at.store(Clock::now().time_since_epoch().count());
}

void WaitWatch::pending(std::string text) {
  if (!active_) return;
  Watch& w = the_watch();
  const std::lock_guard<std::mutex> lock(w.mutex);
  w.pending = std::move(text);
}

}  // namespace strata::comm_detail
