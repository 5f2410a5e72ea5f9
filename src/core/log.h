// Rank-aware logging on fmt: info and debug print on rank 0 only; warnings and errors
// print on every rank with a "[rank r]" prefix so multi-rank failures are attributable.
// Logging never blocks on the output being read: a writer thread per stream writes the lines.
#pragma once
#include <fmt/core.h>

#include <string>

namespace strata {

enum class LogLevel { Debug, Info, Warn, Error };

void log_message(LogLevel level, const std::string& text);
void set_log_level(LogLevel min_level);
LogLevel log_level();
// Waits until every line logged so far is written, or until no line could be written for
// `max_stall_seconds` (nobody reads the output); false then. Runs at exit; call it before
// ending the process any other way (MPI_Abort, _exit).
bool log_flush(double max_stall_seconds = 2.0);

template <typename... Args>
void log_info(fmt::format_string<Args...> f, Args&&... args) {
  log_message(LogLevel::Info, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void log_warn(fmt::format_string<Args...> f, Args&&... args) {
  log_message(LogLevel::Warn, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void log_error(fmt::format_string<Args...> f, Args&&... args) {
  log_message(LogLevel::Error, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace strata
