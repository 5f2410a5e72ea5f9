// The rank grid's groups: one communicator per group this rank belongs to, each made by a
// collective MPI_Comm_split of the world (every rank makes every split, in the same order,
// members or not) and then wrapped in the chosen backend.
#include <fmt/core.h>

#include "comm/comm.h"
#include "core/core.h"

namespace strata {

struct Topology::Impl {
  std::unique_ptr<Comm> world, dp, tp, pp, embedding;
};

namespace {

// Splits the world by `color` (MPI_UNDEFINED: not a member) ordered by `key`, wraps the
// result, and frees the split (the wrapper keeps its own duplicate).
std::unique_ptr<Comm> split_group(int color, int key, CommBackendKind backend, const DeviceAccess* access,
                                  const char* name) {
  MPI_Comm split = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, color, key, &split));
  if (split == MPI_COMM_NULL) return nullptr;
  MPI_CHECK(MPI_Comm_set_errhandler(split, MPI_ERRORS_RETURN));
  std::unique_ptr<Comm> comm;
  try {
    comm = make_comm(backend, split, name, access);
  } catch (...) {
    MPI_Comm_free(&split);
    throw;
  }
  MPI_CHECK(MPI_Comm_free(&split));
  return comm;
}

}  // namespace

Topology::Topology(const MpiRuntime& mpi, const GridShape& shape, CommBackendKind backend,
                   const DeviceAccess* access)
    : impl_(std::make_unique<Impl>()), shape_(shape), world_rank_(mpi.world_rank()) {
  if (shape.dp < 1 || shape.tp < 1 || shape.pp < 1 || shape.world() != mpi.world_size())
    throw UserError(
        fmt::format("parallel layout DP {} × PP {} × TP {} = {} ranks, but the job has {}: choose "
                    "tensor_model_parallel_size × pipeline_model_parallel_size dividing the world size "
                    "(DP is the quotient) or start a matching number of ranks",
                    shape.dp, shape.pp, shape.tp, shape.world(), mpi.world_size()),
        RaisedOn::EveryRank);  // the same shape and job on every rank
  coord_ = grid_coord(shape, world_rank_);
  const GridCoord c = coord_;
  impl_->world = split_group(0, world_rank_, CommBackendKind::Mpi, access, "world");
  impl_->dp = split_group(c.pp * shape.tp + c.tp, c.dp, backend, access, "dp");
  impl_->tp = split_group(c.pp * shape.dp + c.dp, c.tp, backend, access, "tp");
  impl_->pp = split_group(c.dp * shape.tp + c.tp, c.pp, backend, access, "pp");
  // The tied embedding lives on the first and last stage; with one stage, on this rank alone.
  const bool end_stage = c.pp == 0 || c.pp == shape.pp - 1;
  const int embedding_color = shape.pp == 1 ? world_rank_ : (end_stage ? c.dp * shape.tp + c.tp : MPI_UNDEFINED);
  impl_->embedding = split_group(embedding_color, c.pp, backend, access, "embedding");

  // TP exchanges activations every layer; across nodes it would crawl. Worth a warning
  // (from rank 0 only: layouts are uniform, so its group speaks for all).
  MPI_Comm node_of_tp = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, c.pp * shape.dp + c.dp, c.tp, &node_of_tp));
  MPI_Comm same_node = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split_type(node_of_tp, MPI_COMM_TYPE_SHARED, c.tp, MPI_INFO_NULL, &same_node));
  int on_node = 0;
  MPI_CHECK(MPI_Comm_size(same_node, &on_node));
  if (on_node < shape.tp && world_rank_ == 0)
    log_warn(
        "tensor-parallel group of (dp {}, pp {}) spans several nodes ({} of its {} ranks share this node); "
        "place TP groups inside a node (TP varies fastest in the rank order)",
        c.dp, c.pp, on_node, shape.tp);
  MPI_CHECK(MPI_Comm_free(&same_node));
  MPI_CHECK(MPI_Comm_free(&node_of_tp));
}

Topology::~Topology() = default;

Comm& Topology::world() { return *impl_->world; }
Comm& Topology::dp() { return *impl_->dp; }
Comm& Topology::tp() { return *impl_->tp; }
Comm& Topology::pp() { return *impl_->pp; }
Comm* Topology::embedding() { return impl_->embedding.get(); }

std::vector<Comm*> Topology::all_comms() {
  std::vector<Comm*> comms = {impl_->world.get(), impl_->dp.get(), impl_->tp.get(), impl_->pp.get()};
  if (impl_->embedding) comms.push_back(impl_->embedding.get());
  return comms;
}

}  // namespace strata
