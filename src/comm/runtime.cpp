// MPI start-up and shutdown. Errors are returned (MPI_ERRORS_RETURN) so MPI_CHECK can name
// the failing call and rank before taking the job down.
#include <unistd.h>

#include "comm/comm.h"
#include "core/core.h"

namespace strata {

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  int provided = 0;
  MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
  MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size_));
  set_process_rank(world_rank_);
  MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank_, MPI_INFO_NULL, &node_comm_));
  MPI_CHECK(MPI_Comm_rank(node_comm_, &local_rank_));
  MPI_CHECK(MPI_Comm_size(node_comm_, &local_size_));
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) std::snprintf(host, sizeof(host), "unknown");
  hostname_ = host;
}

MpiRuntime::~MpiRuntime() {
  if (node_comm_ != MPI_COMM_NULL) MPI_Comm_free(&node_comm_);
  if (mpi_is_initialized()) MPI_Finalize();
}

void MpiRuntime::barrier() const { MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD)); }

GridCoord grid_coord(const GridShape& shape, int rank) {
  GridCoord c;
  c.tp = rank % shape.tp;
  c.dp = (rank / shape.tp) % shape.dp;
  c.pp = rank / (shape.tp * shape.dp);
  return c;
}

int grid_rank(const GridShape& shape, const GridCoord& c) { return (c.pp * shape.dp + c.dp) * shape.tp + c.tp; }

std::string mpi_library_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int length = 0;
  MPI_Get_library_version(text, &length);
  std::string s(text, static_cast<size_t>(length));
  const size_t nl = s.find('\n');
  if (nl != std::string::npos) s.resize(nl);
  while (!s.empty() && (s.back() == ',' || s.back() == ' ' || s.back() == '\0')) s.pop_back();
  return s;
}

}  // namespace strata
