// Private to src/comm: operations of the MPI backend in flight. An operation is a chain of
// phases (posted point-to-point requests, then local work that may post the next phase);
// one process-wide progress engine advances every operation of every communicator.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace strata::comm_detail {

// Who an operation's peers are, for messages: the communicator name and the world rank of
// each group rank.
struct GroupInfo {
  std::string comm_name;
  std::vector<int> world_ranks;
};

class MpiOperation {
 public:
  MpiOperation(std::shared_ptr<const GroupInfo> group, const void* owner, std::string description);

  // Posts a message of `count` elements of `elem_bytes` bytes, split into pieces MPI's int
  // counts can hold (pieces keep their order: same source, tag and communicator).
  void post_send(const void* data, int64_t count, int elem_bytes, MPI_Datatype type, int peer, int tag, MPI_Comm comm);
  void post_recv(void* data, int64_t count, int elem_bytes, MPI_Datatype type, int peer, int tag, MPI_Comm comm);
  // Work to run once every request posted so far has completed; it may post more.
  void then(std::function<void()> step) { steps_.push_back(std::move(step)); }

  // Tests the posted requests and runs steps while they complete; true when it moved.
  bool advance();
  bool done() const { return done_; }
  const void* owner() const { return owner_; }
  // One line for a timeout: the communicator, the operation and the peers still pending.
  std::string describe_pending() const;
  // The communicator and the operation only (what never changes while it runs).
  std::string describe() const;

  // Receive space for phases that reduce; uninitialised (it is always written first).
  unsigned char* allocate_scratch(size_t bytes);
  unsigned char* scratch() const { return scratch_.get(); }

 private:
  std::shared_ptr<const GroupInfo> group_;
  const void* owner_;
  std::string description_;
  std::vector<MPI_Request> requests_;
  std::vector<int> request_peers_;  // group rank each request talks to
  std::vector<bool> request_is_recv_;
  std::vector<int> completed_indices_;  // MPI_Testsome's output, kept to avoid reallocating
  std::unique_ptr<unsigned char[]> scratch_;
  std::vector<std::function<void()>> steps_;
  size_t next_step_ = 0;
  bool done_ = false;
};

// Registers an operation with the progress engine and advances it once.
void start_operation(const std::shared_ptr<MpiOperation>& op);
// Advances every registered operation of every communicator.
void progress_all();
// Progresses everything until `op` is done. Past comm_timeout_seconds() it logs which
// peers never answered and aborts the job (no rank stays hung on a dead or stalled peer).
void wait_operation(MpiOperation& op);
// Waits for every registered operation whose owner is `owner` (a communicator closing).
void wait_owned_by(const void* owner);

// The host of every world rank (rank_placement learns them), for naming ranks in messages.
void set_world_hosts(std::vector<std::string> hosts);
// "world rank 2 (node1)", or "world rank 2" while the hosts are unknown.
std::string world_rank_name(int world_rank);

// A wait watched from outside (wait_watchdog.cpp): a rank can block inside an MPI call, where
// wait_operation's own timeout check never runs (Open MPI's TCP transport does when a peer's
// node is lost). Past the limit, with the waiting thread not back from MPI for a while, a
// watchdog thread prints what the wait was for (the pending peers as last described) and
// ends the process with exit code 3. No watch when the limit is 0 (timeouts off).
class WaitWatch {
 public:
  WaitWatch(const MpiOperation& op, double limit_seconds);
  ~WaitWatch();
  WaitWatch(const WaitWatch&) = delete;
  WaitWatch& operator=(const WaitWatch&) = delete;
  // The waiting thread is between MPI calls.
  void alive();
  // The pending peers, as describe_pending says them now.
  void pending(std::string text);
  // The waiting thread has reported the timeout itself and now aborts the job: should MPI_Abort
  // not return either, the watchdog only ends the process.
  void aborting();

 private:
  bool active_;
};

}  // namespace strata::comm_detail
