// What both communicator backends share: choosing a backend, the wait timeout, and the
// argument checks that turn misuse into an error naming the communicator and operation.
#include <fmt/core.h>

#include <cerrno>
#include <cstdlib>
#include <stdexcept>

#include "comm/comm.h"
#include "comm/comm_internal.h"
#include "core/core.h"

namespace strata {

namespace {

// Completes when every part does.
class GroupRequest final : public CommRequest {
 public:
  explicit GroupRequest(std::vector<CommHandle> parts) : parts_(std::move(parts)) {}
  void wait() override {
    for (CommHandle& h : parts_) h->wait();
  }
  bool test() override {
    bool all = true;
    for (CommHandle& h : parts_) all = h->test() && all;
    return all;
  }

 private:
  std::vector<CommHandle> parts_;
};

}  // namespace

CommHandle Comm::p2p_group_async(const std::vector<Message>& sends, const std::vector<Message>& recvs) {
  std::vector<CommHandle> parts;
  for (const Message& m : recvs) parts.push_back(recv_async(m.data, m.peer, m.tag));
  for (const Message& m : sends) parts.push_back(send_async(m.data, m.peer, m.tag));
  return std::make_unique<GroupRequest>(std::move(parts));
}

CommHandle Comm::all_gather_from_host_async(Tensor host_input, Tensor output) {
  return all_gather_async(host_input, output);
}

const char* comm_backend_name(CommBackendKind kind) { return kind == CommBackendKind::Nccl ? "nccl" : "mpi"; }

bool nccl_built() {
#ifdef STRATA_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

std::unique_ptr<Comm> make_comm(CommBackendKind kind, MPI_Comm comm, const std::string& name,
                                const DeviceAccess* access) {
  if (kind == CommBackendKind::Mpi) {
    if (access) return comm_detail::make_staged_backend(comm_detail::make_mpi_backend(comm, name), *access);
#ifdef STRATA_HAVE_CUDA
    return comm_detail::make_staged_backend(comm_detail::make_mpi_backend(comm, name),
                                            comm_detail::cuda_runtime_access());
#else
    return comm_detail::make_mpi_backend(comm, name);
#endif
  }
#ifdef STRATA_HAVE_NCCL
  return comm_detail::make_nccl_backend(comm, name, access ? access->cuda_stream : nullptr);
#else
  throw UserError(
      fmt::format("comm.backend: nccl was requested (communicator '{}') but this strata was built without NCCL; "
                  "set comm.backend: mpi, or rebuild with the CUDA Toolkit and NCCL installed",
                  name),
      RaisedOn::EveryRank);  // the same build and config on every rank
#endif
}

double comm_timeout_seconds() {
  static const double seconds = [] {
    const char* text = std::getenv("STRATA_COMM_TIMEOUT_S");
    if (!text || !*text) return 1800.0;
    char* end = nullptr;
    errno = 0;
    const double value = std::strtod(text, &end);
    if (errno != 0 || *end != '\0' || !(value >= 0.0))
      throw UserError(
          fmt::format("environment variable STRATA_COMM_TIMEOUT_S='{}' is not a number of seconds >= 0 (0 disables the "
                      "communication timeout)",
                      text));
    return value;
  }();
  return seconds;
}

namespace comm_detail {

std::vector<int> world_ranks_of(MPI_Comm comm) {
  MPI_Group group = MPI_GROUP_NULL, world_group = MPI_GROUP_NULL;
  MPI_CHECK(MPI_Comm_group(comm, &group));
  MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world_group));
  int size = 0;
  MPI_CHECK(MPI_Group_size(group, &size));
  std::vector<int> local(static_cast<size_t>(size)), world(static_cast<size_t>(size));
  for (int i = 0; i < size; ++i) local[static_cast<size_t>(i)] = i;
  MPI_CHECK(MPI_Group_translate_ranks(group, size, local.data(), world_group, world.data()));
  MPI_CHECK(MPI_Group_free(&group));
  MPI_CHECK(MPI_Group_free(&world_group));
  return world;
}

void check_tensor(const std::string& comm, const char* op, const Tensor& t, Device device) {
  if (t.device != device) {
    if (device == Device::CPU)
      throw std::logic_error(
          fmt::format("{} on MPI communicator '{}': the tensor is in device memory, and the MPI backend takes host "
                      "tensors only unless the communicator was made with device staging",
                      op, comm));
    throw std::logic_error(
        fmt::format("{} on NCCL communicator '{}': the tensor is in host memory; NCCL needs device memory", op, comm));
  }
  if (t.numel() > 0 && t.data == nullptr)
    throw std::logic_error(fmt::format("{} on communicator '{}': tensor {} has no memory", op, comm, t.shape_string()));
  if (t.numel() < 0)
    throw std::logic_error(fmt::format("{} on communicator '{}': negative shape {}", op, comm, t.shape_string()));
}

void check_reducible(const std::string& comm, const char* op, const Tensor& t) {
  if (t.dtype != DType::F32 && t.dtype != DType::BF16 && t.dtype != DType::F16 && t.dtype != DType::I32)
    throw std::logic_error(fmt::format("{} on communicator '{}': cannot reduce {} elements (F32, BF16, F16, I32 only)",
                                       op, comm, dtype_name(t.dtype)));
}

void check_same_dtype(const std::string& comm, const char* op, const Tensor& a, const Tensor& b) {
  if (a.dtype != b.dtype)
    throw std::logic_error(fmt::format("{} on communicator '{}': input is {} but output is {}", op, comm,
                                       dtype_name(a.dtype), dtype_name(b.dtype)));
}

void check_peer(const std::string& comm, const char* op, int peer, int size, int self, bool self_allowed) {
  if (peer < 0 || peer >= size || (!self_allowed && peer == self))
    throw std::logic_error(
        fmt::format("{} on communicator '{}' (size {}, rank {}): invalid peer {}", op, comm, size, self, peer));
}

void check_tag(const std::string& comm, const char* op, int tag) {
  if (tag < 0 || tag > kMaxUserTag)
    throw std::logic_error(fmt::format("{} on communicator '{}': tag {} outside 0..{}", op, comm, tag, kMaxUserTag));
}

void check_blocked(const std::string& comm, const char* op, const Tensor& whole, const Tensor& part, int size,
                   int rank) {
  if (whole.numel() != part.numel() * size)
    throw std::logic_error(
        fmt::format("{} on communicator '{}' of size {}: the full buffer {} must hold {} × the "
                    "rank's part {}",
                    op, comm, size, whole.shape_string(), size, part.shape_string()));
  const char* whole_begin = static_cast<const char*>(whole.data);
  const char* part_begin = static_cast<const char*>(part.data);
  if (!whole_begin || !part_begin) return;
  const bool overlap = part_begin < whole_begin + whole.bytes() && whole_begin < part_begin + part.bytes();
  if (overlap && part_begin != whole_begin + static_cast<size_t>(rank) * part.bytes())
    throw std::logic_error(
        fmt::format("{} on communicator '{}': the rank's part overlaps the full buffer but is not "
                    "its block {} (the only in-place form)",
                    op, comm, rank));
}

}  // namespace comm_detail
}  // namespace strata
