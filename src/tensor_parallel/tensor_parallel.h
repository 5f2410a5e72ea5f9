// Public header of src/tensor_parallel: a model slice's tensor-parallel group and the collectives
// tensor parallelism adds to the model, named after Megatron's conjugate pair so that a reader
// sees where TP talks: f enters a TP region (the input of a column-parallel linear layer), g
// leaves it (the output of a row-parallel one). Under sequence parallelism the token rows of
// the residual stream are split over the group outside those regions, and f and g gather and
// scatter them instead of the identity and the all-reduce.
#pragma once
#include <cstdint>

#include "comm/comm.h"

namespace strata {

class TensorParallel {
 public:
  // `comm`: this rank's TP group; nullptr (or a group of one) means no tensor parallelism, and
  // every operation below is the identity. sequence_parallel matters only with two ranks or more.
  TensorParallel(Comm* comm, bool sequence_parallel);

  int size() const { return comm_ ? comm_->size() : 1; }
  int rank() const { return comm_ ? comm_->rank() : 0; }
  bool active() const { return size() > 1; }
  bool sequence_parallel() const { return active() && sequence_parallel_; }
  Comm* comm() const { return comm_; }

  // ---- f: enter a tensor-parallel region ----
  // Forward: `full` (rows, C) becomes the region's input. Without SP that is the caller's tensor
  // itself (pass it as both: nothing moves); under SP the all-gather of every rank's `local`
  // rows, in rank order.
  void enter_forward(Tensor local, Tensor full);
  // Backward: `dfull` (rows, C) holds this rank's partial gradient of the region's input, which
  // becomes the sum over the group: without SP in place (pass dfull as dlocal), under SP
  // reduce-scattered into this rank's rows `dlocal` (which may be its own block of dfull).
  void enter_backward(Tensor dfull, Tensor dlocal);

  // ---- g: leave a tensor-parallel region ----
  // Forward: `partial` (rows, C) holds this rank's partial sums (a row-parallel layer's product
  // before its bias), whose sum over the group becomes `out`: without SP in place (pass partial
  // as out), under SP this rank's rows of it (out may be the rank's own block of partial).
  void leave_forward(Tensor partial, Tensor out);
  // Backward: the identity without SP (pass dlocal as dfull); under SP the all-gather of every
  // rank's output-gradient rows `dlocal` into `dfull`.
  void leave_backward(Tensor dlocal, Tensor dfull);

  // Collectives on the group for what is neither f nor g: the vocab-parallel loss's row
  // statistics, the gradients of replicated parameters that SP leaves partial, sampling.
  void all_reduce(Tensor data, ReduceOp op);
  void all_gather(Tensor local, Tensor full);

  // Seconds spent in the collectives above since construction (wall_clock_breakdown takes
  // differences).
  double wait_seconds() const { return wait_seconds_; }

 private:
  void timed(CommHandle handle);
  Comm* comm_ = nullptr;
  bool sequence_parallel_ = false;
  double wait_seconds_ = 0.0;
};

}  // namespace strata
