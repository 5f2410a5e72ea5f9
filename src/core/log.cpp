// Log sink: lines go to a queue that one writer thread empties into stdout (info) and stderr
// (warnings, errors), one write per line, in the order they were logged. The training thread never
// waits on its output being read: when nobody reads (mpirun busy ending the job, a closed terminal,
// a pipe to a stalled reader), lines wait here up to a bound and are then dropped and counted.
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

// Queued output beyond this is dropped (counted, and reported once output flows again).
constexpr size_t kMaxQueuedBytes = size_t{8} << 20;

struct Line {
  int fd;
  std::string text;
};

// Created once and never destroyed: the writer may sit in write() on a pipe nobody reads when
// the process exits, and a destroyed queue (or a joinable std::thread) would crash that exit.
struct Sink {
  std::mutex mutex;
  std::condition_variable queued, progressed;
  std::deque<Line> lines;
  size_t queued_bytes = 0;
  size_t dropped = 0;
  bool writing = false;
  bool thread_started = false;
  bool broken[3] = {false, false, false};  // per fd: a write failed (EPIPE, EIO): output goes nowhere
  uint64_t written_lines = 0;
};

Sink* g_sink = nullptr;

void write_line(Sink& s, const Line& line) {
  const char* p = line.text.data();
  size_t left = line.text.size();
  while (left > 0) {
    const ssize_t n = ::write(line.fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::lock_guard<std::mutex> lock(s.mutex);
      s.broken[line.fd] = true;
      return;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
}

void writer_loop(Sink* s) {
  std::unique_lock<std::mutex> lock(s->mutex);
  for (;;) {
    s->queued.wait(lock, [&] { return !s->lines.empty(); });
    Line line = std::move(s->lines.front());
    s->lines.pop_front();
    s->queued_bytes -= line.text.size();
    s->writing = true;
    const bool broken = s->broken[line.fd];
    lock.unlock();
    if (!broken) write_line(*s, line);
    lock.lock();
    s->writing = false;
    ++s->written_lines;
    s->progressed.notify_all();
  }
}

void start_writer(Sink& s) {
  s.thread_started = true;
  std::thread(writer_loop, &s).detach();
}

// fork(): the child has no writer thread and may inherit a locked mutex; it starts afresh (with
// the lines not yet written dropped: the parent writes them).
void before_fork() {
  if (g_sink) g_sink->mutex.lock();
}
void after_fork_in_parent() {
  if (g_sink) g_sink->mutex.unlock();
}
void after_fork_in_child() {
  if (g_sink) g_sink = new Sink();
}

Sink& sink() {
  static std::once_flag once;
  std::call_once(once, [] {
    g_sink = new Sink();
    pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
    std::atexit([] { log_flush(5.0); });
  });
  return *g_sink;
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
  const int fd = level >= LogLevel::Warn ? STDERR_FILENO : STDOUT_FILENO;
  Sink& s = sink();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.thread_started) start_writer(s);
  if (s.queued_bytes + line.size() > kMaxQueuedBytes) {
    ++s.dropped;
    return;
  }
  if (s.dropped > 0 && s.queued_bytes < kMaxQueuedBytes / 2) {
    std::string note = fmt::format("[rank {}] warning: {} log line(s) dropped: the output was not read\n",
                                   std::max(rank, 0), s.dropped);
    s.queued_bytes += note.size();
    s.lines.push_back({STDERR_FILENO, std::move(note)});
    s.dropped = 0;
  }
  s.queued_bytes += line.size();
  s.lines.push_back({fd, std::move(line)});
  s.queued.notify_one();
}

bool log_flush(double max_stall_seconds) {
  if (!g_sink) return true;
  Sink& s = *g_sink;
  std::unique_lock<std::mutex> lock(s.mutex);
  if (!s.thread_started) return s.lines.empty();
  // Waits while lines are written; gives up when none was for max_stall_seconds (nobody reads).
  const auto stall = std::chrono::duration<double>(max_stall_seconds);
  while (!s.lines.empty() || s.writing) {
    const uint64_t before = s.written_lines;
    s.progressed.wait_for(lock, stall, [&] { return s.written_lines != before; });
    if (s.written_lines == before) return false;
  }
  return true;
}

}  // namespace strata
