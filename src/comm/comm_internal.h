// Private to src/comm: the backend factories behind make_comm and the argument checks
// both backends share, so misuse reads the same whichever backend runs.
#pragma once
#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "comm/comm.h"

namespace strata::comm_detail {

// The world rank of every member of `comm`, in its rank order.
std::vector<int> world_ranks_of(MPI_Comm comm);

std::unique_ptr<Comm> make_mpi_backend(MPI_Comm comm, const std::string& name);
// Wraps a host communicator so tensors on staging.device go through host memory.
std::unique_ptr<Comm> make_staged_backend(std::unique_ptr<Comm> host, const DeviceAccess& staging);
#ifdef STRATA_HAVE_CUDA
// Staging of CUDA tensors with cudaMemcpy (the default of a CUDA build).
DeviceAccess cuda_runtime_access();
#endif
#ifdef STRATA_HAVE_NCCL
// producer_stream (a cudaStream_t, may be null): every collective waits for its work so far.
std::unique_ptr<Comm> make_nccl_backend(MPI_Comm comm, const std::string& name, void* producer_stream);
#endif

// Argument checks; each throws std::logic_error naming the communicator and operation.
// `device` is where this backend needs the memory to be.
void check_tensor(const std::string& comm, const char* op, const Tensor& t, Device device);
void check_reducible(const std::string& comm, const char* op, const Tensor& t);
void check_same_dtype(const std::string& comm, const char* op, const Tensor& a, const Tensor& b);
void check_peer(const std::string& comm, const char* op, int peer, int size, int self, bool self_allowed);
void check_tag(const std::string& comm, const char* op, int tag);
// reduce_scatter / all_gather: `whole` holds size × part elements, and when the two
// overlap, `part` is exactly block `rank` of `whole` (the in-place form).
void check_blocked(const std::string& comm, const char* op, const Tensor& whole, const Tensor& part, int size,
                   int rank);

constexpr int kMaxUserTag = 32767;  // the smallest tag bound MPI guarantees

}  // namespace strata::comm_detail
