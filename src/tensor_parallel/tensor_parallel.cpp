// Megatron's f and g, with and without sequence parallelism, on the TP group's communicator.
// Every call waits for its collective: the next op reads what it produced.
#include "tensor_parallel/tensor_parallel.h"

#include <stdexcept>
#include <string>

#include "core/timer.h"

namespace strata {
namespace {

bool same_view(const Tensor& a, const Tensor& b) { return a.data == b.data && a.numel() == b.numel(); }

void require_same(const Tensor& a, const Tensor& b, const char* op) {
  if (!same_view(a, b)) {
    throw std::logic_error(std::string("TensorParallel::") + op +
                           ": without sequence parallelism both tensors must be the same view");
  }
}

}  // namespace

TensorParallel::TensorParallel(Comm* comm, bool sequence_parallel)
    : comm_(comm), sequence_parallel_(sequence_parallel) {}

void TensorParallel::timed(CommHandle handle) {
  const Timer t;
  handle->wait();
  wait_seconds_ += t.seconds();
}

void TensorParallel::enter_forward(Tensor local, Tensor full) {
  if (!sequence_parallel()) {
    require_same(local, full, "enter_forward");
    return;
  }
  timed(comm_->all_gather_async(local, full));
}

void TensorParallel::enter_backward(Tensor dfull, Tensor dlocal) {
  if (!active()) return require_same(dfull, dlocal, "enter_backward");
  if (!sequence_parallel()) {
    require_same(dfull, dlocal, "enter_backward");
    return timed(comm_->all_reduce_async(dfull, ReduceOp::Sum));
  }
  timed(comm_->reduce_scatter_async(dfull, dlocal, ReduceOp::Sum));
}

void TensorParallel::leave_forward(Tensor partial, Tensor out) {
  if (!active()) return require_same(partial, out, "leave_forward");
  if (!sequence_parallel()) {
    require_same(partial, out, "leave_forward");
    return timed(comm_->all_reduce_async(partial, ReduceOp::Sum));
  }
  timed(comm_->reduce_scatter_async(partial, out, ReduceOp::Sum));
}

void TensorParallel::leave_backward(Tensor dlocal, Tensor dfull) {
  if (!sequence_parallel()) {
    require_same(dlocal, dfull, "leave_backward");
    return;
  }
  timed(comm_->all_gather_async(dlocal, dfull));
}

void TensorParallel::all_reduce(Tensor data, ReduceOp op) {
  if (active()) timed(comm_->all_reduce_async(data, op));
}

void TensorParallel::all_gather(Tensor local, Tensor full) {
  if (!active()) {
    require_same(local, full, "all_gather");
    return;
  }
  timed(comm_->all_gather_async(local, full));
}

}  // namespace strata
