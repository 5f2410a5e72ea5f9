// Topology at the job's world size: for every DP × PP × TP layout of the world, each group
// has the right members in the right order (checked by actually gathering world ranks over
// it), this rank's coordinates and group ranks are right, and the embedding group spans the
// first and last stage. Literal expectations pin the rank order for four ranks.
#include "catch_compat.h"

#include "mpi_test_util.h"

using namespace strata;

namespace {

// Gathers every member's world rank over the communicator itself.
std::vector<int32_t> gathered_world_ranks(Comm& comm) {
  int32_t mine = strata_test::mpi().world_rank();
  std::vector<int32_t> all(static_cast<size_t>(comm.size()));
  comm.all_gather(Tensor(&mine, DType::I32, {1}), Tensor(all.data(), DType::I32, {comm.size()}));
  return all;
}

std::vector<int32_t> to32(const std::vector<int>& v) { return std::vector<int32_t>(v.begin(), v.end()); }

void check_group(Comm& comm, const std::vector<int>& members, int expected_rank) {
  INFO("group " << comm.name());
  CHECK(comm.size() == static_cast<int>(members.size()));
  CHECK(comm.rank() == expected_rank);
  CHECK(comm.world_ranks() == members);
  CHECK(gathered_world_ranks(comm) == to32(members));
}

std::vector<GridShape> layouts_of(int world) {
  std::vector<GridShape> shapes;
  for (int tp = 1; tp <= world; ++tp)
    for (int pp = 1; tp * pp <= world; ++pp)
      if (world % (tp * pp) == 0) shapes.push_back(GridShape{world / (tp * pp), pp, tp});
  return shapes;
}

}  // namespace

TEST_CASE("grid_coord and grid_rank follow rank = (pp * DP + dp) * TP + tp") {
  const GridShape shape{3, 2, 4};  // dp 3, pp 2, tp 4
  CHECK(grid_rank(shape, GridCoord{1, 1, 2}) == (1 * 3 + 1) * 4 + 2);
  const GridCoord c = grid_coord(shape, 23);
  CHECK((c.dp == 2 && c.pp == 1 && c.tp == 3));
  for (int r = 0; r < shape.world(); ++r) CHECK(grid_rank(shape, grid_coord(shape, r)) == r);
}

TEST_CASE("Topology groups have the right members, order and ranks for every layout") {
  const MpiRuntime& mpi = strata_test::mpi();
  const int me = mpi.world_rank();
  for (const GridShape& shape : layouts_of(mpi.world_size())) {
    INFO("DP " << shape.dp << " x PP " << shape.pp << " x TP " << shape.tp);
    Topology topo(mpi, shape, CommBackendKind::Mpi);
    const GridCoord c = topo.coord();
    const GridCoord want = grid_coord(shape, me);
    CHECK((c.dp == want.dp && c.pp == want.pp && c.tp == want.tp));
    CHECK(topo.world_rank() == me);

    std::vector<int> world, dp, tp, pp;
    for (int r = 0; r < shape.world(); ++r) world.push_back(r);
    for (int d = 0; d < shape.dp; ++d) dp.push_back(grid_rank(shape, {d, c.pp, c.tp}));
    for (int t = 0; t < shape.tp; ++t) tp.push_back(grid_rank(shape, {c.dp, c.pp, t}));
    for (int s = 0; s < shape.pp; ++s) pp.push_back(grid_rank(shape, {c.dp, s, c.tp}));
    check_group(topo.world(), world, me);
    check_group(topo.dp(), dp, c.dp);
    check_group(topo.tp(), tp, c.tp);
    check_group(topo.pp(), pp, c.pp);

    Comm* embedding = topo.embedding();
    if (shape.pp == 1) {
      REQUIRE(embedding != nullptr);  // every rank takes this branch alike
      check_group(*embedding, {me}, 0);
    } else if (c.pp == 0 || c.pp == shape.pp - 1) {
      REQUIRE(embedding != nullptr);
      check_group(*embedding, {grid_rank(shape, {c.dp, 0, c.tp}), grid_rank(shape, {c.dp, shape.pp - 1, c.tp})},
                  c.pp == 0 ? 0 : 1);
    } else {
      CHECK(embedding == nullptr);
    }
    CHECK(topo.all_comms().size() == (embedding ? 5u : 4u));
  }
}

TEST_CASE("Topology for four ranks: literal groups of DP2xTP2, DP4 and PP2xDP2") {
  const MpiRuntime& mpi = strata_test::mpi();
  if (mpi.world_size() != 4) return;
  const int me = mpi.world_rank();
  {
    Topology topo(mpi, GridShape{2, 1, 2}, CommBackendKind::Mpi);  // dp 2, tp 2
    const std::vector<std::vector<int>> dp_groups = {{0, 2}, {1, 3}, {0, 2}, {1, 3}};
    const std::vector<std::vector<int>> tp_groups = {{0, 1}, {0, 1}, {2, 3}, {2, 3}};
    CHECK(topo.dp().world_ranks() == dp_groups[static_cast<size_t>(me)]);
    CHECK(topo.tp().world_ranks() == tp_groups[static_cast<size_t>(me)]);
    CHECK(topo.pp().world_ranks() == std::vector<int>{me});
  }
  {
    Topology topo(mpi, GridShape{4, 1, 1}, CommBackendKind::Mpi);
    CHECK(topo.dp().world_ranks() == std::vector<int>{0, 1, 2, 3});
    CHECK(topo.dp().rank() == me);
    CHECK(topo.tp().size() == 1);
  }
  {
    Topology topo(mpi, GridShape{2, 2, 1}, CommBackendKind::Mpi);  // dp 2, pp 2: rank = pp * 2 + dp
    const std::vector<std::vector<int>> dp_groups = {{0, 1}, {0, 1}, {2, 3}, {2, 3}};
    const std::vector<std::vector<int>> pp_groups = {{0, 2}, {1, 3}, {0, 2}, {1, 3}};
    CHECK(topo.dp().world_ranks() == dp_groups[static_cast<size_t>(me)]);
    CHECK(topo.pp().world_ranks() == pp_groups[static_cast<size_t>(me)]);
    REQUIRE(topo.embedding() != nullptr);
    CHECK(topo.embedding()->world_ranks() == pp_groups[static_cast<size_t>(me)]);
    CHECK(topo.coord().pp == me / 2);
  }
}

TEST_CASE("Topology refuses a layout that does not match the world size") {
  const MpiRuntime& mpi = strata_test::mpi();
  GridShape shape{mpi.world_size(), 1, 2};  // twice too many ranks
  CHECK_THROWS_WITH(Topology(mpi, shape, CommBackendKind::Mpi), strata_catch::Contains("start a matching number"));
}
