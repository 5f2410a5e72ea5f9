// Public header of src/engine: the Engine that runs a step over this rank's model chunks — its
// micro-batches directly or through the pipeline schedule's table, the gradient reductions its
// sharding strategy (ZeRO stage) performs, the global gradient norm, clipping, fp16 loss scaling
// and the strategy's update — and inference through every pipeline stage.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "model/model.h"
#include "optim/optim.h"
#include "pipeline/pipeline.h"
#include "sharding/sharding.h"
#include "tensor_parallel/tensor_parallel.h"

namespace strata {

// ---- engine ------------------------------------------------------------------------------
// Pipeline parallelism (with a pipeline communicator of two ranks or more): the model is cut
// into stages × virtual_stages chunks by `partition` (empty: uniform_partition), and each
// optimizer step runs `micro_batches` micro-batches through the schedule's tables.
struct PipelineSettings {
  PipeSchedule schedule = PipeSchedule::OneFOneB;
  int virtual_stages = 1;
  std::vector<ChunkLayers> partition;
  int micro_batches = 1;
  // When > 0, every chunk's forward and backward last at least this long (seconds; a sleep pads
  // them): micro-batches of a known, equal cost on every stage, for measuring the bubble
  // against theory (STRATA_PIPE_COST_MS).
  double forward_seconds = 0, backward_seconds = 0;
};

// What one pipeline stage runs: its schedule's shape, its model chunks (chunk c of the stage is
// model chunk c · stages + stage) and how many copies of each it keeps, one per micro-batch in
// flight. Throws UserError when the shape or the partition does not fit n_layer.
struct PipelineStagePlan {
  PipeShape shape;
  std::vector<GptChunk> chunks;
  int slots = 1;                 // micro-batch-chunks in flight on the stage
  std::vector<int> chunk_slots;  // per chunk: its micro-batches in flight (copies of its model)
};
PipelineStagePlan pipeline_stage_plan(const PipelineSettings& settings, int n_layer, int stages, int stage);

struct EngineSettings {
  // The ZeRO stage and what it needs (buckets, overlap, AdamW, precision): the strategy's.
  // precision F32; BF16 or F16: the model's parameters and activations in that dtype, with
  // fp32 master weights, gradient accumulation and Adam state. F16 adds loss scaling.
  ShardingSettings sharding;
  double gradient_clipping = 0.0;  // 0 = off
  LossScalerSettings loss_scaler;
  // Tensor parallelism (with a TP communicator of two ranks or more): the token rows of the
  // residual stream are split over the TP group between the linear layers.
  bool sequence_parallel = false;
  // wall_clock_breakdown: every timed phase ends by synchronizing the backend, so that device
  // work is charged to the phase that issued it, not to the next host wait (a little overlap
  // between phases is lost, as with DeepSpeed's synchronized timers).
  bool synchronize_phases = false;
  PipelineSettings pipeline;
};

// What Engine::apply did. grad_norm is the unscaled global norm before clipping (not finite
// when the gradient holds an inf or NaN on any rank); loss_scale is the scale the step's
// gradients carried and next_loss_scale the one the next step uses (both 1 outside fp16).
struct StepOutcome {
  double grad_norm = 0.0;
  // The gradient was not finite: no optimizer step (nor, for the caller, LR step), so that a
  // non-finite value never reaches the parameters or the Adam state.
  bool skipped = false;
  // Skipped, and not an fp16 overflow that lowering the loss scale answers (in fp32/bf16
  // always; in fp16 once the scale is at its minimum or static): a fault of the run.
  bool nonfinite = false;
  double loss_scale = 1.0;
  double next_loss_scale = 1.0;
};

// Seconds since begin_step; comm_wait is time blocked on DP collectives, tp_wait on the model's
// tensor-parallel collectives (both included in the phase during which they happened).
// Under pipeline parallelism pipe_wait is the time blocked in send/recv between stages (part
// of no other phase) and pipeline the wall time of the schedule's table (its computes and
// transfers, before the gradients' DP reduction): pipeline − pipe_wait is the stage's busy time.
struct EngineTimes {
  double forward = 0, backward = 0, comm_wait = 0, tp_wait = 0, optimizer = 0, pipe_wait = 0, pipeline = 0;
};

// How a step may end early for a stop signal (Engine::run_step). With a pipeline the ranks vote
// on local_stop() as the schedule reaches each micro-batch (`vote`, see pipe_stop_vote_lag);
// without one, `agreed` (a collective every rank calls, true on all or none) is asked between
// micro-batches. Either may be empty: the step then runs to its end.
struct StepStop {
  WorldVote* vote = nullptr;
  std::function<bool()> local_stop;
  std::function<bool()> agreed;
};

// One micro-batch's token and target ids, (B, T) row-major each; and the source run_step draws
// a step's micro-batches from, in order, as it needs them (one at a time without a pipeline, so
// a step of very many micro-batches neither waits for nor holds them all).
struct StepBatch {
  std::vector<int32_t> tokens, targets;
};
using NextBatch = std::function<StepBatch()>;

// The groups an engine communicates over. `dp` carries the gradient and parameter traffic;
// `scalars` (the world, ranks ordered TP fastest, then DP, then PP) the few scalar collectives
// (gradient norm), so that dp's counters hold exactly the ZeRO traffic. Optional: `tp`, this
// rank's tensor-parallel group (the model is then this rank's slice, see Gpt, and ZeRO
// partitions that slice over dp); `pp` (two ranks or more: pipeline parallelism), this rank's
// pipeline, over which the stages trade activations and gradients; `embedding`, the group of the
// first and last stage (the tied embedding's gradient is summed over it).
struct EngineGroups {
  Comm* dp = nullptr;
  Comm* scalars = nullptr;
  Comm* tp = nullptr;
  Comm* pp = nullptr;
  Comm* embedding = nullptr;
};
// This rank's groups in the rank grid.
EngineGroups engine_groups(Topology& topology);

// One rank's part of the training step: owns its sharding strategy (the ZeRO stage: the
// parameter store, the gradient reduction, the master parameters and AdamW) and the model chunks
// built on that strategy's store, and runs the step protocol: micro-batches or the pipeline
// schedule, the norm, clipping and loss scaling, then the strategy's update. Every rank calls
// the same methods in the same order.
class Engine {
 public:
  // groups.dp and groups.scalars are required.
  Engine(Backend& backend, const EngineGroups& groups, const GptDims& dims, int micro_batch,
         ActivationRecompute recompute, const EngineSettings& settings);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // The model (the first of this rank's chunks under pipeline parallelism).
  Gpt& model() { return *model_; }
  // This rank's parameters: its TP slice of its pipeline chunks, in the flat layout spans use.
  const std::vector<ParamSpec>& params() const { return specs_; }
  int pipeline_stages() const { return stages_; }
  bool last_stage() const { return stage_ + 1 == stages_; }
  // Slots per chunk: the micro-batches whose activations this rank keeps at once.
  // Per chunk of this stage: the micro-batches whose activations it keeps at once.
  const std::vector<int>& pipeline_chunk_slots() const { return chunk_slots_; }
  const PipeShape& pipeline_shape() const { return shape_; }
  const TensorParallel& tensor_parallel() const { return *tp_; }
  int zero_stage() const { return settings_.sharding.zero_stage; }
  DType precision() const { return settings_.sharding.precision; }
  void init_weights(uint64_t seed);

  // One optimizer step: run_step, apply, then take_step_losses.
  // run_step: the forward and backward passes of the step's `micro_batches` micro-batches
  // (B, T), drawn from `next` — through this rank's pipeline schedule when there is one (all
  // drawn first), else one after another — and the gradient
  // reductions: afterwards with stage 0 model().grads_flat() is the global gradient (times
  // loss_scale() under fp16). dloss is the weight of each token's loss in the global objective
  // (1 / tokens of the global batch); with fp16 the backward runs on dloss × loss scale. Returns
  // the micro-batches done: all of them, or fewer when `stop` ended the step, which is then
  // abandoned (parameters and optimizer state stay as the last apply left them).
  int run_step(const NextBatch& next, int micro_batches, int B, int T, float dloss, const StepStop& stop = {});
  // The mean loss of each micro-batch of the step, in order (zeros on a pipeline stage without
  // the loss), read back in one wait for the device: the step's one read-back of losses.
  std::vector<float> take_step_losses();
  // Inference through every stage (all ranks of the pipeline call it): the mean loss of a batch
  // (on the last stage; 0 elsewhere), and the last position's logits (vocab_size values) for a
  // (1, T) context, the same on every stage.
  float forward_loss(const int32_t* tokens, const int32_t* targets, int B, int T);
  std::vector<float> last_token_logits(const int32_t* tokens, int T);
  // Global gradient norm (before clipping); under fp16 the overflow check (a non-finite norm:
  // the norm is assembled from every rank's gradients, so all ranks agree) and the loss-scale
  // update; unless the step overflowed, unscaling, clipping, AdamW with `lr` on the fp32
  // master, and the refresh of the working copy (cast, and the all-gather of stages 1-2).
  StepOutcome apply(double lr);
  double loss_scale() const { return loss_scaler_.scale(); }
  const LossScalerState& loss_scaler_state() const { return loss_scaler_.state(); }
  void set_loss_scaler_state(const LossScalerState& state) { loss_scaler_.set_state(state); }

  const EngineTimes& times() const { return times_; }
  // Every rank of a pipeline must set the same value (the phases then end in a barrier).
  void set_synchronize_phases(bool on) { settings_.synchronize_phases = on; }
  MemoryRecord memory() const;

  // Checkpoint state (parameters: the fp32 master). saved_spans: what this rank writes
  // (disjoint across DP ranks, together covering [0, N)), each span either host memory (data)
  // or read on demand into host memory (read: state on a device, or offloaded to a file), so a
  // save never copies the rank's whole state. held_spans: everything this rank holds and must
  // fill when loading (fill_span), host memory (on a device backend, host copies the engine
  // keeps) or, for state in a file, written on demand; then call params_loaded (collective),
  // which moves what was written to the device and re-derives the working copy from the master.
  std::vector<FlatSpan> saved_spans(StateKind kind);
  // The same spans in the backend's memory, copying nothing: for what a checkpoint's size needs.
  std::vector<FlatSpan> saved_span_layout(StateKind kind) { return strategy_->saved_spans(kind); }
  std::vector<FlatSpan> held_spans(StateKind kind);
  void params_loaded();
  int64_t optimizer_steps() const { return strategy_->optimizer().steps_taken(); }
  // Collective: the first parameter (in layout order) whose reduced gradient holds an inf or
  // NaN on some rank, empty when all are finite; call after apply (which leaves a skipped
  // step's gradient in place), to say where a non-finite step came from.
  std::string first_nonfinite_gradient();
  // Collective: the first tensor of what a checkpoint saves (the fp32 parameters, then Adam's
  // moments) holding an inf or NaN on some rank, by its checkpoint name (e.g.
  // "optim.exp_avg.h.0.ln_1.weight"); empty when the state is finite.
  std::string first_nonfinite_state();
  void set_optimizer_steps(int64_t steps) { strategy_->optimizer().set_steps_taken(steps); }

 private:
  // The pieces of run_step. begin_step announces the micro-batch count; micro_step runs one
  // micro-batch (its losses logged); pipeline_step runs them all through the schedule table
  // and the reductions, finishing only the micro-batches before the one a stop vote names
  // (stopped_before_); finish_reduction waits for every reduction; abandon_step lets those in
  // flight land and drops the step.
  void begin_step(int micro_batches);
  void micro_step(const int32_t* tokens, const int32_t* targets, int B, int T, float dloss);
  void pipeline_step(const std::vector<const int32_t*>& tokens, const std::vector<const int32_t*>& targets, int B,
                     int T, float dloss, const StepStop& stop);
  void finish_reduction();
  void abandon_step();
  // Construction: model_param_names_ and spec_order_ (each local spec's index in the whole
  // model's order).
  void order_params();
  // Pipeline parallelism: this rank's stage, chunks, slots and schedule table.
  void plan_pipeline();
  Gpt& chunk_model(int chunk, int micro_batch) {
    const auto c = static_cast<size_t>(chunk);
    return *models_[static_cast<size_t>(chunk_first_[c] + micro_batch % chunk_slots_[c])];
  }
  // The action's transfers of micro-batches below `below` (all of them when not stopping).
  void communicate(const PipeAction& action, int B, int T, int below);
  // The tied embeddings' gradient (`grads`, the strategy's view of it) summed over the
  // embedding group, when this rank holds a tied pair.
  void sum_tied_embeddings(const Tensor& grads);
  // Inference: one batch through this rank's chunks in model order, each receiving its input
  // from the stage before and passing its output on; `head` runs the last chunk of the model.
  void forward_through_stages(const int32_t* tokens, int B, int T, const std::function<void(Gpt&)>& head);
  bool holds_embeddings() const { return groups_[0].numel() > 0; }
  bool tied() const { return embedding_ && embedding_->size() > 1 && holds_embeddings(); }
  // Seconds since t started; with synchronize_phases, once the backend has caught up.
  double phase_seconds(const Timer& t);
  Device device() const { return backend_.device(); }
  // Σ g² over this rank's gradient tensor `grads` (the strategy's) that the global norm counts
  // from this rank: all of it without TP; under TP the parameters split over the group, and the
  // replicated ones on TP rank 0 only (the strategy's norm_runs).
  double grad_norm_squared_part(const Tensor& grads);
  // The global Σ g², the same bits on every rank.
  double grad_norm_squared(const Tensor& grads);
  // Collective: the first parameter in the whole model's order (an index of
  // model_param_names_) that has a non-finite value in some rank's `spans`; -1 when none has.
  int64_t first_nonfinite_spec(const std::vector<FlatSpan>& spans);

  Backend& backend_;
  Comm& dp_;
  Comm& scalars_;
  std::unique_ptr<TensorParallel> tp_;
  GptDims dims_;
  EngineSettings settings_;
  EngineTimes times_;
  std::vector<ParamSpec> specs_;
  std::vector<LayerGroup> groups_;  // n_layer + 2, empty where this rank holds none
  // Declared before the models, which use its store: destroyed after them.
  std::unique_ptr<ShardingStrategy> strategy_;
  Buffer activation_scratch_;  // the models' shared activation scratch: destroyed after them
  std::vector<std::unique_ptr<Gpt>> models_;  // chunk c's chunk_slots_[c] copies from chunk_first_[c]
  // The head chunk's forwards of this step in the order they ran: which slot's model logged
  // which micro-batch's losses.
  std::vector<std::pair<Gpt*, int>> logged_heads_;
  Gpt* model_ = nullptr;
  Comm* pp_ = nullptr;
  Comm* embedding_ = nullptr;
  int stages_ = 1, stage_ = 0, slots_ = 1;
  std::vector<GptChunk> chunks_;
  std::vector<int> chunk_slots_ = {1}, chunk_first_ = {0};
  PipeShape shape_;
  int stopped_before_ = 0;  // of the last pipeline_step: its micro-batch count unless stopped
  std::vector<PipeAction> table_;
  Buffer logits_row_;  // PP samples: the last stage's logits, broadcast
  // Index of each of specs_ in the whole model's parameter order, and that order's names: how
  // ranks holding different parameters agree on "the first" one.
  std::vector<int64_t> spec_order_;
  std::vector<std::string> model_param_names_;
  LossScaler loss_scaler_;
  // Host copies of the spans a load fills on a device backend, per StateKind.
  struct StagedSpan {
    FlatSpan device;
    std::vector<float> host;
  };
  std::vector<StagedSpan> loading_[3];
  // On a device backend: host copies of `spans` (to be filled) recorded in `staged`, returned in
  // their place; on the CPU the spans themselves.
  std::vector<FlatSpan> host_spans(std::vector<FlatSpan> spans, std::vector<StagedSpan>& staged);
  int micro_batches_ = 1, micro_index_ = 0;
};

}  // namespace strata
