// Private to src/parallel: the ZeRO-3 parameter store. Parameters, the gradient accumulator
// and the reduce-scatter landing area are shards (one piece of every layer group); a group is
// all-gathered into a workspace slot when the model acquires it and reduce-scattered when
// backward releases its gradient.
#pragma once
#include <array>
#include <vector>

#include "parallel/parallel.h"

namespace strata {

class ShardedParamStore final : public ParamStore {
 public:
  // `partition` must have one unit per layer group, in group order.
  ShardedParamStore(Backend& backend, Comm& dp, const std::vector<LayerGroup>& groups, const FlatPartition& partition,
                    bool overlap, double* comm_wait_seconds);
  ~ShardedParamStore() override;

  float* acquire_params(int group, Pass pass) override;
  void release_params(int group, Pass pass) override;
  float* acquire_grads(int group) override;
  void release_grads(int group) override;

  // Zeroes the gradient accumulator (start of an optimizer step).
  void begin_step();
  // Waits for every gradient reduction in flight and accumulates it.
  void finish_reductions();
  // Also drops gathered parameters (they are stale once the shard is updated).
  void invalidate_params();

  Tensor params() const { return params_.view(0, DType::F32, {shard_numel_}); }
  Tensor grads() const { return grads_.view(0, DType::F32, {shard_numel_}); }
  int64_t persistent_param_bytes() const { return shard_numel_ * 4; }
  int64_t workspace_bytes() const;

 private:
  struct Slot {
    Buffer buffer;
    int group = -1;     // group held (or arriving); -1 free
    bool in_use = false;
    CommHandle pending;  // gather (param slots) or reduce-scatter (grad slots) in flight
    int64_t issued = 0;  // grad slots: order of the reduce-scatter, so the oldest settles first
  };
  bool is_embedding(int group) const { return group == 0; }
  Slot* find_param_slot(int group);
  Slot& free_slot(std::vector<Slot>& pool, int group);
  void start_gather(Slot& slot, int group);
  void settle_grad_slot(Slot& slot);  // waits for its reduce-scatter and accumulates it
  void timed_wait(CommHandle& handle);
  int next_in_sequence(int group, Pass pass) const;
  Tensor piece(const Buffer& shard, int group) const;

  Backend& backend_;
  Comm& dp_;
  std::vector<LayerGroup> groups_;
  std::vector<PartitionUnit> units_;
  bool overlap_;
  double* comm_wait_;
  int64_t shard_numel_ = 0;
  int64_t reductions_issued_ = 0;
  Buffer params_, grads_, recv_;
  // Pools: slot 0 holds the embeddings; the others, two each, hold blocks and ln_f so that
  // one group can arrive while the previous one is in use.
  std::vector<Slot> embed_params_, layer_params_, embed_grads_, layer_grads_;
};

}  // namespace strata
