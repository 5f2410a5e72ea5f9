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
#include <memory>
#include <string>
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

// Where an update or load writes the working shard when it is neither device memory nor one host
// buffer (offload_param nvme): the host update asks for each piece's memory in shard order, the
// sink stores it, and finish() returns once every piece is stored.
class WorkingShardSink {
 public:
  virtual ~WorkingShardSink() = default;
  virtual void* piece_target(int64_t shard_begin, int64_t count) = 0;
  virtual void finish() = 0;
};

// offload_param nvme: the working shard in a file (O_DIRECT), one record per layer group (the
// rank's piece of it, rounded up to 4 KiB), read into a ring of buffers as gathers need them
// (and a group ahead), and written from them, group by group, as an update produces them. A
// buffer keeps what it read or wrote until it is needed for another group, so a group used again
// soon (the pass turning at the last layer) is not read twice.
class ParamFile final : public WorkingShardSink {
 public:
  ParamFile(Backend& backend, const std::string& dir, int buffer_count, bool pinned,
            const std::vector<PartitionUnit>& units, DType work);
  ~ParamFile() override;
  // The buffer holding `group`'s record, read now unless it is there (or arriving); the caller
  // holds it until release(), so nothing else is read into it.
  int hold(int group);
  Tensor piece(int buffer) const;  // the held group's piece (host memory, the working dtype)
  void release(int buffer);
  // Starts reading `group` into a buffer nobody holds or keeps, when there is one.
  void read_ahead(int group);
  void* piece_target(int64_t shard_begin, int64_t count) override;
  void finish() override;
  int64_t host_bytes() const;
  int64_t file_bytes() const { return shard_bytes_; }
  // Reads hold() had to start itself, the gather waiting on the disk: read ahead, there are
  // none after a pass's first two groups.
  int64_t reads_waited() const { return reads_waited_; }
  // Each buffer's bytes: the largest record (`largest_piece` elements).
  static int64_t buffer_bytes(int64_t largest_piece, DType work);
  // Host bytes of the ring for pieces of at most `largest_piece` elements.
  static int64_t ring_bytes(int buffer_count, int64_t largest_piece, DType work);

 private:
  struct Slot;
  // The buffer to reuse: one nobody holds nor is assembling, empty first, else the one used
  // longest ago; null when there is none.
  Slot* pick();
  Slot& take(int group);  // pick()'s buffer for `group`, its previous read or write landed
  void start_read(Slot& slot);  // of the slot's group's record
  size_t record_bytes(int group) const;
  void flush();           // starts writing the record being assembled
  int find(int group) const;
  Backend& backend_;
  std::vector<PartitionUnit> units_;
  DType work_;
  std::vector<int64_t> offset_;  // of each group's record
  std::unique_ptr<DirectFile> file_;
  std::vector<Slot> slots_;
  int64_t uses_ = 0;        // for choosing the least recently used buffer
  int writing_ = -1;        // the slot assembling a record (an update), or -1
  int64_t shard_bytes_ = 0;
  int64_t reads_waited_ = 0;
};

Stage3Plan plan_stage3(const Stage3Bounds& bounds, const std::vector<ParamSpec>& specs,
                       const std::vector<LayerGroup>& groups);

class ShardedParamStore final : public ParamStore {
 public:
  // `partition` must have one unit per layer group, in group order. `work_dtype` is the
  // dtype the model sees (F32, BF16 or F16); `comm_dtype` the one gradients are reduce-scattered
  // in (F32, or BF16/F16 through 16-bit twins of the slots). `plan` is plan_stage3's for `bounds`.
  // `offload`: with offload.optimizer the optimizer keeps the fp32 master in host memory, so
  // under mixed precision the store holds no params(); with offload.params (which needs it) the
  // shard the gathers read is host memory (page-locked when params_pinned) or, with
  // params_nvme_path, a ParamFile, updated there by the host optimizer; the device keeps only
  // the gathered groups.
  ShardedParamStore(Backend& backend, Comm& dp, const std::vector<LayerGroup>& groups, const FlatPartition& partition,
                    bool overlap, double* comm_wait_seconds, DType work_dtype, DType comm_dtype,
                    const Stage3Bounds& bounds, const Stage3Plan& plan, const OffloadSettings& offload = {});
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
  Tensor gather_source() const { return file_ ? Tensor() : mixed() ? working_params() : params(); }
  // offload_param nvme: where updates write the working shard (gather_source() is then undefined).
  WorkingShardSink* working_sink() const { return file_.get(); }
  Tensor grads() const { return grads_.view(0, DType::F32, {shard_numel_}); }
  // On the device: the working shard (the one gathered, unless in host memory) with the groups
  // kept whole, and, when it is a separate copy, the fp32 master. In host memory: the shard
  // gathered, when the parameters are offloaded.
  int64_t persistent_param_bytes() const;
  int64_t master_param_bytes() const { return mixed() && !offload_.optimizer ? shard_numel_ * 4 : 0; }
  // In host memory: the shard gathered (offload_param cpu) or the file's ring of buffers (nvme);
  // in the file: the shard.
  int64_t host_param_bytes() const;
  int64_t nvme_param_bytes() const { return file_ ? gathered_shard_bytes() : 0; }
  int64_t workspace_bytes() const;

 private:
  struct Slot {
    Buffer buffer;
    int group = -1;     // group held (or arriving); -1 free
    bool in_use = false;
    CommHandle pending;  // gather (param slots) or reduce-scatter (grad slots) in flight
    int64_t issued = 0;  // grad slots: order of the reduce-scatter, so the oldest settles first
    Buffer twin;         // grad slots under a 16-bit comm_dtype: the gradient as it travels
    int staged = -1;     // param slots, offload_param nvme: the file's buffer the gather reads
  };
  bool is_embedding(int group) const { return group == 0; }
  bool mixed() const { return work_dtype_ != DType::F32; }
  // One data-parallel rank reducing in fp32: the reduce-scatter would be a copy, so a released
  // gradient is added straight into the accumulator, and there is no landing area.
  bool folds_gradients() const { return dp_.size() == 1 && comm_dtype_ == DType::F32; }
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
  // Gathers `group` from the shard into `out` (its padded size, in the working dtype); with the
  // shard in a file, `staged` is the buffer of it the gather reads until it lands.
  CommHandle gather(int group, const Buffer& out, int& staged);
  // Waits for a gather and lets its file buffer go.
  void land_gather(CommHandle& pending, int& staged);

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
  OffloadSettings offload_;
  int64_t reductions_issued_ = 0;
  Buffer params_, grads_, recv_;
  Buffer recv_twin_;  // 16-bit comm_dtype: the reduce-scatter output as it travels
  Buffer work_params_;  // mixed precision: params_ rounded to work_dtype_, the gather source
  std::unique_ptr<ParamFile> file_;  // offload_param nvme: the gather source instead
  // Pools: slot 0 holds the embeddings; the others, two each, hold blocks and ln_f so that
  // one group can arrive while the previous one is in use.
  std::vector<Slot> embed_params_, layer_params_, embed_grads_, layer_grads_;
  // Per layer group: the buffer of a group kept whole, gathered again after each optimizer step.
  struct Whole {
    Buffer buffer;
    bool kept = false;
    bool current = false;  // gathered (or arriving) since the parameters last changed
    CommHandle pending;
    int staged = -1;
  };
  std::vector<Whole> whole_;
};

}  // namespace strata
