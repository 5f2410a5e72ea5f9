// Part of src/comm's public header (comm.h): the MPI runtime (process start-up, rank identity,
// node-local ranks), the world's votes, and the agreement on user errors before collectives.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace strata {

namespace comm_detail {
class MpiOperation;
struct GroupInfo;
}  // namespace comm_detail

// Owns MPI for the process: initialises it (a plain `strata ...` runs as a one-rank MPI
// singleton), makes MPI errors return to us instead of aborting silently, and finalises.
class MpiRuntime {
 public:
  MpiRuntime(int* argc, char*** argv);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  int local_rank() const { return local_rank_; }  // rank among the processes on this node
  int local_size() const { return local_size_; }
  const std::string& hostname() const { return hostname_; }
  MPI_Comm world() const { return MPI_COMM_WORLD; }

  // Collectives over the world for the run's control (checkpoint saves, agreements), on a
  // communicator of their own. Like Comm's, they wait at most comm_timeout_seconds() and then
  // abort the job naming the ranks that never answered: a dead node must not hang a save.
  void barrier() const;
  // Every rank's values (the same count on each), rank after rank.
  std::vector<int64_t> all_gather(const std::vector<int64_t>& mine) const;
  // root's bytes on every rank (resized to root's length).
  void broadcast(std::string& bytes, int root) const;

 private:
  // One operation whose messages `post` posts (with a fresh tag), waited for with the timeout.
  void exchange(const char* what, const std::function<void(comm_detail::MpiOperation&, int tag)>& post) const;

  int world_rank_ = 0, world_size_ = 1, local_rank_ = 0, local_size_ = 1;
  std::string hostname_;
  MPI_Comm node_comm_ = MPI_COMM_NULL;
  MPI_Comm control_comm_ = MPI_COMM_NULL;
  std::shared_ptr<const comm_detail::GroupInfo> control_group_;
  mutable int control_tag_ = 0;
};

// The launcher's start-up marker: when STRATA_STARTED_FILE is set (launch/slurm.sbatch sets it
// for its job step), every rank waits until all are through MPI's start-up and rank 0 then
// creates that file. A step that dies without it failed while starting (Open MPI and the
// launcher's PMIx can crash there), not while training, and the launcher may run it again.
void create_start_marker_if_asked(const MpiRuntime& mpi);

// A round of non-blocking yes/no votes over the world (MPI_Iallreduce of a flag on a
// communicator of its own). Every rank posts the same number of votes in the same order; post()
// returns at once, any_yes(i) waits until every rank has posted vote i and says whether one voted
// yes; finish() waits for every vote posted and starts the next round at index 0. Votes in flight
// hold no rank back: a rank waits only when it asks for a result. Main thread only.
class WorldVote {
 public:
  explicit WorldVote(const MpiRuntime& mpi);
  ~WorldVote();
  WorldVote(const WorldVote&) = delete;
  WorldVote& operator=(const WorldVote&) = delete;

  int post(bool yes);
  bool any_yes(int index);
  void finish();

 private:
  struct Vote {
    int mine = 0, any = 0;
    MPI_Request request = MPI_REQUEST_NULL;
    bool done = false;
  };
  int size_ = 1;
  MPI_Comm comm_ = MPI_COMM_NULL;
  std::deque<Vote> votes_;  // stable addresses: MPI writes into them while in flight
};

// Collective over the world: runs `step` (set-up that a rank does on its own: opening files,
// choosing a device) and then agrees on the outcome. A UserError on some ranks only becomes a
// UserError on every rank, naming `what`, the ranks that failed and the first one's host and
// message, rather than leaving the other ranks blocked in their next collective. When every
// rank fails, each rethrows its own error (main reports rank 0's). Other exceptions pass
// through untouched (main aborts the job for them).
void agree_on_user_errors(const MpiRuntime& mpi, const std::string& what, const std::function<void()>& step);
// Collective over the world: which ranks run on which host, hosts in order of their first rank,
// runs of consecutive ranks joined: "node0: ranks 0-1; node1: ranks 2-3".
std::string rank_placement(const MpiRuntime& mpi);
// The lowest rank whose `width` values in an MpiRuntime::all_gather result differ from rank 0's;
// -1 when every rank agrees with rank 0.
int first_rank_unlike_rank0(const std::vector<int64_t>& all, size_t width);

// MPI's library version line, e.g. "Open MPI v4.1.4, ...".
std::string mpi_library_version();

}  // namespace strata
