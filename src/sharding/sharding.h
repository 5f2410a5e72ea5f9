// Public header of src/sharding: how a data-parallel group shares a model's gradient, optimizer
// state and parameters — the partition and bucket arithmetic over the flat layout, and one
// ShardingStrategy per ZeRO behaviour (replicated, sharded optimizer state, sharded parameters),
// each owning its buffers, its master parameters, its AdamW state and its checkpoint spans.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "model/model.h"
#include "optim/optim.h"

namespace strata {

// ---- partition arithmetic (pure) ---------------------------------------------------------
struct FlatRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t numel() const { return end - begin; }
};

// A unit of the partition: a range of the flat layout padded to a multiple of the DP size
// and cut into DP equal pieces; DP rank r owns piece r, [begin + r·piece, begin + (r+1)·piece)
// clipped to the real elements, stored at `shard_offset` of its shard.
struct PartitionUnit {
  int64_t begin = 0;
  int64_t numel = 0;
  int64_t padded = 0;
  int64_t piece = 0;  // padded / dp
  int64_t shard_offset = 0;
};

// One run of flat elements a rank owns, and where they sit in its shard.
struct OwnedRun {
  int64_t flat_begin = 0;
  int64_t shard_offset = 0;
  int64_t count = 0;
};

// The flat layout split into units (consecutive ranges covering [0, N)). With one unit this is
// the classic ZeRO layout: N padded to a multiple of DP, rank r owns [r·S, (r+1)·S). With
// several units (reduction buckets, layer groups) every unit is split that way, so each unit is
// one equal-block reduce-scatter / all-gather and the shard is the concatenation of the pieces.
class FlatPartition {
 public:
  FlatPartition(const std::vector<FlatRange>& units, int dp_size, int dp_rank);
  int dp_size() const { return dp_size_; }
  int dp_rank() const { return dp_rank_; }
  int64_t numel() const { return numel_; }             // N
  int64_t shard_numel() const { return shard_numel_; }  // S = Σ piece
  const std::vector<PartitionUnit>& units() const { return units_; }
  // Runs of real (non-padding) elements owned by `rank` (default: this rank), in flat order.
  std::vector<OwnedRun> owned_runs(int rank) const;
  std::vector<OwnedRun> owned_runs() const { return owned_runs(dp_rank_); }

 private:
  std::vector<PartitionUnit> units_;
  int dp_size_ = 1, dp_rank_ = 0;
  int64_t numel_ = 0, shard_numel_ = 0;
};

int64_t round_up(int64_t value, int64_t multiple);
// Reduction buckets: [k·B, (k+1)·B) cut from the front, B = bucket_size rounded up to a multiple
// of dp_size, so every bucket but the last needs no padding and the padded buckets tile
// [0, round_up(N, dp)). Returned in flat order; reductions run them last to first (backward
// produces gradients from the end of the layout to its start).
std::vector<FlatRange> make_buckets(int64_t numel, int64_t bucket_size, int dp_size);
// The lowest layer group a range touches: its gradient is complete once backward has released
// that group (groups are released in descending order).
int lowest_group(const FlatRange& range, const std::vector<LayerGroup>& groups);

// A piece of one parameter: elements [begin, begin + count) of `spec` flattened, at element
// `span_offset` of the span it was cut from.
struct SpecSlice {
  const ParamSpec* spec = nullptr;
  int64_t begin = 0;
  int64_t count = 0;
  int64_t span_offset = 0;
};
// Cuts the flat range [flat_begin, flat_begin + count) along parameter boundaries.
std::vector<SpecSlice> slices_by_spec(const std::vector<ParamSpec>& specs, int64_t flat_begin, int64_t count);

// The parts of a gradient tensor laid out by `runs` (flat ranges and their place in the tensor:
// an owned shard, or {0, 0, N} for the flat layout) that the global gradient norm counts on this
// rank (specs carry its TP rank): without TP all of them; under TP the parameters split over the
// group, and those replicated on every TP rank only on TP rank 0, so that each counts once.
// As [begin, end) ranges of the tensor, adjacent ones merged.
std::vector<FlatRange> tp_norm_runs(const std::vector<ParamSpec>& specs, const std::vector<OwnedRun>& runs,
                                    int tp_size);

// ---- what a strategy holds -----------------------------------------------------------------
enum class StateKind { Params, ExpAvg, ExpAvgSq };
// `count` fp32 values of the flat layout starting at flat_begin, held at `data` (host memory
// when handed out by Engine's checkpoint methods; the backend's memory inside a strategy).
// on_host: data is host memory on any backend (offloaded optimizer state).
struct FlatSpan {
  FlatSpan() = default;
  FlatSpan(int64_t begin, int64_t n, float* values, bool host = false)
      : flat_begin(begin), count(n), data(values), on_host(host) {}
  int64_t flat_begin = 0;
  int64_t count = 0;
  float* data = nullptr;
  bool on_host = false;
  // data null: the values are read and written on demand instead, `count` of them from element
  // `offset` of the span, out of or into host memory (state on a device or in a file, streamed
  // into a checkpoint or out of one a tensor at a time).
  std::function<void(int64_t offset, int64_t count, float* out)> read;
  std::function<void(int64_t offset, int64_t count, const float* in)> write;
};

// Sets `count` values of `span` from element `offset` on to what `fill` writes into host memory:
// in place, or through a scratch copy when the span is written on demand.
inline void fill_span(const FlatSpan& span, int64_t offset, int64_t count, const std::function<void(float*)>& fill) {
  if (span.data) {
    fill(span.data + offset);
    return;
  }
  std::vector<float> scratch(static_cast<size_t>(count));
  fill(scratch.data());
  span.write(offset, count, scratch.data());
}

// Bytes a rank holds persistently; workspace is the transient memory the strategy declares
// (staging for collectives, stage 2's full-size gradient scratch, stage 3's gathered groups).
// params is the working copy the model reads (2 bytes per element under mixed precision);
// the fp32 master copy, when separate, counts as optimizer state with Adam's m and v.
// activations: the models' arenas (under pipeline parallelism one per chunk and in-flight
// slot), which the engine adds to what its strategy reports. host: what offloading keeps in
// host memory instead (state and staging), outside the device's total.
// nvme: the state offloaded to files (its bytes; each file rounds its pieces up to 4 KiB).
// host_buffers: the part of host that is staging and file buffers (buffer_count of them), not state.
struct MemoryRecord {
  int64_t params = 0, grads = 0, optimizer = 0, workspace = 0, activations = 0;
  int64_t host = 0, nvme = 0, host_buffers = 0;
  int64_t total() const { return params + grads + optimizer + workspace + activations; }
};

// ---- strategies ----------------------------------------------------------------------------
// ZeRO 3's bounds on what stays gathered, as DeepSpeed's keys give them (the maxima: no bound).
struct Stage3Bounds {
  // A layer group whose every parameter has at most param_persistence_threshold elements stays
  // gathered on every rank from one optimizer step to the next (0: none does), as long as the
  // groups kept whole hold at most model_persistence_threshold elements in all.
  int64_t param_persistence_threshold = 0;
  int64_t model_persistence_threshold = INT64_MAX;
  // The next group of a pass is gathered ahead of its use only when it has at most
  // prefetch_bucket_size elements and the gathered groups would then hold at most
  // max_live_parameters; otherwise it is gathered when the model reaches it.
  int64_t prefetch_bucket_size = INT64_MAX;
  int64_t max_live_parameters = INT64_MAX;
};

// offload_optimizer.device cpu on a device backend (stages 1-3): the shard's fp32 master and
// Adam's moments live in host memory and the update runs there (the host AdamW), piece by piece
// of the shard while the next piece's gradient comes down and the last one's parameters go up.
// With nvme_path set (offload_optimizer.device nvme, on any backend) the state lives in a file
// there instead, read a few pieces ahead and written behind through buffer_count buffers.
struct OffloadSettings {
  bool optimizer = false;
  bool pinned = false;  // pin_memory: the host state (or, on nvme, its buffers) page-locked
  int threads = 1;      // the host AdamW's threads
  // The longest piece (elements); pieces are the shard's owned runs cut to this length.
  int64_t max_piece = int64_t{1} << 22;
  std::string nvme_path;  // non-empty: the state in a file in this directory
  int buffer_count = 4;   // nvme: pieces of state in host memory at once (at least 2)
  // offload_param (stage 3, with the optimizer offloaded): the parameter shard that
  // gets gathered lives in host memory (page-locked with params_pinned), written in place by the
  // host AdamW and carried up piece by piece as each layer group is gathered.
  bool params = false;
  bool params_pinned = false;
  // offload_param.device nvme: the parameter shard in a file in this directory instead, read into
  // params_buffer_count buffers (at least 3) a layer group ahead of the gathers.
  std::string params_nvme_path;
  int params_buffer_count = 4;
};

struct ShardingSettings {
  // ZeRO stage: 0 replicated; 1 optimizer state sharded, the gradient reduced once per step;
  // 2 the same, the gradient reduced after every micro-batch into the shard; 3 parameters
  // sharded too (gathered layer group by layer group as the model reaches them).
  int zero_stage = 0;
  bool overlap_comm = false;  // reductions issued during backward, waited for at its end
  int64_t reduce_bucket_size = 500000000;  // elements
  AdamWSettings adamw;
  // F32; BF16 or F16: the model's parameters in that dtype, the fp32 master here.
  DType precision = DType::F32;
  // The dtype the gradients' data-parallel reductions travel in (communication_data_type): F32,
  // or BF16/F16, when each reduction's input is rounded into a 16-bit twin buffer, reduced there
  // (half the bytes), and widened back into the fp32 gradient once it has landed.
  DType comm_dtype = DType::F32;
  // Pipeline parallelism: reductions run after the schedule (stages 0-1, 3) or after each
  // chunk's backward (stage 2), not from the model's gradient-ready callback.
  bool pipelined = false;
  Stage3Bounds stage3;
  OffloadSettings offload;
};

// Where a strategy keeps its fp32 master and Adam's moments, and where its update runs, is its
// own business: the engine sees only grads(), update() and the spans. Offloading (ZeRO-Offload,
// ZeRO-Infinity) is a strategy that keeps them in host memory or on NVMe and runs update there.
//
// What every strategy does, in the order the engine calls it. One step without a pipeline:
// begin_step, then per micro-batch begin_micro_batch, the model's forward and backward (which
// calls grad_ready per layer group), end_micro_batch; then finish_reductions. With a pipeline:
// begin_step, the schedule (chunk_backward_done after each chunk's backward), then
// finish_pipeline. Then grads() for the norm, and update unless the step is skipped.
// Every member rank of the DP group calls the same methods in the same order.
class ShardingStrategy {
 public:
  virtual ~ShardingStrategy() = default;
  ShardingStrategy(const ShardingStrategy&) = delete;
  ShardingStrategy& operator=(const ShardingStrategy&) = delete;

  // The store the model's chunks reach their parameters and gradients through.
  virtual ParamStore& store() = 0;
  // The model's own parameters are the fp32 master (fp32 stages 0-2): they may be written in
  // place (init, loads) with nothing to re-derive.
  virtual bool model_holds_master() const = 0;

  // ---- the step's gradient
  // Zeroes what accumulates the step's gradient.
  virtual void begin_step() = 0;
  // Before a micro-batch's forward (without a pipeline); `last`: the step's last one.
  virtual void begin_micro_batch(bool last) = 0;
  // The gradient is reduced after every micro-batch (stages 2-3), not once per step: what
  // sequence parallelism leaves partial per TP rank is then completed every micro-batch.
  virtual bool reduces_every_micro_batch() const = 0;
  // From the model's backward: layer group `group` (and every group above it) is complete.
  virtual void grad_ready(int group) = 0;
  // After a micro-batch's backward: issue what is left, and wait for it unless overlapping.
  virtual void end_micro_batch() = 0;
  // Waits for every reduction in flight and accumulates it (end of a step, or an abandoned one).
  virtual void finish_reductions() = 0;
  // A pipeline chunk's backward of one micro-batch is done.
  virtual void chunk_backward_done(const GptChunk& chunk) = 0;
  // After the pipeline's schedule: the reductions of the step, with the tied embeddings'
  // gradient summed over the first and last stage by `sum_tied` at the point this strategy
  // needs (before the DP reduction of a flat gradient, after it on a shard).
  virtual void finish_pipeline(const std::function<void(const Tensor&)>& sum_tied) = 0;

  // ---- the update
  // The reduced gradient this rank updates from (flat, or its shard).
  virtual Tensor grads() const = 0;
  // Every DP rank holds the same reduced gradient (stage 0): one replica's norm counts.
  virtual bool grads_replicated() const = 0;
  // The ranges of grads() the global norm counts on this rank (tp_norm_runs).
  const std::vector<FlatRange>& norm_runs() const { return norm_runs_; }
  // AdamW with `lr` on the fp32 master from grads() × grad_multiplier (unscaling and clipping
  // in one), then the working copy refreshed (cast, and the all-gather of stages 1-2).
  virtual void update(float lr, float grad_multiplier) = 0;
  AdamW& optimizer() { return *optimizer_; }
  const AdamW& optimizer() const { return *optimizer_; }

  // ---- state
  // After held_spans were written (init, load; collective): re-derive the working copy.
  virtual void params_loaded() = 0;
  // What this rank writes to a checkpoint (disjoint across DP ranks, together covering [0, N)),
  // and everything it holds and must fill when loading; in the backend's memory, host memory
  // (offloaded), or, for state in a file, read and written on demand (FlatSpan::read, write).
  virtual std::vector<FlatSpan> saved_spans(StateKind kind) = 0;
  virtual std::vector<FlatSpan> held_spans(StateKind kind) = 0;
  // The reduced gradient this rank holds, as spans of the flat layout.
  virtual std::vector<FlatSpan> gradient_spans() = 0;
  // Everything but the activations.
  virtual MemoryRecord memory() const = 0;

 protected:
  ShardingStrategy() = default;
  std::unique_ptr<AdamW> optimizer_;
  std::vector<FlatRange> norm_runs_;
};

// Where a strategy lives: `specs` is this rank's flat layout (its TP slice of its pipeline
// chunks, gpt_rank_specs) and `groups` its layer groups (gpt_layer_groups, n_layer + 2 of
// them); both must outlive the strategy. Reductions' waits are added to *comm_wait_seconds.
struct ShardingPlace {
  Backend* backend = nullptr;
  Comm* dp = nullptr;
  const std::vector<ParamSpec>* specs = nullptr;
  const std::vector<LayerGroup>* groups = nullptr;
  int tp_size = 1;
  double* comm_wait_seconds = nullptr;
};

// The strategy of settings.zero_stage (UserError for a stage outside 0-3).
std::unique_ptr<ShardingStrategy> make_sharding_strategy(const ShardingPlace& place, const ShardingSettings& settings);
// What that strategy's memory() will be for this layout over `dp_size` ranks, from the layout
// alone, before anything is allocated (for refusing a config that cannot fit). Exact, but for
// partitions by layer group (stage 3, stage 2 under a pipeline), where each group's padding to
// a multiple of DP is left out.
MemoryRecord estimate_sharding_memory(const ShardingSettings& settings, const std::vector<ParamSpec>& specs,
                                      const std::vector<LayerGroup>& groups, int dp_size);

}  // namespace strata
