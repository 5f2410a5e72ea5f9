// Private to src/sharding: the ZeRO-3 parameter store. Parameters, the gradient accumulator
// and the reduce-scatter landing area are shards (one piece of every layer group); a group is
// all-gathered into a workspace slot when the model acquires it and reduce-scattered when
// backward releases its gradient. Under mixed precision the fp32 shard is the master copy and
// a second, 16-bit shard is what gets gathered, so parameter traffic is halved. Groups the plan
// keeps whole are gathered once after each optimizer step into a buffer of their own, and the
// next group is prefetched only within the bounds. With the parameters offloaded the shard that
// gets gathered lives in host memory and each gather carries its piece up first.
#pragma once
#include <array>
#include <vector>

#include "sharding/sharding.h"

namespace strata {

// Stage 3's plan for a layout under its bounds: the layer groups kept whole on every rank, and
// how many slots the other layer groups need (two when some group can be prefetched while the
// one before it is in use, else one).
struct Stage3Plan {
  std::vector<bool> persistent;  // per layer group
  int64_t persistent_elements = 0;
  int layer_slots = 2;
};

// Where the optimizer keeps the fp32 master and where the gathered shard lives.
// master_on_host: the optimizer keeps the master in host memory (offload_optimizer), so under
// mixed precision the store holds no params(). params_on_host (offload_param, which needs
// master_on_host): the shard the gathers read is host memory (page-locked when pinned), updated
// there by the host optimizer; the device keeps only the gathered groups.
struct Stage3Offload {
  bool master_on_host = false;
  bool params_on_host = false;
  bool pinned = false;
};
Stage3Plan plan_stage3(const Stage3Bounds& bounds, const std::vector<ParamSpec>& specs,
                       const std::vector<LayerGroup>& groups);

class ShardedParamStore final : public ParamStore {
 public:
  // `partition` must have one unit per layer group, in group order. `work_dtype` is the
  // dtype the model sees (F32, BF16 or F16); `comm_dtype` the one gradients are reduce-scattered
  // in (F32, or BF16/F16 through 16-bit twins of the slots). `plan` is plan_stage3's for `bounds`.
  ShardedParamStore(Backend& backend, Comm& dp, const std::vector<LayerGroup>& groups, const FlatPartition& partition,
                    bool overlap, double* comm_wait_seconds, DType work_dtype, DType comm_dtype,
                    const Stage3Bounds& bounds, const Stage3Plan& plan, const Stage3Offload& offload = {});
  ~ShardedParamStore() override;

  DType param_dtype() const override { return work_dtype_; }
  void* acquire_params(int group, Pass pass) override;
  void release_params(int group, Pass pass) override;
  float* acquire_grads(int group) override;
  void release_grads(int group) override;

  // Zeroes the gradient accumulator (start of an optimizer step).
  void begin_step();
  // Waits for every gradient reduction in flight and accumulates it.
  void finish_reductions();
  // To call after params() changed (optimizer step, init, load), before the working shard is
  // rewritten from it: waits for gathers in flight and drops gathered parameters (now stale).
  void invalidate_params();
  // Waits for every parameter gather in flight: they read the working shard, which the
  // optimizer's fused update is about to overwrite.
  void wait_gathers();
  // Mixed precision: the working shard, laid out like params(); undefined in fp32.
  Tensor working_params() const {
    return mixed() ? work_params_.view(0, work_dtype_, {shard_numel_}) : Tensor();
  }

  // The fp32 shard the optimizer updates and checkpoints hold (the master copy when mixed;
  // absent when mixed with master_on_host).
  Tensor params() const { return params_.view(0, DType::F32, {shard_numel_}); }
  // The shard the gathers read: the working shard (mixed) or params().
  Tensor gather_source() const { return mixed() ? working_params() : params(); }
  Tensor grads() const { return grads_.view(0, DType::F32, {shard_numel_}); }
  // On the device: the working shard (the one gathered, unless in host memory) with the groups
  // kept whole, and, when it is a separate copy, the fp32 master. In host memory: the shard
  // gathered, when the parameters are offloaded.
  int64_t persistent_param_bytes() const;
  int64_t master_param_bytes() const { return mixed() && !offload_.master_on_host ? shard_numel_ * 4 : 0; }
  int64_t host_param_bytes() const { return offload_.params_on_host ? gathered_shard_bytes() : 0; }
  int64_t workspace_bytes() const;

 private:
  struct Slot {
    Buffer buffer;
    int group = -1;     // group held (or arriving); -1 free
    bool in_use = false;
    CommHandle pending;  // gather (param slots) or reduce-scatter (grad slots) in flight
    int64_t issued = 0;  // grad slots: order of the reduce-scatter, so the oldest settles first
    Buffer twin;         // grad slots under a 16-bit comm_dtype: the gradient as it travels
  };
  bool is_embedding(int group) const { return group == 0; }
  bool mixed() const { return work_dtype_ != DType::F32; }
  Slot* find_param_slot(int group);
  Slot& free_slot(std::vector<Slot>& pool, int group);
  void start_gather(Slot& slot, int group);
  bool kept_whole(int group) const { return whole_[static_cast<size_t>(group)].kept; }
  void* acquire_whole(int group);
  // Starts gathering `next` ahead of its use when it is not there yet and the bounds allow.
  void prefetch(int next);
  void settle_grad_slot(Slot& slot);  // waits for its reduce-scatter and accumulates it
  void timed_wait(CommHandle& handle);
  int next_in_sequence(int group, Pass pass) const;
  Tensor piece(const Buffer& shard, DType dtype, int group) const;
  int64_t gathered_shard_bytes() const { return shard_numel_ * static_cast<int64_t>(dtype_size(work_dtype_)); }
  // Gathers `group` from the shard into `out` (its padded size, in the working dtype).
  CommHandle gather(int group, const Buffer& out);

  Backend& backend_;
  Comm& dp_;
  std::vector<LayerGroup> groups_;
  std::vector<PartitionUnit> units_;
  bool overlap_;
  double* comm_wait_;
  DType work_dtype_;
  DType comm_dtype_;
  Stage3Bounds bounds_;
  int64_t shard_numel_ = 0;
  Stage3Offload offload_;
  int64_t reductions_issued_ = 0;
  Buffer params_, grads_, recv_;
  Buffer recv_twin_;  // 16-bit comm_dtype: the reduce-scatter output as it travels
  Buffer work_params_;  // mixed precision: params_ rounded to work_dtype_, the gather source
  // Pools: slot 0 holds the embeddings; the others, two each, hold blocks and ln_f so that
  // one group can arrive while the previous one is in use.
  std::vector<Slot> embed_params_, layer_params_, embed_grads_, layer_grads_;
  // Per layer group: the buffer of a group kept whole, gathered again after each optimizer step.
  struct Whole {
    Buffer buffer;
    bool kept = false;
    bool current = false;  // gathered (or arriving) since the parameters last changed
    CommHandle pending;
  };
  std::vector<Whole> whole_;
};

}  // namespace strata
