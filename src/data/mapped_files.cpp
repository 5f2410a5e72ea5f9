// The SIGBUS guard of the token shards' memory maps. The registry is a fixed table whose
// entries are published with atomics, so the handler can scan it without taking a lock; each
// entry carries its whole message, written with one write(2), as a signal handler must.
#include "data/mapped_files.h"

#include <fmt/core.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>

#include "core/error.h"
#include "core/process.h"

namespace strata {
namespace {

struct Entry {
  std::atomic<const char*> begin{nullptr};
  const char* end = nullptr;
  char message[768] = {};
  size_t length = 0;
};

constexpr size_t kEntries = 4096;
Entry g_entries[kEntries];
std::mutex g_mutex;
bool g_installed = false;

void on_sigbus(int sig, siginfo_t* info, void*) {
  const char* address = static_cast<const char*>(info->si_addr);
  for (Entry& e : g_entries) {
    const char* begin = e.begin.load(std::memory_order_acquire);
    if (begin && address >= begin && address < e.end) {
      ssize_t ignored = ::write(STDERR_FILENO, e.message, e.length);
      (void)ignored;
      // launch/strata-mpirun's exit file: the wrapper then ends the job at once, not after
      // mpirun's kill sequence.
      note_exit_from_signal(kExitUserError);
      ::_exit(kExitUserError);
    }
  }
  // Not a shard's page: the default action (a crash report by the system).
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

void register_mapped_file(const void* base, size_t bytes, const std::string& path) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_installed) {
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGBUS, &sa, nullptr);
    g_installed = true;
  }
  prepare_exit_note_for_signals();  // the rank is known once shards are opened
  for (Entry& e : g_entries) {
    if (e.begin.load(std::memory_order_relaxed)) continue;
    const int rank = process_rank();
    const std::string text = fmt::format(
        "{}error: data shard {} changed while this run read it (cut short or rewritten in place; shards are read "
        "through a memory map): restore it, or re-create the data and resume from the last checkpoint\n",
        rank >= 0 ? fmt::format("[rank {}] ", rank) : std::string(), path);
    e.length = std::min(text.size(), sizeof(e.message));
    std::memcpy(e.message, text.data(), e.length);
    e.end = static_cast<const char*>(base) + bytes;
    e.begin.store(static_cast<const char*>(base), std::memory_order_release);
    return;
  }
  // Past the table's size a cut shard ends in a plain SIGBUS: the run still stops.
}

void unregister_mapped_file(const void* base) {
  std::lock_guard<std::mutex> lock(g_mutex);
  for (Entry& e : g_entries) {
    if (e.begin.load(std::memory_order_relaxed) == base) e.begin.store(nullptr, std::memory_order_release);
  }
}

}  // namespace strata
