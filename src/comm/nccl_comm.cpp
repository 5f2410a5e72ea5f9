// The NCCL communicator (CUDA builds with NCCL): device tensors, operations enqueued on the
// communicator's own stream after the producer stream's work, handles that record a CUDA event. The unique id is made on the
// group's rank 0 and broadcast over the group's MPI communicator.
#ifdef STRATA_HAVE_NCCL
#include <cuda_runtime.h>
#include <fmt/core.h>
#include <nccl.h>
#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "comm/comm_internal.h"
#include "core/core.h"

namespace strata::comm_detail {
namespace {

ncclDataType_t nccl_reduce_type(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return ncclFloat32;
    case DType::BF16:
      return ncclBfloat16;
    case DType::F16:
      return ncclFloat16;
    default:
      return ncclInt32;
  }
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::Sum ? ncclSum : ncclMax; }

// An enqueued operation: done when the event recorded after it has fired. Waiting polls
// so that an asynchronous NCCL error or the communication timeout ends the job with a
// message instead of a hang.
class NcclHandle final : public CommRequest {
 public:
  NcclHandle(ncclComm_t comm, cudaStream_t stream, std::string what) : comm_(comm), what_(std::move(what)) {
    CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(event_, stream));
  }
  ~NcclHandle() override {
    wait();
    cudaEventDestroy(event_);
  }
  bool test() override {
    if (done_) return true;
    const cudaError_t state = cudaEventQuery(event_);
    if (state == cudaErrorNotReady) {
      ncclResult_t async_error = ncclSuccess;
      NCCL_CHECK(ncclCommGetAsyncError(comm_, &async_error));
      if (async_error != ncclSuccess && async_error != ncclInProgress) NCCL_CHECK(async_error);
      return false;
    }
    CUDA_CHECK(state);
    done_ = true;
    return true;
  }
  void wait() override {
    const double limit = comm_timeout_seconds();
    const Timer waited;
    while (!test()) {
      if (limit > 0 && waited.seconds() > limit) {
        log_error(
            "communication timeout: waited {:.0f} s for {}; a rank is dead, stalled, or running a different "
            "operation; aborting the job (limit STRATA_COMM_TIMEOUT_S={:g} s)",
            waited.seconds(), what_, limit);
        ncclCommAbort(comm_);
        abort_job(kExitDeviceFailure);
      }
      sched_yield();
    }
  }

 private:
  ncclComm_t comm_;
  std::string what_;
  cudaEvent_t event_ = nullptr;
  bool done_ = false;
};

class NcclComm final : public Comm {
 public:
  NcclComm(MPI_Comm parent, const std::string& name, cudaStream_t producer)
      : Comm(name, world_ranks_of(parent)), producer_(producer) {
    comm_timeout_seconds();
    MPI_CHECK(MPI_Comm_dup(parent, &mpi_comm_));
    MPI_CHECK(MPI_Comm_set_errhandler(mpi_comm_, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_rank(mpi_comm_, &rank_));
    MPI_CHECK(MPI_Comm_size(mpi_comm_, &size_));
    try {
      check_one_gpu_per_rank();
    } catch (...) {
      MPI_Comm_free(&mpi_comm_);  // the destructor does not run for a half-built object
      throw;
    }
    ncclUniqueId id;
    std::memset(&id, 0, sizeof(id));
    if (rank_ == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    MPI_CHECK(MPI_Bcast(&id, static_cast<int>(sizeof(id)), MPI_BYTE, 0, mpi_comm_));
    NCCL_CHECK(ncclCommInitRank(&nccl_, size_, id, rank_));
    // A blocking stream: it orders with the legacy default stream, where producers that
    // use no stream of their own run.
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamDefault));
    CUDA_CHECK(cudaMalloc(&barrier_word_, sizeof(int32_t)));
    CUDA_CHECK(cudaEventCreateWithFlags(&producer_done_, cudaEventDisableTiming));
  }

  ~NcclComm() override {
    if (stream_) cudaStreamSynchronize(stream_);
    if (nccl_) ncclCommDestroy(nccl_);
    if (barrier_word_) cudaFree(barrier_word_);
    if (producer_done_) cudaEventDestroy(producer_done_);
    if (stream_) cudaStreamDestroy(stream_);
    if (mpi_is_initialized() && mpi_comm_ != MPI_COMM_NULL) MPI_Comm_free(&mpi_comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend_name() const override { return "nccl"; }

  CommHandle all_reduce_async(Tensor data, ReduceOp op) override {
    check_tensor(name(), "all_reduce", data, Device::CUDA);
    check_reducible(name(), "all_reduce", data);
    record("all_reduce", static_cast<int64_t>(data.bytes()));
    after_producer();
    NCCL_CHECK(ncclAllReduce(data.data, data.data, static_cast<size_t>(data.numel()), nccl_reduce_type(data.dtype),
                             nccl_op(op), nccl_, stream_));
    return handle("all_reduce", data.bytes());
  }

  CommHandle reduce_scatter_async(Tensor input, Tensor output, ReduceOp op) override {
    check_tensor(name(), "reduce_scatter", input, Device::CUDA);
    check_tensor(name(), "reduce_scatter", output, Device::CUDA);
    check_reducible(name(), "reduce_scatter", input);
    check_same_dtype(name(), "reduce_scatter", input, output);
    check_blocked(name(), "reduce_scatter", input, output, size_, rank_);
    record("reduce_scatter", static_cast<int64_t>(input.bytes()));
    after_producer();
    NCCL_CHECK(ncclReduceScatter(input.data, output.data, static_cast<size_t>(output.numel()),
                                 nccl_reduce_type(input.dtype), nccl_op(op), nccl_, stream_));
    return handle("reduce_scatter", input.bytes());
  }

  CommHandle all_gather_async(Tensor input, Tensor output) override {
    check_gather(input, Device::CUDA, output);
    // Moving ops carry raw bytes, so every dtype (U16 included) goes through unchanged.
    after_producer();
    NCCL_CHECK(ncclAllGather(input.data, output.data, input.bytes(), ncclUint8, nccl_, stream_));
    return handle("all_gather", output.bytes());
  }

  CommHandle all_gather_from_host_async(Tensor host_input, Tensor output) override {
    check_gather(host_input, Device::CPU, output);
    // The output may still be read by the producer's earlier work (the slot's last group), so
    // the upload waits for it as the gather would; it then runs on this stream, beside the
    // producer's later work.
    after_producer();
    char* block = static_cast<char*>(output.data) + static_cast<size_t>(rank_) * host_input.bytes();
    CUDA_CHECK(cudaMemcpyAsync(block, host_input.data, host_input.bytes(), cudaMemcpyHostToDevice, stream_));
    NCCL_CHECK(ncclAllGather(block, output.data, host_input.bytes(), ncclUint8, nccl_, stream_));
    return handle("all_gather", output.bytes());
  }

  CommHandle broadcast_async(Tensor data, int root) override {
    check_tensor(name(), "broadcast", data, Device::CUDA);
    check_peer(name(), "broadcast", root, size_, rank_, true);
    record("broadcast", static_cast<int64_t>(data.bytes()));
    after_producer();
    NCCL_CHECK(ncclBroadcast(data.data, data.data, data.bytes(), ncclUint8, root, nccl_, stream_));
    return handle("broadcast", data.bytes());
  }

  // NCCL has no tags: messages between two ranks match in the order they are posted.
  CommHandle send_async(Tensor data, int peer, int tag) override {
    check_tensor(name(), "send", data, Device::CUDA);
    check_peer(name(), "send", peer, size_, rank_, false);
    check_tag(name(), "send", tag);
    record("send", static_cast<int64_t>(data.bytes()));
    after_producer();
    NCCL_CHECK(ncclSend(data.data, data.bytes(), ncclUint8, peer, nccl_, stream_));
    return handle("send", data.bytes());
  }

  CommHandle recv_async(Tensor data, int peer, int tag) override {
    check_tensor(name(), "recv", data, Device::CUDA);
    check_peer(name(), "recv", peer, size_, rank_, false);
    check_tag(name(), "recv", tag);
    record("recv", static_cast<int64_t>(data.bytes()));
    after_producer();
    NCCL_CHECK(ncclRecv(data.data, data.bytes(), ncclUint8, peer, nccl_, stream_));
    return handle("recv", data.bytes());
  }

  CommHandle p2p_group_async(const std::vector<Message>& sends, const std::vector<Message>& recvs) override {
    size_t bytes = 0;
    for (const Message& m : sends) {
      check_tensor(name(), "send", m.data, Device::CUDA);
      check_peer(name(), "send", m.peer, size_, rank_, false);
      bytes += m.data.bytes();
    }
    for (const Message& m : recvs) {
      check_tensor(name(), "recv", m.data, Device::CUDA);
      check_peer(name(), "recv", m.peer, size_, rank_, false);
      bytes += m.data.bytes();
    }
    for (const Message& m : sends) record("send", static_cast<int64_t>(m.data.bytes()));
    for (const Message& m : recvs) record("recv", static_cast<int64_t>(m.data.bytes()));
    after_producer();
    NCCL_CHECK(ncclGroupStart());
    for (const Message& m : sends) NCCL_CHECK(ncclSend(m.data.data, m.data.bytes(), ncclUint8, m.peer, nccl_, stream_));
    for (const Message& m : recvs) NCCL_CHECK(ncclRecv(m.data.data, m.data.bytes(), ncclUint8, m.peer, nccl_, stream_));
    NCCL_CHECK(ncclGroupEnd());
    return handle("p2p group", bytes);
  }

  void barrier() override {
    record("barrier", 0);
    after_producer();
    NCCL_CHECK(ncclAllReduce(barrier_word_, barrier_word_, 1, ncclInt32, ncclSum, nccl_, stream_));
    handle("barrier", 0)->wait();
  }

 private:
  // An all-gather's checks (its input in `input_device`'s memory) and its traffic record.
  void check_gather(const Tensor& input, Device input_device, const Tensor& output) {
    check_tensor(name(), "all_gather", input, input_device);
    check_tensor(name(), "all_gather", output, Device::CUDA);
    check_same_dtype(name(), "all_gather", input, output);
    check_blocked(name(), "all_gather", output, input, size_, rank_);
    record("all_gather", static_cast<int64_t>(output.bytes()));
  }

  // The tensors come from the producer's stream (the backend's, non-blocking): the
  // collective starts only after the work enqueued there so far. With no producer named, the
  // whole device is waited for, since a non-blocking stream may be writing the tensors.
  void after_producer() {
    if (!producer_) {
      CUDA_CHECK(cudaDeviceSynchronize());
      return;
    }
    CUDA_CHECK(cudaEventRecord(producer_done_, producer_));
    CUDA_CHECK(cudaStreamWaitEvent(stream_, producer_done_, 0));
  }

  CommHandle handle(const char* op, size_t bytes) {
    ++operations_issued_;
    std::string members;
    for (int r : world_ranks()) members += (members.empty() ? "" : ",") + std::to_string(r);
    return std::make_unique<NcclHandle>(nccl_, stream_,
                                        fmt::format("{} #{} ({} bytes) on NCCL communicator '{}' (world ranks {})", op,
                                                    operations_issued_, bytes, name(), members));
  }

  // NCCL refuses two ranks on one GPU with an opaque error; say what is wrong instead.
  // Every rank judges the same gathered list, so all of them throw or none does.
  void check_one_gpu_per_rank() {
    constexpr int kKeyBytes = 128;
    char key[kKeyBytes] = {0};  // "host/pci-bus-id", or empty when this rank has no GPU
    char host[64] = {0};
    gethostname(host, sizeof(host) - 1);
    int devices = 0, device = 0;
    char bus_id[64] = {0};
    if (cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0 && cudaGetDevice(&device) == cudaSuccess &&
        cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id) - 1, device) == cudaSuccess)
      std::snprintf(key, sizeof(key), "%s/%s", host, bus_id);
    cudaGetLastError();  // a failed query above is answered here, not left for the next call
    std::vector<char> keys(static_cast<size_t>(kKeyBytes) * static_cast<size_t>(size_));
    MPI_CHECK(MPI_Allgather(key, kKeyBytes, MPI_CHAR, keys.data(), kKeyBytes, MPI_CHAR, mpi_comm_));
    auto key_of = [&](int r) { return std::string(&keys[static_cast<size_t>(r) * kKeyBytes]); };
    for (int r = 0; r < size_; ++r) {
      if (key_of(r).empty())
        throw UserError(
            fmt::format("comm.backend: nccl (communicator '{}'): world rank {} has no usable CUDA "
                        "device; set comm.backend: mpi, or run where every rank has a GPU",
                        name(), world_ranks()[static_cast<size_t>(r)]));
      for (int other = r + 1; other < size_; ++other)
        if (key_of(r) == key_of(other))
          throw UserError(fmt::format(
              "comm.backend: nccl (communicator '{}'): world ranks {} and {} share GPU {}; NCCL needs one GPU per "
              "rank: start as many ranks per node as GPUs (each rank selecting GPU local_rank), or set "
              "comm.backend: mpi",
              name(), world_ranks()[static_cast<size_t>(r)], world_ranks()[static_cast<size_t>(other)], key_of(r)));
    }
  }

  MPI_Comm mpi_comm_ = MPI_COMM_NULL;
  ncclComm_t nccl_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaStream_t producer_ = nullptr;
  cudaEvent_t producer_done_ = nullptr;
  void* barrier_word_ = nullptr;
  int rank_ = 0;
  int size_ = 1;
  int64_t operations_issued_ = 0;
};

}  // namespace

std::unique_ptr<Comm> make_nccl_backend(MPI_Comm comm, const std::string& name, void* producer_stream) {
  return std::make_unique<NcclComm>(comm, name, static_cast<cudaStream_t>(producer_stream));
}

}  // namespace strata::comm_detail
#endif  // STRATA_HAVE_NCCL
