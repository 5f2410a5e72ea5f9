// Public header of src/comm: the MPI runtime (process start-up, rank identity, node-local
// ranks) and the rank grid. Collectives across groups arrive with data parallelism.
#pragma once
#include <mpi.h>

#include <string>
#include <vector>

namespace strata {

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
  int local_rank() const { return local_rank_; }   // rank among the processes on this node
  int local_size() const { return local_size_; }
  const std::string& hostname() const { return hostname_; }
  MPI_Comm world() const { return MPI_COMM_WORLD; }
  void barrier() const;

 private:
  int world_rank_ = 0, world_size_ = 1, local_rank_ = 0, local_size_ = 1;
  std::string hostname_;
  MPI_Comm node_comm_ = MPI_COMM_NULL;
};

// The DP × PP × TP grid. Rank order: TP fastest, then DP, then PP:
// rank = (pp * DP + dp) * TP + tp.
struct GridCoord {
  int dp = 0, pp = 0, tp = 0;
};
struct GridShape {
  int dp = 1, pp = 1, tp = 1;
  int world() const { return dp * pp * tp; }
};
GridCoord grid_coord(const GridShape& shape, int rank);
int grid_rank(const GridShape& shape, const GridCoord& coord);

// MPI's library version line, e.g. "Open MPI v4.1.4, ...".
std::string mpi_library_version();

// `strata info`: prints the job's ranks, hosts, GPUs and library versions (rank 0).
int run_info(const MpiRuntime& mpi);

}  // namespace strata
