// Log sink: info lines go to stdout, warnings and errors to stderr, each stream through its own
// queue and writer thread, one write per line, in the order they were logged. The training thread
// never waits on its output being read: when nobody reads (mpirun busy ending the job, a closed
// terminal, a pipe to a stalled reader), lines wait here up to a bound and are then dropped and
// counted. A stdout nobody reads never holds back an error: the streams do not share a writer.
#include "core/log.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <thread>

#include "core/process.h"

namespace strata {
namespace {

LogLevel g_min_level = LogLevel::Info;

// Queued output of one stream beyond this is dropped (counted, and reported once output flows
// again).
constexpr size_t kMaxQueuedBytes = size_t{8} << 20;

// One output stream. Created once and never destroyed: the writer may sit in write() on a pipe
// nobody reads when the process exits, and a destroyed queue (or a joinable std::thread) would
// crash that exit.
struct Stream {
  explicit Stream(int fd_) : fd(fd_) {}
  const int fd;
  std::mutex mutex;
  std::condition_variable queued, progressed;
  std::deque<std::string> lines;
  size_t queued_bytes = 0;
  size_t dropped = 0;
  bool writing = false;
  bool thread_started = false;
  bool broken = false;  // a write failed (EPIPE, EIO): output goes nowhere
  uint64_t written_lines = 0;
};

Stream* g_out = nullptr;
Stream* g_err = nullptr;

// False when the stream is broken.
bool write_line(int fd, const std::string& text) {
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    left -= static_cast<size_t>(n);
  }
  return true;
}

void writer_loop(Stream* s) {
  std::unique_lock<std::mutex> lock(s->mutex);
  for (;;) {
    s->queued.wait(lock, [&] { return !s->lines.empty(); });
    std::string line = std::move(s->lines.front());
    s->lines.pop_front();
    s->queued_bytes -= line.size();
    s->writing = true;
    const bool broken = s->broken;
    lock.unlock();
    const bool written = broken || write_line(s->fd, line);
    lock.lock();
    if (!written) s->broken = true;
    s->writing = false;
    ++s->written_lines;
    s->progressed.notify_all();
  }
}

// Queues one line; the caller holds s.mutex.
void enqueue(Stream& s, std::string line) {
  if (!s.thread_started) {
    s.thread_started = true;
    std::thread(writer_loop, &s).detach();
  }
  s.queued_bytes += line.size();
  s.lines.push_back(std::move(line));
  s.queued.notify_one();
}

// fork(): the child has no writer threads and may inherit a locked mutex; it starts afresh (with
// the lines not yet written dropped: the parent writes them).
void before_fork() {
  if (g_out) g_out->mutex.lock();
  if (g_err) g_err->mutex.lock();
}
void after_fork_in_parent() {
  if (g_err) g_err->mutex.unlock();
  if (g_out) g_out->mutex.unlock();
}
void after_fork_in_child() {
  if (g_out) g_out = new Stream(STDOUT_FILENO);
  if (g_err) g_err = new Stream(STDERR_FILENO);
}

void create_streams() {
  static std::once_flag once;
  std::call_once(once, [] {
    g_out = new Stream(STDOUT_FILENO);
    g_err = new Stream(STDERR_FILENO);
    pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
    std::atexit([] { log_flush(5.0); });
  });
}

// Waits until the stream has written what it holds, or until no line was written for `stall`.
bool flush_stream(Stream* s, std::chrono::duration<double> stall) {
  if (s == nullptr) return true;
  std::unique_lock<std::mutex> lock(s->mutex);
  if (!s->thread_started) return s->lines.empty();
  while (!s->lines.empty() || s->writing) {
    const uint64_t before = s->written_lines;
    s->progressed.wait_for(lock, stall, [&] { return s->written_lines != before; });
    if (s->written_lines == before) return false;
  }
  return true;
}

}  // namespace

void set_log_level(LogLevel min_level) { g_min_level = min_level; }
LogLevel log_level() { return g_min_level; }

void log_message(LogLevel level, const std::string& text) {
  if (level < g_min_level) return;
  const int rank = process_rank();
  std::string line;
  switch (level) {
    case LogLevel::Debug:
    case LogLevel::Info:
      if (rank > 0) return;
      line = text;
      break;
    case LogLevel::Warn:
      line = rank >= 0 ? fmt::format("[rank {}] warning: {}", rank, text) : "warning: " + text;
      break;
    case LogLevel::Error:
      line = rank >= 0 ? fmt::format("[rank {}] error: {}", rank, text) : "error: " + text;
      break;
  }
  line += '\n';
  create_streams();
  Stream& s = level >= LogLevel::Warn ? *g_err : *g_out;
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.queued_bytes + line.size() > kMaxQueuedBytes) {
    ++s.dropped;
    return;
  }
  if (s.dropped > 0 && s.queued_bytes < kMaxQueuedBytes / 2) {
    enqueue(s, fmt::format("[rank {}] warning: {} log line(s) dropped: the output was not read\n", std::max(rank, 0),
                           s.dropped));
    s.dropped = 0;
  }
  enqueue(s, std::move(line));
}

bool log_flush(double max_stall_seconds) {
  // stderr first: the error that explains an abort matters more than the progress before it.
  const auto stall = std::chrono::duration<double>(max_stall_seconds);
  const bool errors_written = flush_stream(g_err, stall);
  return flush_stream(g_out, stall) && errors_written;
}

}  // namespace strata
