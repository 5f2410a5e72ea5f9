// Public header of src/comm: the MPI runtime (process start-up, rank identity, node-local
// ranks), the DP x PP x TP rank grid, communicators (MPI and NCCL) with byte counters,
// the Topology that owns one communicator per group, and the info/comm-check subcommands.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <deque>
#include <map>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace strata {

namespace comm_detail {
class MpiOperation;
struct GroupInfo;
}  // namespace comm_detail

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
  int local_rank() const { return local_rank_; }  // rank among the processes on this node
  int local_size() const { return local_size_; }
  const std::string& hostname() const { return hostname_; }
  MPI_Comm world() const { return MPI_COMM_WORLD; }

  // Collectives over the world for the run's control (checkpoint saves, agreements), on a
  // communicator of their own. Like Comm's, they wait at most comm_timeout_seconds() and then
  // abort the job naming the ranks that never answered: a dead node must not hang a save.
  void barrier() const;
  // Every rank's values (the same count on each), rank after rank.
  std::vector<int64_t> all_gather(const std::vector<int64_t>& mine) const;
  // root's bytes on every rank (resized to root's length).
  void broadcast(std::string& bytes, int root) const;

 private:
  // One operation whose messages `post` posts (with a fresh tag), waited for with the timeout.
  void exchange(const char* what, const std::function<void(comm_detail::MpiOperation&, int tag)>& post) const;

  int world_rank_ = 0, world_size_ = 1, local_rank_ = 0, local_size_ = 1;
  std::string hostname_;
  MPI_Comm node_comm_ = MPI_COMM_NULL;
  MPI_Comm control_comm_ = MPI_COMM_NULL;
  std::shared_ptr<const comm_detail::GroupInfo> control_group_;
  mutable int control_tag_ = 0;
};

// A round of non-blocking yes/no votes over the world (MPI_Iallreduce of a flag on a
// communicator of its own). Every rank posts the same number of votes in the same order; post()
// returns at once, any_yes(i) waits until every rank has posted vote i and says whether one voted
// yes; finish() waits for every vote posted and starts the next round at index 0. Votes in flight
// hold no rank back: a rank waits only when it asks for a result. Main thread only.
class WorldVote {
 public:
  explicit WorldVote(const MpiRuntime& mpi);
  ~WorldVote();
  WorldVote(const WorldVote&) = delete;
  WorldVote& operator=(const WorldVote&) = delete;

  int post(bool yes);
  bool any_yes(int index);
  void finish();

 private:
  struct Vote {
    int mine = 0, any = 0;
    MPI_Request request = MPI_REQUEST_NULL;
    bool done = false;
  };
  int size_ = 1;
  MPI_Comm comm_ = MPI_COMM_NULL;
  std::deque<Vote> votes_;  // stable addresses: MPI writes into them while in flight
};

// Collective over the world: runs `step` (set-up that a rank does on its own: opening files,
// choosing a device) and then agrees on the outcome. A UserError on some ranks only becomes a
// UserError on every rank, naming `what`, the ranks that failed and the first one's host and
// message, rather than leaving the other ranks blocked in their next collective. When every
// rank fails, each rethrows its own error (main reports rank 0's). Other exceptions pass
// through untouched (main aborts the job for them).
void agree_on_user_errors(const MpiRuntime& mpi, const std::string& what, const std::function<void()>& step);
// Collective over the world: which ranks run on which host, hosts in order of their first rank,
// runs of consecutive ranks joined: "node0: ranks 0-1; node1: ranks 2-3".
std::string rank_placement(const MpiRuntime& mpi);
// The lowest rank whose `width` values in an MpiRuntime::all_gather result differ from rank 0's;
// -1 when every rank agrees with rank 0.
int first_rank_unlike_rank0(const std::vector<int64_t>& all, size_t width);

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
  virtual CommHandle broadcast_async(Tensor data, int root) = 0;
  // tag: 0..32767. Messages between two ranks with the same tag arrive in order (NCCL has
  // no tags: there, messages between two ranks match in the order they are posted).
  virtual CommHandle send_async(Tensor data, int peer, int tag) = 0;
  virtual CommHandle recv_async(Tensor data, int peer, int tag) = 0;
  // A send and a receive posted together (pipeline neighbours trading activations and
  // gradients); unlike separate send/recv calls this cannot deadlock under NCCL.
  virtual CommHandle exchange_async(Tensor send_data, int send_peer, Tensor recv_data, int recv_peer, int tag) = 0;
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
  void exchange(Tensor send_data, int send_peer, Tensor recv_data, int recv_peer, int tag = 0) {
    exchange_async(send_data, send_peer, recv_data, recv_peer, tag)->wait();
  }

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

// MPI's library version line, e.g. "Open MPI v4.1.4, ...".
std::string mpi_library_version();

}  // namespace strata
