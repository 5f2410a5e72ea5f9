// Private to src/sharding: the three strategies behind make_sharding_strategy. Replicated (ZeRO
// 0) and ShardedState (ZeRO 1-2) share the flat parameter store and the bucketed reduction of
// FlatStrategy; ShardedParams (ZeRO 3) owns the ShardedParamStore, which reduces layer group by
// layer group as backward releases them.
#pragma once
#include <memory>
#include <vector>

#include "sharding/sharded_param_store.h"
#include "sharding/sharding.h"

namespace strata {

// A layout's sizes, for the strategies' memory estimates: n elements over dp ranks, padded to
// a multiple of dp (shard = padded / dp); the embeddings' group and the widest other group.
struct LayoutSize {
  int64_t n = 0, padded = 0, shard = 0, embedding_group = 0, widest_group = 0;
  int64_t dp = 1;
};

// Offloaded optimizer state (OffloadSettings): the shard's fp32 master and Adam's moments in
// host memory, or in a file on a fast disk (nvme), and the update run on the host piece by
// piece. The device keeps the reduced gradient shard and the working shard (the parameters
// rounded to the model's dtype, or fp32). One stream carries both copies: each wait lets the next
// piece's gradient come down and the last piece's parameters go up while the host updates the
// current piece; on nvme the file is read a few pieces ahead and written behind as well.
class HostOptimizerState {
 public:
  // The pieces are the shard's owned runs (padding never travels), cut to at most
  // settings.max_piece; `work` is the working shard's dtype.
  HostOptimizerState(Backend& backend, const OffloadSettings& settings, const std::vector<OwnedRun>& runs,
                     int64_t shard_numel, DType work);
  ~HostOptimizerState();
  // The AdamW whose moments live beside the master (or with it in the file).
  std::unique_ptr<AdamW> make_optimizer(const AdamWSettings& settings, std::vector<ParamRange> ranges) const;
  // AdamW on the master from the device's reduced shard `grads` × grad_multiplier; `working`
  // (laid out like grads: device memory, or host memory written in place) receives the updated
  // master rounded to its dtype, or, given a sink (working then undefined), the sink does.
  void update(AdamW& optimizer, Tensor grads, Tensor working, float lr, float grad_multiplier,
              WorkingShardSink* sink = nullptr);
  // The spans of `runs` (laid out as the shard) holding `kind`: host memory, or on nvme spans
  // whose values are read from the file and written to it on demand (FlatSpan::read, write), so
  // that saving and loading never hold the state.
  std::vector<FlatSpan> spans(StateKind kind, AdamW& optimizer, const std::vector<OwnedRun>& runs);
  // After the spans were written (init, load): working = the master rounded.
  void loaded(Tensor working, WorkingShardSink* sink = nullptr);
  // host: the master and moments (or the file's buffers) and the staging; nvme: the state's
  // bytes in the file.
  void add_to(MemoryRecord& record) const;
  static void estimate(const OffloadSettings& settings, int64_t shard_numel, DType work, MemoryRecord& record);

 private:
  struct Files;
  Tensor stage(const Buffer& buffer, DType dtype, int64_t count) const;
  // The transfers of every piece, one stream, around update_one(k), which updates piece k from
  // grad_stage_[k % 2] into work_stage_[k % 2]; update_memory and update_files supply it.
  void transfer_pieces(Tensor grads, Tensor working, const std::function<void(size_t)>& update_one);
  void update_memory(AdamW& optimizer, Tensor grads, Tensor working);
  void update_files(AdamW& optimizer, Tensor grads, Tensor working);
  void down(Tensor grads, size_t k);
  void up(Tensor working, size_t k);
  void update_piece(AdamW& optimizer, size_t k, float* master, float* m, float* v);
  // Sets where this update or load writes the rounded parameters.
  void target(Tensor working, WorkingShardSink* sink);
  // Where piece k's rounded parameters go: the sink's memory, the host working shard itself, or a
  // staging buffer.
  void* rounded_target(size_t k) const;
  const float* master_of(size_t k);
  // nvme (host_optimizer_files.cpp).
  void open_files();
  std::vector<FlatSpan> file_spans(StateKind kind, const std::vector<OwnedRun>& runs);
  // `count` values of `kind` from shard element `shard_begin` on, out of (or into) the records
  // that hold them, through a one-record cache (written back when another record is needed).
  void read_file_state(StateKind kind, int64_t shard_begin, int64_t count, float* out);
  void write_file_state(StateKind kind, int64_t shard_begin, int64_t count, const float* in);
  float* cached_record(size_t k);  // piece k's record, in the cache
  void flush_cache();
  Backend& backend_;
  OffloadSettings settings_;
  DType work_;
  int64_t shard_numel_;
  std::vector<FlatRange> pieces_;  // of the shard, in order
  std::unique_ptr<ThreadPool> pool_;
  HostPlacement placement_;
  Buffer master_;  // in host memory (not on nvme)
  Buffer grad_stage_[2], work_stage_[2];  // page-locked, one piece each
  char* host_working_ = nullptr;  // the working shard of this update or load, when in host memory
  WorkingShardSink* sink_ = nullptr;  // or where it goes instead
  std::unique_ptr<Files> files_;          // nvme
};

// The pieces HostOptimizerState updates in turn: the owned runs (real elements only: padding
// never travels), cut to at most max_piece; and the elements of a staging buffer.
std::vector<FlatRange> offload_pieces(const std::vector<OwnedRun>& runs, int64_t max_piece);
int64_t offload_staging_elements(int64_t shard_numel, int64_t max_piece);

// Stages 0-2: every parameter in one flat store (padded to a multiple of DP), the gradient
// reduced in buckets, last bucket first, as backward completes them (with overlap) or after it.
class FlatStrategy : public ShardingStrategy {
 public:
  ~FlatStrategy() override;
  ParamStore& store() override { return *store_; }
  bool model_holds_master() const override { return !mixed(); }
  void begin_micro_batch(bool last) override;
  void grad_ready(int group) override;
  void end_micro_batch() override;
  void finish_reductions() override { wait_reductions(); }
  void params_loaded() override;

 protected:
  struct Bucket {
    FlatRange range;
    size_t unit = 0;  // index into the partition's units (stages 1-2)
    int lowest_group = 0;
  };
  FlatStrategy(const ShardingPlace& place, const ShardingSettings& settings, const std::vector<FlatRange>& units);
  // Buckets of `ranges` in reduction order (the last of the layout first); `unit_of_each`: the
  // k-th range is partition unit k (stages 1-2), else unit 0.
  void set_buckets(const std::vector<FlatRange>& ranges, bool unit_of_each);
  // Stage 2: what a micro-batch needs before its backward writes the flat gradient.
  virtual void before_micro_batch() {}
  virtual CommHandle issue(const Bucket& bucket) = 0;
  // After every reduction in flight has landed.
  virtual void after_reductions() {}
  // After master parameters changed: cast into the working copy (unless working_current) and
  // whatever else makes every rank's model current.
  virtual void refresh_working(bool working_current) = 0;
  void issue_reduction(size_t k);
  void issue_all_reductions();
  void wait_reductions();
  bool mixed() const { return settings_.precision != DType::F32; }
  bool narrow_comm() const { return settings_.comm_dtype != DType::F32; }
  // The reduction input [begin, begin + count) of the flat gradient: the fp32 view itself, or
  // under a 16-bit comm_dtype that range rounded into flat_twin_ (its view returned).
  Tensor reduction_input(int64_t begin, int64_t count);
  Tensor flat_twin(int64_t begin, int64_t count) const;
  int64_t twin_bytes() const { return static_cast<int64_t>(flat_twin_.bytes()); }
  Device device() const { return backend_.device(); }
  int64_t numel() const { return partition_->numel(); }
  float* flat_params() const { return store_->padded_params().f32(); }  // fp32 only
  float* flat_grads() const { return store_->padded_grads().f32(); }
  // The flat gradient's view of layer group 0 (the embeddings), for the tied sum.
  Tensor embedding_grads() const;
  // Spans of this rank's owned runs: at the same flat offsets of `flat`, or at their shard
  // offsets of `shard` (exactly one given).
  std::vector<FlatSpan> owned_spans(float* flat, float* shard) const;

  Backend& backend_;
  Comm& dp_;
  const std::vector<ParamSpec>& specs_;
  const std::vector<LayerGroup>& groups_;
  ShardingSettings settings_;
  double* comm_wait_;
  std::unique_ptr<FlatPartition> partition_;
  std::unique_ptr<FlatParamStore> store_;
  Buffer flat_twin_;  // 16-bit comm_dtype: the flat gradient as it travels

 private:
  std::vector<Bucket> buckets_;
  std::vector<CommHandle> in_flight_;
  size_t next_bucket_ = 0;
  bool reducing_ = false;  // this micro-batch's backward issues reductions
};

// ZeRO 0: gradient all-reduced, Adam state and (mixed) the fp32 master flat on every rank; the
// one-unit partition only splits checkpoint writing.
class Replicated final : public FlatStrategy {
 public:
  Replicated(const ShardingPlace& place, const ShardingSettings& settings);
  void begin_step() override;
  bool reduces_every_micro_batch() const override { return false; }
  void chunk_backward_done(const GptChunk&) override {}
  void finish_pipeline(const std::function<void(const Tensor&)>& sum_tied) override;
  Tensor grads() const override { return store_->grads(); }
  bool grads_replicated() const override { return true; }
  void update(float lr, float grad_multiplier) override;
  std::vector<FlatSpan> saved_spans(StateKind kind) override;
  std::vector<FlatSpan> held_spans(StateKind kind) override;
  std::vector<FlatSpan> gradient_spans() override { return {{0, numel(), grads().f32()}}; }
  MemoryRecord memory() const override;
  static MemoryRecord estimate(const ShardingSettings& settings, const LayoutSize& size);

 private:
  CommHandle issue(const Bucket& bucket) override;
  void after_reductions() override;
  void refresh_working(bool working_current) override;
  Tensor master() const;
  Tensor working() const;  // mixed only
  float* state(StateKind kind) const;
  Buffer master_;  // mixed precision: the fp32 master of the flat layout
  bool widen_ = false;  // 16-bit comm_dtype: the reduced twin is still to be widened into the gradient
};

// ZeRO 1-2: each rank owns a shard of every bucket (1) or layer group (2 under a pipeline):
// the reduced gradient, the fp32 parameters and Adam's moments of its shard, and after the
// update all-gathers them into every rank's flat copy. Stage 1 reduce-scatters the gradient
// once per step; stage 2 (reduce_every_micro_batch) after every micro-batch, accumulating
// into the shard, so the flat gradient holds one micro-batch's only.
class ShardedState final : public FlatStrategy {
 public:
  ShardedState(const ShardingPlace& place, const ShardingSettings& settings, bool reduce_every_micro_batch);
  ~ShardedState() override;
  // Offloaded, the master is in host memory even in fp32.
  bool model_holds_master() const override { return !mixed() && !host_; }
  void begin_step() override;
  bool reduces_every_micro_batch() const override { return every_micro_batch_; }
  void chunk_backward_done(const GptChunk& chunk) override;
  void finish_pipeline(const std::function<void(const Tensor&)>& sum_tied) override;
  Tensor grads() const override { return shard_view(grad_shard_); }
  bool grads_replicated() const override { return false; }
  void update(float lr, float grad_multiplier) override;
  std::vector<FlatSpan> saved_spans(StateKind kind) override;
  std::vector<FlatSpan> held_spans(StateKind kind) override;
  std::vector<FlatSpan> gradient_spans() override { return owned_spans(nullptr, grads().f32()); }
  MemoryRecord memory() const override;
  static MemoryRecord estimate(const ShardingSettings& settings, const LayoutSize& size, bool every_micro_batch);

 private:
  void before_micro_batch() override;
  CommHandle issue(const Bucket& bucket) override;
  void after_reductions() override;
  void refresh_working(bool working_current) override;
  Tensor shard_view(const Buffer& buffer) const;
  Tensor reduction_output(const PartitionUnit& u) const;
  // The shard the all-gather reads: the rounded master (mixed) or the fp32 parameters.
  Tensor working_shard() const;
  std::vector<FlatSpan> host_spans(StateKind kind);
  bool every_micro_batch_;
  bool pending_ = false;  // stage 2: recv_ holds a micro-batch's reduction to accumulate
  bool widen_ = false;    // 16-bit comm_dtype: shard_twin_ holds reductions still to widen
  Buffer shard_twin_;     // 16-bit comm_dtype: the reduce-scatter output as it travels
  Buffer grad_shard_;     // stage 1: reduced gradient shard; stage 2: accumulated gradient shard
  Buffer recv_;           // stage 2: one micro-batch's reduce-scatter output
  Buffer param_shard_;    // owned fp32 parameters in shard layout (the master when mixed, unless offloaded)
  Buffer work_shard_;     // mixed precision: the master rounded, the all-gather source
  Buffer chunk_scratch_;  // stage 2 under PP: one group's gradient, padded for its reduce-scatter
  std::unique_ptr<HostOptimizerState> host_;  // offloaded: the master and moments in host memory
};

// ZeRO 3: parameters sharded too; the ShardedParamStore gathers each layer group as the model
// reaches it and reduce-scatters its gradient into the shard as backward releases it.
class ShardedParams final : public ShardingStrategy {
 public:
  ShardedParams(const ShardingPlace& place, const ShardingSettings& settings);
  ~ShardedParams() override;
  ParamStore& store() override { return *store_; }
  bool model_holds_master() const override { return false; }
  void begin_step() override { store_->begin_step(); }
  void begin_micro_batch(bool) override {}
  bool reduces_every_micro_batch() const override { return true; }
  void grad_ready(int) override {}
  void end_micro_batch() override {}
  void finish_reductions() override { store_->finish_reductions(); }
  void chunk_backward_done(const GptChunk&) override {}
  void finish_pipeline(const std::function<void(const Tensor&)>& sum_tied) override;
  Tensor grads() const override { return store_->grads(); }
  bool grads_replicated() const override { return false; }
  void update(float lr, float grad_multiplier) override;
  void params_loaded() override { refresh_working(false); }
  std::vector<FlatSpan> saved_spans(StateKind kind) override;
  std::vector<FlatSpan> held_spans(StateKind kind) override;
  std::vector<FlatSpan> gradient_spans() override;
  MemoryRecord memory() const override;
  static MemoryRecord estimate(const ShardingSettings& settings, const LayoutSize& size, const Stage3Plan& plan);

 private:
  void refresh_working(bool working_current);
  std::vector<FlatSpan> owned_spans(float* shard) const;
  std::vector<FlatSpan> host_spans(StateKind kind);
  Backend& backend_;
  ShardingSettings settings_;
  std::unique_ptr<FlatPartition> partition_;
  std::unique_ptr<ShardedParamStore> store_;
  std::unique_ptr<HostOptimizerState> host_;  // offloaded: the master and moments in host memory
};

// AdamW ranges (weight decay per parameter) of a shard laid out by `runs`, and of the flat layout.
std::vector<ParamRange> shard_ranges(const std::vector<ParamSpec>& specs, const std::vector<OwnedRun>& runs);
std::vector<ParamRange> flat_ranges(const std::vector<ParamSpec>& specs);
// Spans of `runs`: at their flat offsets of `flat`, or at their shard offsets of `shard`.
std::vector<FlatSpan> spans_of(const std::vector<OwnedRun>& runs, float* flat, float* shard);
inline Tensor f32_view(float* base, int64_t offset, int64_t count, Device device) {
  return Tensor(base + offset, DType::F32, {count}, device);
}

}  // namespace strata
