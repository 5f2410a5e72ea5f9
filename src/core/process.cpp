// Process-wide rank for log prefixes and fatal errors; the only global in strata, kept
// so that checking macros deep inside any subsystem can name the failing rank.
#include "core/process.h"

#include <mpi.h>

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "core/error.h"
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
  note_exit(code);
  if (mpi_is_initialized()) MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();
}

void note_exit(int code) {
  const std::string prefix = exit_note_prefix();
  if (prefix.empty()) return;
  // Best effort: without the file the wrapper waits for mpirun, as plain mpirun does.
  const std::string path = prefix + std::to_string(code);
  if (std::FILE* f = std::fopen(path.c_str(), "w")) std::fclose(f);
}

namespace {
// "DIR/rank-R.PID", the start of this rank's files for launch/strata-mpirun ("" without it).
std::string rank_note_stem() {
  const char* dir = std::getenv("STRATA_EXIT_DIR");
  if (!dir || !*dir) return "";
  return std::string(dir) + "/rank-" + std::to_string(process_rank()) + "." + std::to_string(getpid());
}
}  // namespace

void note_rank_started() {
  const std::string stem = rank_note_stem();
  if (stem.empty()) return;
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) return;  // the wrapper could not tell its node's ranks
  // With the PID namespace: a rank in a container of its own has a PID the wrapper cannot look up.
  char pid_namespace[256] = {};
  if (readlink("/proc/self/ns/pid", pid_namespace, sizeof pid_namespace - 1) < 0) pid_namespace[0] = '\0';
  const std::string path = stem + ".started";
  // Renamed into place: the wrapper never reads it half written.
  const std::string partial = path + ".partial";
  std::FILE* f = std::fopen(partial.c_str(), "w");
  if (!f) return;
  const bool written = std::fprintf(f, "%s %s\n", host, pid_namespace) > 0;
  if (std::fclose(f) == 0 && written) std::rename(partial.c_str(), path.c_str());
}

std::string exit_note_prefix() {
  const std::string stem = rank_note_stem();
  return stem.empty() ? "" : stem + ".exit";
}

namespace {
char g_signal_exit_note[4096];  // exit_note_prefix() for note_exit_from_signal, or empty
}  // namespace

void prepare_exit_note_for_signals() {
  const std::string note = exit_note_prefix();
  if (note.size() >= sizeof g_signal_exit_note || note == g_signal_exit_note) return;
  std::memcpy(g_signal_exit_note, note.c_str(), note.size() + 1);
}

void note_exit_from_signal(int code) {
  if (g_signal_exit_note[0] == '\0' || code < 0 || code > 999) return;
  char path[sizeof g_signal_exit_note + 4];
  size_t n = std::strlen(g_signal_exit_note);
  std::memcpy(path, g_signal_exit_note, n);
  if (code >= 100) path[n++] = static_cast<char>('0' + code / 100);
  if (code >= 10) path[n++] = static_cast<char>('0' + code / 10 % 10);
  path[n++] = static_cast<char>('0' + code % 10);
  path[n] = '\0';
  const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) close(fd);
}

bool launcher_asked_to_stop() {
  const char* dir = std::getenv("STRATA_EXIT_DIR");
  return dir && *dir && access((std::string(dir) + "/stop").c_str(), F_OK) == 0;
}

int64_t meminfo_bytes(const char* name) {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == name) return kib * 1024;
  }
  return 0;
}

}  // namespace strata
