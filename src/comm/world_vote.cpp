// Non-blocking votes over the world: each is an MPI_Iallreduce (MAX) of one flag on a
// communicator of its own, started at once and waited for later, so that ranks can agree on
// something (a stop part-way through a pipelined step) without waiting for each other at once.
#include "comm/comm.h"
#include "core/core.h"

namespace strata {

WorldVote::WorldVote(const MpiRuntime& mpi) : size_(mpi.world_size()) {
  if (size_ == 1) return;
  MPI_CHECK(MPI_Comm_dup(mpi.world(), &comm_));
  MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
}

WorldVote::~WorldVote() {
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

int WorldVote::post(bool yes) {
  const int index = static_cast<int>(votes_.size());
  votes_.push_back({yes ? 1 : 0, yes ? 1 : 0, MPI_REQUEST_NULL, size_ == 1});
  Vote& v = votes_.back();
  if (!v.done) MPI_CHECK(MPI_Iallreduce(&v.mine, &v.any, 1, MPI_INT, MPI_MAX, comm_, &v.request));
  return index;
}

bool WorldVote::any_yes(int index) {
  Vote& v = votes_.at(static_cast<size_t>(index));
  if (!v.done) {
    MPI_CHECK(MPI_Wait(&v.request, MPI_STATUS_IGNORE));
    v.done = true;
  }
  return v.any != 0;
}

void WorldVote::finish() {
  for (size_t i = 0; i < votes_.size(); ++i) any_yes(static_cast<int>(i));
  votes_.clear();
}

}  // namespace strata
