// The log sink: the training thread never waits on its output being read, lines that are read
// arrive whole and in order, and a flush gives up when nobody reads.
#include "catch_compat.h"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "core/core.h"

using namespace strata;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Runs body in a child whose stdout is a pipe; returns the child's exit code. The pipe is read
// only when `read_output` (then into *text), else never (a stalled reader).
template <typename Body>
int in_child_with_piped_stdout(bool read_output, std::string* text, Body body) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], STDOUT_FILENO);
    alarm(30);  // a sink that blocks fails the test rather than hanging it
    _exit(body());
  }
  close(fds[1]);
  if (read_output) {
    char buffer[65536];
    for (ssize_t n; (n = read(fds[0], buffer, sizeof(buffer))) > 0;) text->append(buffer, static_cast<size_t>(n));
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  close(fds[0]);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

}  // namespace

TEST_CASE("logging returns at once when nobody reads the output, and a flush then gives up") {
  const int code = in_child_with_piped_stdout(false, nullptr, [] {
    // 20 MiB of lines: far beyond a pipe's 64 KiB, and beyond the sink's bound (the rest dropped).
    const std::string line(1000, 'x');
    const auto started = std::chrono::steady_clock::now();
    for (int i = 0; i < 20000; ++i) log_info("{} {}", i, line);
    if (seconds_since(started) > 5.0) return 1;  // blocked on the pipe
    const auto flush_started = std::chrono::steady_clock::now();
    if (log_flush(0.5)) return 2;  // nothing can have drained
    if (seconds_since(flush_started) > 3.0) return 3;
    _exit(0);  // exit's own flush would wait its 5 s for nothing
  });
  CHECK(code == 0);
}

TEST_CASE("lines that are read arrive whole and in order") {
  std::string text;
  const int code = in_child_with_piped_stdout(true, &text, [] {
    for (int i = 0; i < 1000; ++i) log_info("line {}", i);
    return log_flush(5.0) ? 0 : 1;
  });
  CHECK(code == 0);
  std::string expected;
  for (int i = 0; i < 1000; ++i) expected += "line " + std::to_string(i) + "\n";
  CHECK(text == expected);
}

TEST_CASE("an error reaches stderr while nobody reads stdout") {
  int out[2], err[2];
  REQUIRE(pipe(out) == 0);
  REQUIRE(pipe(err) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(out[0]);
    close(err[0]);
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    alarm(30);
    // Progress lines fill stdout's pipe and its queue; the error that follows must not wait
    // behind them.
    const std::string line(1000, 'x');
    for (int i = 0; i < 2000; ++i) log_info("{} {}", i, line);
    log_error("the reason this process ends");
    const bool all_written = log_flush(0.5);
    _exit(all_written ? 1 : 0);  // stdout cannot have drained
  }
  close(out[1]);
  close(err[1]);
  std::string text;
  char buffer[4096];
  for (ssize_t n; (n = read(err[0], buffer, sizeof(buffer))) > 0;) text.append(buffer, static_cast<size_t>(n));
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  close(out[0]);
  close(err[0]);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(text == "error: the reason this process ends\n");
}
