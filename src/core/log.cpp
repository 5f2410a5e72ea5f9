// Log sink: stdout for info, stderr for warnings/errors, one write per line so lines
// from concurrent ranks do not interleave mid-line.
#include "core/log.h"

#include <cstdio>
#include <mutex>

#include "core/process.h"

namespace strata {
namespace {
LogLevel g_min_level = LogLevel::Info;
std::mutex g_log_mutex;
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
  std::lock_guard<std::mutex> lock(g_log_mutex);
  FILE* out = level >= LogLevel::Warn ? stderr : stdout;
  std::fwrite(line.data(), 1, line.size(), out);
  std::fflush(out);
}

}  // namespace strata
