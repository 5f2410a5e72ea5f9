// Part of src/comm's public header (comm.h): the DP × PP × TP rank grid, and the Topology that
// owns one communicator per group this rank belongs to.
#pragma once
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "comm/runtime.h"

namespace strata {

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

// The rank grid with one communicator per group this rank belongs to. Built collectively
// by every rank of the world; passed explicitly to whoever communicates. The groups use
// `backend`; world is always an MPI communicator, as it carries the host-side scalars (loss,
// gradient-norm parts, stop flags) and the checks between ranks.
class Topology {
 public:
  // Throws UserError when shape.world() differs from the world size. `access` (optional)
  // is how the communicators reach device tensors (see make_comm).
  Topology(const MpiRuntime& mpi, const GridShape& shape, CommBackendKind backend,
           const DeviceAccess* access = nullptr);
  ~Topology();
  Topology(const Topology&) = delete;
  Topology& operator=(const Topology&) = delete;

  const GridShape& shape() const { return shape_; }
  const GridCoord& coord() const { return coord_; }
  int world_rank() const { return world_rank_; }
  Comm& world();
  Comm& dp();              // same (pp, tp), dp varies; group rank = dp
  Comm& tp();              // same (pp, dp), tp varies; group rank = tp
  Comm& pp();              // same (dp, tp), pp varies; group rank = pp
  // First and last PP stage of this (dp, tp) (group rank 0 = first stage); nullptr on the
  // stages between; when PP == 1 a group of this rank alone.
  Comm* embedding();
  std::vector<Comm*> all_comms();  // every communicator this rank belongs to (for traffic reports)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  GridShape shape_;
  GridCoord coord_;
  int world_rank_ = 0;
};

}  // namespace strata
