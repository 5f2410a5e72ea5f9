// Device buffers over the MPI communicator: each operation copies its device tensors into host
// buffers, runs the host operation, and copies the results back when it completes. This is
// how several ranks sharing one GPU (where NCCL refuses to run) still communicate. The copies
// are the caller's (a backend's copy), so any device kind stages the same way.
#ifdef STRATA_HAVE_CUDA
#include <cuda_runtime.h>
#endif

#include <memory>
#include <vector>

#include "comm/comm.h"
#include "comm/comm_internal.h"
#include "core/core.h"

namespace strata::comm_detail {
namespace {

using HostBytes = std::shared_ptr<std::vector<unsigned char>>;

// The host stand-in of one tensor; device tensors get a host copy (filled when the
// operation reads them), host tensors are used as they are.
struct Staged {
  Tensor host;
  Tensor device;  // undefined when the tensor was already on the host
  HostBytes bytes;
};

using SharedAccess = std::shared_ptr<const DeviceAccess>;

Staged stage(const DeviceAccess& staging, const Tensor& t, bool read_by_operation) {
  Staged s;
  s.host = t;
  if (t.device != staging.device) return s;
  s.device = t;
  s.bytes = std::make_shared<std::vector<unsigned char>>(t.bytes());
  s.host.data = s.bytes->data();
  s.host.device = Device::CPU;
  if (read_by_operation && t.bytes() > 0) staging.copy(t, s.host);
  return s;
}

// Completes the host operation, then copies every written device tensor back.
class StagedHandle final : public CommRequest {
 public:
  StagedHandle(CommHandle inner, std::vector<Staged> written, SharedAccess staging)
      : inner_(std::move(inner)), written_(std::move(written)), staging_(std::move(staging)) {}
  ~StagedHandle() override { wait(); }
  void wait() override {
    if (!inner_) return;
    inner_->wait();
    inner_.reset();
    for (const Staged& s : written_) {
      if (s.device.defined() && s.device.bytes() > 0) staging_->copy(s.host, s.device);
    }
    written_.clear();
  }
  bool test() override {
    if (!inner_) return true;
    if (!inner_->test()) return false;
    wait();
    return true;
  }

 private:
  CommHandle inner_;
  std::vector<Staged> written_;
  SharedAccess staging_;
};

class StagedComm final : public Comm {
 public:
  StagedComm(std::unique_ptr<Comm> host, SharedAccess staging)
      : Comm(host->name(), host->world_ranks()), host_(std::move(host)), staging_(std::move(staging)) {}
  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  std::string backend_name() const override { return host_->backend_name(); }

  CommHandle all_reduce_async(Tensor data, ReduceOp op) override {
    Staged d = stage(*staging_, data, true);
    CommHandle inner = host_->all_reduce_async(d.host, op);  // validates before anything is counted
    record("all_reduce", static_cast<int64_t>(data.bytes()));
    return done(std::move(inner), {d});
  }
  CommHandle reduce_scatter_async(Tensor input, Tensor output, ReduceOp op) override {
    Staged in = stage(*staging_, input, true), out = stage(*staging_, output, false);
    CommHandle inner = host_->reduce_scatter_async(in.host, out.host, op);  // validates before anything is counted
    record("reduce_scatter", static_cast<int64_t>(input.bytes()));
    return done(std::move(inner), {out}, {in});
  }
  CommHandle all_gather_async(Tensor input, Tensor output) override {
    Staged in = stage(*staging_, input, true), out = stage(*staging_, output, false);
    CommHandle inner = host_->all_gather_async(in.host, out.host);  // validates before anything is counted
    record("all_gather", static_cast<int64_t>(output.bytes()));
    return done(std::move(inner), {out}, {in});
  }
  CommHandle broadcast_async(Tensor data, int root) override {
    Staged d = stage(*staging_, data, rank() == root);
    CommHandle inner = host_->broadcast_async(d.host, root);  // validates before anything is counted
    record("broadcast", static_cast<int64_t>(data.bytes()));
    return done(std::move(inner), {d});
  }
  CommHandle send_async(Tensor data, int peer, int tag) override {
    Staged d = stage(*staging_, data, true);
    CommHandle inner = host_->send_async(d.host, peer, tag);  // validates before anything is counted
    record("send", static_cast<int64_t>(data.bytes()));
    return done(std::move(inner), {}, {d});
  }
  CommHandle recv_async(Tensor data, int peer, int tag) override {
    Staged d = stage(*staging_, data, false);
    CommHandle inner = host_->recv_async(d.host, peer, tag);  // validates before anything is counted
    record("recv", static_cast<int64_t>(data.bytes()));
    return done(std::move(inner), {d});
  }
  void barrier() override {
    record("barrier", 0);
    host_->barrier();
  }

 private:
  // `kept` are host copies the operation reads: they live until it completes.
  CommHandle done(CommHandle inner, std::vector<Staged> written, std::vector<Staged> kept = {}) const {
    for (Staged& k : kept) written.push_back({k.host, Tensor(), k.bytes});
    return std::make_unique<StagedHandle>(std::move(inner), std::move(written), staging_);
  }

  std::unique_ptr<Comm> host_;
  SharedAccess staging_;
};

}  // namespace

std::unique_ptr<Comm> make_staged_backend(std::unique_ptr<Comm> host, const DeviceAccess& staging) {
  return std::make_unique<StagedComm>(std::move(host), std::make_shared<const DeviceAccess>(staging));
}

#ifdef STRATA_HAVE_CUDA
DeviceAccess cuda_runtime_access() {
  DeviceAccess staging;
  staging.device = Device::CUDA;
  // Not knowing which stream produces or next reads the tensor, wait for the whole device on
  // both sides: a plain cudaMemcpy is not ordered against non-blocking streams (a backend's).
  staging.copy = [](const Tensor& src, const Tensor& dst) {
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(dst.data, src.data, src.bytes(), cudaMemcpyDefault));
    CUDA_CHECK(cudaDeviceSynchronize());
  };
  return staging;
}
#endif

}  // namespace strata::comm_detail
