// Part of src/comm's public header (comm.h): communicators (MPI and NCCL) with byte counters,
// their handles and timeouts, and the all-gathers of host values.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace strata {

// ---- collectives ------------------------------------------------------------------------
enum class ReduceOp { Sum, Max };

// An operation in flight. wait() blocks until it is complete (and its buffers may be
// reused); test() polls. Destroying an unfinished request waits for it; a request must
// not outlive its communicator. With the MPI backend, operations progress only inside
// Comm calls (issuing, wait, test, barrier), so a rank that computes between issue and
// wait overlaps with the transfer only as far as MPI moves data on its own; calling
// test() now and then keeps multi-phase ops moving. A wait that exceeds
// comm_timeout_seconds() aborts the job, naming the ranks it was waiting for.
class CommRequest {
 public:
  virtual ~CommRequest() = default;
  virtual void wait() = 0;
  virtual bool test() = 0;
};
using CommHandle = std::unique_ptr<CommRequest>;

// Per-communicator traffic record: for every operation kind, the number of calls and the
// payload bytes, defined as the size of the logical full buffer: all_reduce and broadcast:
// the buffer; reduce_scatter: the whole input (size × shard); all_gather: the whole output;
// send/recv: the message; barrier: 0. Ring volumes follow from these (all_reduce
// 2(p-1)/p × payload, reduce_scatter and all_gather (p-1)/p × payload).
struct CommOpStats {
  int64_t calls = 0;
  int64_t payload_bytes = 0;
};
struct CommCounters {
  // "all_reduce", "reduce_scatter", "all_gather", "broadcast", "send", "recv", "barrier"
  std::map<std::string, CommOpStats> by_op;
  void reset() { by_op.clear(); }
  int64_t total_payload_bytes() const {
    int64_t total = 0;
    for (const auto& entry : by_op) total += entry.second.payload_bytes;
    return total;
  }
};

// One communicator over a group of ranks (world, tp, dp, pp, ...). Tensors are F32, BF16,
// F16 or I32 (U16 too for the moving ops), contiguous; host memory for the MPI
// implementation (device tensors go through its staging wrapper, which copies them to host
// buffers) and device memory for NCCL. Misuse (shape or dtype mismatch, a peer outside the
// group) throws std::logic_error.
//
// Determinism: the MPI all_reduce is a reduce-scatter followed by an all-gather over
// blocks of ceil(n / size) elements; the owner of each block sums the size contributions
// in group-rank order 0, 1, ..., size-1 (16-bit types in fp32, rounded once at the end)
// and sends the result to everyone. So every rank gets the same bits, run after run,
// whatever algorithms the MPI library would pick. reduce_scatter sums in the same order.
// NCCL's ring and tree all-reduce also hand every rank the same bits, in an order of their
// own (so MPI and NCCL results may differ in the last bits).
class Comm {
 public:
  virtual ~Comm() = default;
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  const std::string& name() const { return name_; }
  virtual std::string backend_name() const = 0;  // "mpi" or "nccl"
  // The world rank of every member, in group-rank order.
  const std::vector<int>& world_ranks() const { return world_ranks_; }

  // In place: data becomes the reduction over the group, bit-identical on every rank.
  virtual CommHandle all_reduce_async(Tensor data, ReduceOp op) = 0;
  // input (size × n elements): output (n) = reduction of every rank's block `rank()` of
  // input. output may be that very block of input (in place).
  virtual CommHandle reduce_scatter_async(Tensor input, Tensor output, ReduceOp op) = 0;
  // input (n): output (size × n) = concatenation of every rank's input in rank order.
  // input may be block `rank()` of output (in place).
  virtual CommHandle all_gather_async(Tensor input, Tensor output) = 0;
  // all_gather_async with the input in host memory and the output on the device (ZeRO-3
  // parameters offloaded to the host). The input is carried to the device in the
  // communicator's own order (NCCL: into block rank() of output on its stream, then gathered in
  // place), so the upload overlaps the producer's work instead of queueing behind it. The input
  // must not change until the handle completes. The default hands the host input to
  // all_gather_async, which MPI communicators read straight from host memory.
  virtual CommHandle all_gather_from_host_async(Tensor host_input, Tensor output);
  virtual CommHandle broadcast_async(Tensor data, int root) = 0;
  // tag: 0..32767. Messages between two ranks with the same tag arrive in order (NCCL has
  // no tags: there, messages between two ranks match in the order they are posted).
  virtual CommHandle send_async(Tensor data, int peer, int tag) = 0;
  virtual CommHandle recv_async(Tensor data, int peer, int tag) = 0;
  // Several sends and receives posted together and completed together (a pipeline stage's
  // activations and gradients for both neighbours). The default posts each on its own, which
  // cannot deadlock where sends do not block (MPI); NCCL posts them as one group. Messages
  // between two ranks match in the order each side lists them (and by tag under MPI).
  struct Message {
    Tensor data;
    int peer = 0;
    int tag = 0;
  };
  virtual CommHandle p2p_group_async(const std::vector<Message>& sends, const std::vector<Message>& recvs);
  virtual void barrier() = 0;

  void all_reduce(Tensor data, ReduceOp op = ReduceOp::Sum) { all_reduce_async(data, op)->wait(); }
  void reduce_scatter(Tensor input, Tensor output, ReduceOp op = ReduceOp::Sum) {
    reduce_scatter_async(input, output, op)->wait();
  }
  void all_gather(Tensor input, Tensor output) { all_gather_async(input, output)->wait(); }
  void broadcast(Tensor data, int root) { broadcast_async(data, root)->wait(); }
  void send(Tensor data, int peer, int tag = 0) { send_async(data, peer, tag)->wait(); }
  void recv(Tensor data, int peer, int tag = 0) { recv_async(data, peer, tag)->wait(); }

  const CommCounters& counters() const { return counters_; }
  CommCounters& counters() { return counters_; }

 protected:
  Comm(std::string name, std::vector<int> world_ranks) : name_(std::move(name)), world_ranks_(std::move(world_ranks)) {}
  void record(const char* op, int64_t payload_bytes) {
    CommOpStats& s = counters_.by_op[op];
    ++s.calls;
    s.payload_bytes += payload_bytes;
  }

 private:
  std::string name_;
  std::vector<int> world_ranks_;
  CommCounters counters_;
};

// Every rank's host values (k each, same k everywhere), concatenated in rank order, bit-exact.
// Doubles travel as raw words so sums formed from them in a fixed order agree on every rank.
std::vector<double> all_gather_doubles(Comm& comm, const std::vector<double>& values);
std::vector<float> all_gather_floats(Comm& comm, const std::vector<float>& values);

enum class CommBackendKind { Mpi, Nccl };
const char* comm_backend_name(CommBackendKind kind);  // "mpi", "nccl"
bool nccl_built();                                    // whether this binary was built with NCCL

// How communicators reach a backend's device memory. MPI communicators stage tensors labelled
// `device` through host buffers, copied with `copy` (dst = src, either direction; e.g. the
// backend's own copy, which orders itself after the backend's pending work). NCCL
// communicators make their stream wait for `cuda_stream` (the stream producing the tensors,
// as a cudaStream_t; null: unknown, so the whole device is synchronized first) before each
// collective. Host tensors pass straight through.
struct DeviceAccess {
  Device device = Device::CUDA;
  std::function<void(const Tensor& src, const Tensor& dst)> copy;
  void* cuda_stream = nullptr;
};

// A communicator over the ranks of `comm` (which stays the caller's: it is duplicated, so
// strata's messages never match anyone else's). Collective over `comm`. The Mpi kind stages
// device tensors as `access` says (by default, in a CUDA build, CUDA tensors through
// cudaMemcpy between two device-wide synchronizations). The Nccl kind needs NCCL in the build
// (else UserError) and one GPU per rank on each node, the current CUDA device being this rank's;
// it orders itself after access->cuda_stream.
std::unique_ptr<Comm> make_comm(CommBackendKind kind, MPI_Comm comm, const std::string& name,
                                const DeviceAccess* access = nullptr);
inline std::unique_ptr<Comm> make_mpi_comm(MPI_Comm comm, const std::string& name,
                                           const DeviceAccess* access = nullptr) {
  return make_comm(CommBackendKind::Mpi, comm, name, access);
}

// Seconds an MPI-backend wait may block before the job is aborted with a message naming
// the communicator, the operation and the ranks not heard from: STRATA_COMM_TIMEOUT_S
// (default 1800; 0 disables). Read once; an unparsable value is a UserError.
double comm_timeout_seconds();

}  // namespace strata
