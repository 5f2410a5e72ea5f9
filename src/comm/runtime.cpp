// MPI start-up and shutdown. Errors are returned (MPI_ERRORS_RETURN) so MPI_CHECK can name
// the failing call and rank before taking the job down.
#include <fmt/core.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>

#include "comm/comm.h"
#include "comm/mpi_progress.h"
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
  MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &control_comm_));
  MPI_CHECK(MPI_Comm_set_errhandler(control_comm_, MPI_ERRORS_RETURN));
  auto group = std::make_shared<comm_detail::GroupInfo>();
  group->comm_name = "world";
  group->world_ranks.resize(static_cast<size_t>(world_size_));
  std::iota(group->world_ranks.begin(), group->world_ranks.end(), 0);
  control_group_ = std::move(group);
}

void create_start_marker_if_asked(const MpiRuntime& mpi) {
  const char* path = std::getenv("STRATA_STARTED_FILE");
  if (!path || !*path) return;
  mpi.barrier();
  if (mpi.world_rank() != 0) return;
  std::FILE* f = std::fopen(path, "w");
  if (!f || std::fclose(f) != 0) {
    log_warn("STRATA_STARTED_FILE {}: cannot create it ({}); the launcher will take a later failure for a "
             "start-up one",
             path, std::strerror(errno));
  }
}

MpiRuntime::~MpiRuntime() {
  if (control_comm_ != MPI_COMM_NULL) MPI_Comm_free(&control_comm_);
  if (node_comm_ != MPI_COMM_NULL) MPI_Comm_free(&node_comm_);
  if (mpi_is_initialized()) MPI_Finalize();
}

void MpiRuntime::exchange(const char* what,
                          const std::function<void(comm_detail::MpiOperation&, int tag)>& post) const {
  if (world_size_ == 1) return;
  auto operation = std::make_shared<comm_detail::MpiOperation>(control_group_, this, what);
  control_tag_ = (control_tag_ + 1) % 32768;  // MPI guarantees tags up to 32767
  post(*operation, control_tag_);
  comm_detail::start_operation(operation);
  comm_detail::wait_operation(*operation);
}

// Every rank tells every other one it has arrived (staggered peers, receives posted first): a
// rank that never arrives is named by everyone waiting for it.
void MpiRuntime::barrier() const {
  exchange("barrier", [this](comm_detail::MpiOperation& o, int tag) {
    for (int k = 1; k < world_size_; ++k)
      o.post_recv(nullptr, 0, 1, MPI_BYTE, (world_rank_ - k + world_size_) % world_size_, tag, control_comm_);
    for (int k = 1; k < world_size_; ++k)
      o.post_send(nullptr, 0, 1, MPI_BYTE, (world_rank_ + k) % world_size_, tag, control_comm_);
  });
}

std::vector<int64_t> MpiRuntime::all_gather(const std::vector<int64_t>& mine) const {
  const int64_t n = static_cast<int64_t>(mine.size());
  std::vector<int64_t> all(mine.size() * static_cast<size_t>(world_size_));
  std::copy(mine.begin(), mine.end(), all.begin() + world_rank_ * n);
  exchange("all_gather", [&](comm_detail::MpiOperation& o, int tag) {
    for (int k = 1; k < world_size_; ++k) {
      const int peer = (world_rank_ - k + world_size_) % world_size_;
      o.post_recv(all.data() + peer * n, n, sizeof(int64_t), MPI_INT64_T, peer, tag, control_comm_);
    }
    for (int k = 1; k < world_size_; ++k)
      o.post_send(mine.data(), n, sizeof(int64_t), MPI_INT64_T, (world_rank_ + k) % world_size_, tag, control_comm_);
  });
  return all;
}

void MpiRuntime::broadcast(std::string& bytes, int root) const {
  int64_t length = static_cast<int64_t>(bytes.size());
  const auto from_root = [&](void* data, int64_t count, int elem_bytes, MPI_Datatype type) {
    return [=](comm_detail::MpiOperation& o, int tag) {
      if (world_rank_ != root) {
        o.post_recv(data, count, elem_bytes, type, root, tag, control_comm_);
        return;
      }
      for (int peer = 0; peer < world_size_; ++peer)
        if (peer != root) o.post_send(data, count, elem_bytes, type, peer, tag, control_comm_);
    };
  };
  exchange("broadcast of a length", from_root(&length, 1, sizeof(int64_t), MPI_INT64_T));
  bytes.resize(static_cast<size_t>(length));
  exchange("broadcast", from_root(bytes.data(), length, 1, MPI_CHAR));
}

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
