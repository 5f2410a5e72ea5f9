// The watchdog over the MPI backend's waits, in a child process each: a wait whose thread never
// comes back from MPI ends the process with exit 3 once past the limit, saying what it waited
// for; a wait whose thread keeps coming back is left to its own timeout check.
#include "catch_compat.h"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "comm/mpi_progress.h"

using namespace strata;
using namespace strata::comm_detail;

namespace {

struct ChildResult {
  int exit_code = -1;
  double seconds = 0;
  std::string stderr_text;
};

// Runs `body` in a child process (its stderr captured); the child exits 0 when body returns.
template <typename Body>
ChildResult run_in_child(Body body) {
  int pipe_fds[2];
  REQUIRE(pipe(pipe_fds) == 0);
  const auto started = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(pipe_fds[0]);
    dup2(pipe_fds[1], STDERR_FILENO);
    body();
    _exit(0);
  }
  close(pipe_fds[1]);
  ChildResult result;
  char buffer[4096];
  for (ssize_t n; (n = read(pipe_fds[0], buffer, sizeof(buffer))) > 0;) result.stderr_text.append(buffer, size_t(n));
  close(pipe_fds[0]);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  return result;
}

MpiOperation make_operation() {
  auto group = std::make_shared<GroupInfo>();
  group->comm_name = "dp";
  group->world_ranks = {0, 2};
  return MpiOperation(group, nullptr, "all_reduce #7 (64 bytes)");
}

}  // namespace

TEST_CASE("a wait stuck inside MPI past the limit ends the process with exit 3, naming what it waited for") {
  const ChildResult child = run_in_child([] {
    MpiOperation op = make_operation();
    WaitWatch watch(op, 0.5);
    watch.pending(op.describe() + ": no data yet from world rank 2 (node1)");
    // Never back from "MPI": no alive() while the watchdog looks.
    std::this_thread::sleep_for(std::chrono::seconds(20));
  });
  INFO(child.stderr_text);
  CHECK(child.exit_code == 3);
  // The limit (0.5 s) and two seconds inside MPI, seen by polls every 0.25 s.
  CHECK(child.seconds >= 2.0);
  CHECK(child.seconds < 6.0);
  CHECK(child.stderr_text.find("communication timeout") != std::string::npos);
  CHECK(child.stderr_text.find("all_reduce #7 (64 bytes) on communicator 'dp' (world ranks 0,2): no data yet from "
                               "world rank 2 (node1)") != std::string::npos);
  CHECK(child.stderr_text.find("inside the MPI library") != std::string::npos);
}

TEST_CASE("a wait whose thread keeps coming back from MPI is not ended by the watchdog") {
  const ChildResult child = run_in_child([] {
    MpiOperation op = make_operation();
    WaitWatch watch(op, 0.5);
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(3000);
    while (std::chrono::steady_clock::now() < until) {
      watch.alive();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  INFO(child.stderr_text);
  CHECK(child.exit_code == 0);
  CHECK(child.stderr_text.empty());
}

TEST_CASE("a wait with timeouts off (limit 0) is never ended by the watchdog") {
  const ChildResult child = run_in_child([] {
    MpiOperation op = make_operation();
    WaitWatch watch(op, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(2600));
  });
  CHECK(child.exit_code == 0);
  CHECK(child.stderr_text.empty());
}

TEST_CASE("a rank name carries its host once the hosts are known") {
  CHECK(world_rank_name(3) == "world rank 3");
  set_world_hosts({"node0", "node0", "node1", "node1"});
  CHECK(world_rank_name(3) == "world rank 3 (node1)");
  CHECK(world_rank_name(7) == "world rank 7");
  set_world_hosts({});
}
