// The data-parallel engine: builds the model on the stage's parameter store, reduces
// gradients bucket by bucket (all-reduce for stage 0, reduce-scatter into the owner's shard
// for stages 1-2, per layer group inside the store for stage 3), and runs the AdamW step on
// whatever this rank owns, followed by the refresh of the working copy (the parameter
// all-gather of stages 1-2; under mixed precision first the cast from the fp32 master).
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "parallel/parallel.h"
#include "parallel/sharded_store.h"

namespace strata {
namespace {

// AdamW ranges (weight decay per parameter) of a shard laid out by `runs`.
std::vector<ParamRange> shard_ranges(const std::vector<ParamSpec>& specs, const std::vector<OwnedRun>& runs) {
  std::vector<ParamRange> ranges;
  for (const OwnedRun& run : runs) {
    for (const SpecSlice& s : slices_by_spec(specs, run.flat_begin, run.count)) {
      ranges.push_back({run.shard_offset + s.span_offset, s.count, s.spec->weight_decay});
    }
  }
  return ranges;
}

std::vector<ParamRange> flat_ranges(const std::vector<ParamSpec>& specs) {
  std::vector<ParamRange> ranges;
  for (const ParamSpec& spec : specs) ranges.push_back({spec.offset, spec.numel, spec.weight_decay});
  return ranges;
}

Tensor f32_view(float* base, int64_t offset, int64_t count, Device device) {
  return Tensor(base + offset, DType::F32, {count}, device);
}

// Elements [offset, offset + count) of a buffer holding `dtype` elements.
Tensor typed_view(const Buffer& buffer, DType dtype, int64_t offset, int64_t count) {
  return buffer.view(static_cast<size_t>(offset) * dtype_size(dtype), dtype, {count});
}

// Outside fp16 the scaler is a fixed 1, so the same code path multiplies and divides by 1.
LossScalerSettings scaler_settings(const EngineSettings& s) {
  if (s.precision == DType::F16) return s.loss_scaler;
  LossScalerSettings unit;
  unit.static_scale = 1.0;
  return unit;
}

}  // namespace

EngineGroups engine_groups(Topology& topology) {
  return {&topology.dp(), &topology.world(), &topology.tp(), &topology.pp(), topology.embedding()};
}

namespace {
Comm& required(Comm* group, const char* name) {
  if (!group) throw std::logic_error(std::string("Engine: the ") + name + " group is required");
  return *group;
}
}  // namespace

Engine::Engine(Backend& backend, const EngineGroups& groups, const GptDims& dims, int micro_batch,
               ActivationRecompute recompute, const EngineSettings& settings)
    : backend_(backend), dp_(required(groups.dp, "dp")), scalars_(required(groups.scalars, "scalars")),
      tp_(std::make_unique<TensorParallel>(groups.tp, settings.sequence_parallel)), dims_(dims), settings_(settings),
      loss_scaler_(scaler_settings(settings)) {
  pp_ = groups.pp && groups.pp->size() > 1 ? groups.pp : nullptr;
  embedding_ = groups.embedding;
  if (settings.precision != DType::F32 && settings.precision != DType::BF16 && settings.precision != DType::F16) {
    throw std::logic_error(std::string("Engine: precision must be F32, BF16 or F16, got ") +
                           dtype_name(settings.precision));
  }
  if (settings.zero_stage < 0 || settings.zero_stage > 3) {
    throw UserError("zero_optimization.stage: " + std::to_string(settings.zero_stage) + " is not a ZeRO stage (0-3)");
  }
  plan_pipeline();
  specs_ = gpt_rank_specs(dims, {tp_->rank(), tp_->size()}, chunks_);
  groups_ = gpt_layer_groups(specs_, dims.n_layer + 2);
  order_params();
  const int p = dp_.size();
  const int64_t n = specs_.back().offset + specs_.back().numel;
  std::vector<FlatRange> group_units;
  for (const LayerGroup& g : groups_) group_units.push_back({g.begin, g.end});
  auto make_models = [&](ParamStore* store) {
    for (const GptChunk& chunk : chunks_) {
      for (int k = 0; k < slots_; ++k) {
        models_.push_back(std::make_unique<Gpt>(dims, backend_, micro_batch, recompute, store, settings.precision,
                                                tp_.get(), chunk, &specs_));
      }
    }
    model_ = models_.front().get();
  };
  if (settings.zero_stage == 3) {
    partition_ = std::make_unique<FlatPartition>(group_units, p, dp_.rank());
    sharded_store_ = std::make_unique<ShardedParamStore>(backend_, dp_, groups_, *partition_, settings.overlap_comm,
                                                         &times_.comm_wait, settings.precision);
    make_models(sharded_store_.get());
    optimizer_ = std::make_unique<AdamW>(backend_, settings.adamw, shard_ranges(specs_, partition_->owned_runs()),
                                         partition_->shard_numel());
    norm_runs_ = tp_norm_runs(specs_, partition_->owned_runs(), tp_->size());
    return;
  }
  const std::vector<FlatRange> bucket_ranges = make_buckets(n, settings.reduce_bucket_size, p);
  // Stage 0 keeps everything replicated; its partition (one unit) only splits checkpoint writing.
  // Stage 2 under PP reduces each chunk's groups after its backward: a unit per layer group.
  std::vector<FlatRange> units = bucket_ranges;
  if (settings.zero_stage == 0) units = {{0, n}};
  if (settings.zero_stage == 2 && pp_) units = group_units;
  partition_ = std::make_unique<FlatPartition>(units, p, dp_.rank());
  flat_store_ = std::make_unique<FlatParamStore>(backend_, specs_, round_up(n, p), settings.precision);
  make_models(flat_store_.get());
  if (!pp_) model_->set_grad_ready_callback([this](int group) { on_grad_ready(group); });
  // Under PP, stages 0-1 reduce every bucket once, after the pipeline's last backward (no
  // readiness order), and stage 2 group by group inside the pipeline.
  if (!pp_ || settings.zero_stage < 2) {
    for (size_t k = bucket_ranges.size(); k-- > 0;) {
      buckets_.push_back({bucket_ranges[k], settings.zero_stage == 0 ? 0 : k,
                          pp_ ? 0 : lowest_group(bucket_ranges[k], groups_)});
    }
  }
  in_flight_.resize(buckets_.size());
  // The gradient norm's share of this rank: flat at stage 0 (every DP rank holds all of it),
  // the owned shard otherwise.
  norm_runs_ = settings.zero_stage == 0 ? tp_norm_runs(specs_, {{0, 0, n}}, tp_->size())
                                        : tp_norm_runs(specs_, partition_->owned_runs(), tp_->size());
  if (settings.zero_stage == 0) {
    if (mixed()) master_ = backend_.allocate(static_cast<size_t>(flat_store_->capacity()) * sizeof(float));
    optimizer_ = std::make_unique<AdamW>(backend_, settings.adamw, flat_ranges(specs_), n);
    return;
  }
  allocate_shards();
  optimizer_ = std::make_unique<AdamW>(backend_, settings.adamw, shard_ranges(specs_, partition_->owned_runs()),
                                       partition_->shard_numel());
}

void Engine::order_params() {
  std::unordered_map<std::string, int64_t> order;
  for (const ParamSpec& spec : gpt_param_specs(dims_)) {
    order.emplace(spec.name, static_cast<int64_t>(model_param_names_.size()));
    model_param_names_.push_back(spec.name);
  }
  for (const ParamSpec& spec : specs_) spec_order_.push_back(order.at(spec.name));
}

void Engine::allocate_shards() {
  const size_t shard_bytes = static_cast<size_t>(partition_->shard_numel()) * sizeof(float);
  grad_shard_ = backend_.allocate(shard_bytes);
  param_shard_ = backend_.allocate(shard_bytes);
  if (mixed()) {
    work_shard_ = backend_.allocate(static_cast<size_t>(partition_->shard_numel()) * dtype_size(settings_.precision));
  }
  if (settings_.zero_stage == 2) {
    recv_ = backend_.allocate(shard_bytes);
    if (pp_) {
      int64_t widest = 0;
      for (const PartitionUnit& u : partition_->units()) widest = std::max(widest, u.padded);
      stage2_scratch_ = backend_.allocate(static_cast<size_t>(widest) * sizeof(float));
    }
  }
}

Engine::~Engine() {
  for (CommHandle& h : in_flight_) {
    if (h) h->wait();
  }
}

float* Engine::flat_params() const { return flat_store_->padded_params().f32(); }
float* Engine::flat_grads() const { return flat_store_->padded_grads().f32(); }

void Engine::init_weights(uint64_t seed) {
  if (flat_store_ && !mixed() && !pp_) {
    model_->init_weights(seed);
    return;
  }
  // Whatever fp32 parameters this rank holds get their slices of the initial values.
  for (const FlatSpan& span : held_spans(StateKind::Params)) {
    for (const SpecSlice& s : slices_by_spec(specs_, span.flat_begin, span.count)) {
      gpt_init_values(dims_, *s.spec, seed, s.begin, s.count, span.data + s.span_offset);
    }
  }
  params_loaded();
}

Tensor Engine::master_params() const {
  const int64_t shard = partition_->shard_numel();
  switch (settings_.zero_stage) {
    case 0: return mixed() ? master_.view(0, DType::F32, {partition_->numel()}) : model_->params_flat();
    case 1:
    case 2: return param_shard_.view(0, DType::F32, {shard});
    default: return sharded_store_->params();
  }
}

Tensor Engine::working_copy_of_master() const {
  if (!mixed()) return Tensor();
  switch (settings_.zero_stage) {
    case 0: {
      const Tensor flat = flat_store_->padded_params();
      return Tensor(flat.data, flat.dtype, {partition_->numel()}, flat.device);
    }
    case 1:
    case 2: return work_shard_.view(0, settings_.precision, {partition_->shard_numel()});
    default: return sharded_store_->working_params();
  }
}

void Engine::refresh_working_params(bool working_current) {
  if (sharded_store_) sharded_store_->invalidate_params();  // before the cast: gathers read the working shard
  // Padding is zero in both copies from the start, so the unpadded layout is all there is to round.
  if (mixed() && !working_current) backend_.cast(master_params(), working_copy_of_master());
  // Stage 0 (fp32: the model's flat parameters are the master) and stage 3 are current now;
  // stages 1-2 gather the owned shards into every rank's full copy.
  if (sharded_store_ || settings_.zero_stage == 0) return;
  const DType work = settings_.precision;
  const Buffer& source = mixed() ? work_shard_ : param_shard_;
  const Tensor flat = flat_store_->padded_params();
  std::vector<CommHandle> gathers;
  for (const PartitionUnit& u : partition_->units()) {
    const Tensor into(static_cast<char*>(flat.data) + static_cast<size_t>(u.begin) * dtype_size(work), work, {u.padded},
                      flat.device);
    gathers.push_back(dp_.all_gather_async(typed_view(source, work, u.shard_offset, u.piece), into));
  }
  const Timer wait;
  for (CommHandle& h : gathers) h->wait();
  times_.comm_wait += wait.seconds();
}

void Engine::params_loaded() {
  for (std::vector<StagedSpan>& kind : loading_) {
    for (StagedSpan& s : kind) {
      backend_.copy(Tensor(s.host.data(), DType::F32, {s.device.count}, Device::CPU),
                    f32_view(s.device.data, 0, s.device.count, backend_.device()));
    }
    kind.clear();
  }
  // fp32 stages 0-2 loaded straight into the model's flat parameters: they are current.
  if (flat_store_ && !mixed()) return;
  refresh_working_params();
}

void Engine::begin_step(int micro_batches) {
  if (micro_batches < 1) throw std::invalid_argument("Engine::begin_step: at least one micro-batch");
  times_ = EngineTimes();
  micro_batches_ = micro_batches;
  micro_index_ = 0;
  const Timer t;  // clearing the gradient buffers counts as backward work
  switch (settings_.zero_stage) {
    case 0:
    case 1: model_->zero_grads(); break;
    case 2: backend_.zero(grad_shard_.view(0, DType::F32, {partition_->shard_numel()})); break;
    default: sharded_store_->begin_step(); break;
  }
  times_.backward += phase_seconds(t);
}

void Engine::micro_step(const int32_t* tokens, const int32_t* targets, int B, int T, float dloss) {
  if (micro_index_ >= micro_batches_) throw std::logic_error("Engine::micro_step: more micro-batches than announced");
  if (pp_) throw std::logic_error("Engine::micro_step: a pipeline runs its micro-batches in pipeline_step");
  const bool last = micro_index_ + 1 == micro_batches_;
  if (settings_.zero_stage == 2) {
    const Timer t;  // the previous micro-batch's gradient handling: backward work
    wait_reductions();  // the previous micro-batch's reduce-scatter reads the buffer we are about to clear
    model_->zero_grads();
    times_.backward += phase_seconds(t);
  }
  // Stages 0-1 reduce once per step (after the last micro-batch); stage 2 after every one.
  reducing_ = settings_.zero_stage == 2 || (settings_.zero_stage < 2 && last);
  next_bucket_ = 0;
  Timer t;
  const double tp_wait_before = tp_->wait_seconds();
  // The scale is a power of two (or 1), so scaling dloss adds no rounding of its own.
  const float scaled_dloss = static_cast<float>(dloss * loss_scaler_.scale());
  model_->forward_chunk(tokens, targets, B, T, /*for_backward=*/true, scaled_dloss);
  times_.forward += phase_seconds(t);
  t.reset();
  // Gradients SP leaves partial per TP rank are completed once they hold every micro-batch that
  // the coming reduction carries (stages 2-3 reduce each micro-batch's gradient on its own).
  model_->backward(scaled_dloss, /*complete_partial_grads=*/settings_.zero_stage >= 2 || last);
  times_.tp_wait += tp_->wait_seconds() - tp_wait_before;
  if (reducing_) {
    // Without overlap nothing was issued during backward; with it, whatever is left.
    while (next_bucket_ < buckets_.size()) issue_reduction(next_bucket_++);
    if (!settings_.overlap_comm) wait_reductions();
  }
  reducing_ = false;
  times_.backward += phase_seconds(t);
  ++micro_index_;
}

void Engine::on_grad_ready(int group) {
  if (!reducing_ || !settings_.overlap_comm) return;
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].lowest_group >= group) {
    issue_reduction(next_bucket_++);
  }
  for (CommHandle& h : in_flight_) {
    if (h) h->test();  // lets a progress-driven implementation move the earlier buckets along
  }
}

void Engine::issue_reduction(size_t k) {
  const Bucket& b = buckets_[k];
  if (settings_.zero_stage == 0) {
    in_flight_[k] = dp_.all_reduce_async(f32_view(flat_grads(), b.range.begin, b.range.numel(), device()),
                                         ReduceOp::Sum);
  } else {
    const PartitionUnit& u = partition_->units()[b.unit];
    Buffer& out = settings_.zero_stage == 1 ? grad_shard_ : recv_;
    in_flight_[k] = dp_.reduce_scatter_async(f32_view(flat_grads(), u.begin, u.padded, device()),
                                             f32_view(static_cast<float*>(out.data()), u.shard_offset, u.piece, device()),
                                             ReduceOp::Sum);
    if (settings_.zero_stage == 2) stage2_pending_ = true;
  }
  if (!settings_.overlap_comm) {
    const Timer t;
    in_flight_[k]->wait();
    in_flight_[k].reset();
    times_.comm_wait += t.seconds();
  }
}

void Engine::wait_reductions() {
  const Timer t;
  for (CommHandle& h : in_flight_) {
    if (h) {
      h->wait();
      h.reset();
    }
  }
  times_.comm_wait += t.seconds();
  if (stage2_pending_) {
    const Tensor acc = grad_shard_.view(0, DType::F32, {partition_->shard_numel()});
    backend_.add(acc, acc, recv_.view(0, DType::F32, {partition_->shard_numel()}));
    stage2_pending_ = false;
  }
}

double Engine::phase_seconds(const Timer& t) {
  if (settings_.synchronize_phases) backend_.synchronize();
  return t.seconds();
}

void Engine::finish_reduction() {
  const Timer t;
  if (sharded_store_) {
    sharded_store_->finish_reductions();
  } else {
    wait_reductions();
  }
  times_.backward += phase_seconds(t);
}

void Engine::abandon_step() {
  finish_reduction();
  take_step_losses();  // the micro-batches that ran are not a step's losses
  micro_index_ = micro_batches_;
}

StepOutcome Engine::apply(double lr) {
  const Timer t;
  const Tensor params = master_params();
  Tensor grads;
  const int64_t shard = partition_->shard_numel();
  switch (settings_.zero_stage) {
    case 0: grads = model_->grads_flat(); break;
    case 1:
    case 2:
      grads = grad_shard_.view(0, DType::F32, {shard});
      if (!mixed()) {
        // fp32: the model's flat parameters are the master; update the owned part in shard layout.
        for (const OwnedRun& run : partition_->owned_runs()) {
          backend_.copy(f32_view(flat_params(), run.flat_begin, run.count, device()),
                        f32_view(params.f32(), run.shard_offset, run.count, device()));
        }
      }
      break;
    default:
      grads = sharded_store_->grads();
      break;
  }
  const double norm_squared = grad_norm_squared(grads);
  StepOutcome out;
  out.loss_scale = loss_scaler_.scale();
  // Any inf/nan in any rank's gradient makes the global sum of squares non-finite, and every
  // rank holds the same sum: the ranks agree to skip the step without a collective of its own.
  const bool fp16 = settings_.precision == DType::F16;
  out.skipped = !std::isfinite(norm_squared);
  out.nonfinite = out.skipped && (!fp16 || loss_scaler_.at_minimum());
  if (fp16) loss_scaler_.update(out.skipped);
  out.next_loss_scale = loss_scaler_.scale();
  out.grad_norm = std::sqrt(norm_squared) / out.loss_scale;
  if (!out.skipped) {
    const float clip = clip_coefficient(out.grad_norm, settings_.gradient_clipping);
    // One multiplier unscales and clips; the scale is a power of two, so nothing is lost.
    // Under mixed precision the update also writes the working copy; elements no range covers
    // (padding) are zero in both copies from the start.
    if (sharded_store_) sharded_store_->wait_gathers();
    optimizer_->step(params, grads, static_cast<float>(lr), static_cast<float>(clip / out.loss_scale),
                     working_copy_of_master());
    refresh_working_params(mixed());
  }
  times_.optimizer += phase_seconds(t);
  return out;
}

EngineMemory Engine::memory() const {
  const int64_t f = sizeof(float);
  const int64_t w = static_cast<int64_t>(dtype_size(settings_.precision));
  const int64_t shard = partition_->shard_numel();
  EngineMemory m;
  m.optimizer = static_cast<int64_t>(optimizer_->state_bytes());
  for (const std::unique_ptr<Gpt>& model : models_) m.activations += static_cast<int64_t>(model->activation_bytes());
  switch (settings_.zero_stage) {
    case 0:
      m.params = flat_store_->capacity() * w;
      m.grads = flat_store_->capacity() * f;
      if (mixed()) m.optimizer += static_cast<int64_t>(master_.bytes());
      break;
    case 1:
    case 2:
      m.params = flat_store_->capacity() * w;
      m.grads = settings_.zero_stage == 1 ? flat_store_->capacity() * f : shard * f;
      // Stage 1: the reduced gradient shard; stage 2: the full-size gradient scratch of one
      // micro-batch and the reduce-scatter landing area. Both: the shard the parameters are
      // gathered from (fp32: the parameters in shard layout for the update; mixed: the
      // rounded master, while the master itself is optimizer state).
      m.workspace = settings_.zero_stage == 1 ? shard * f : flat_store_->capacity() * f + shard * f;
      if (mixed()) {
        m.optimizer += shard * f;
        m.workspace += shard * w;
      } else {
        m.workspace += shard * f;
      }
      m.workspace += static_cast<int64_t>(stage2_scratch_.bytes());  // stage 2 under PP: one group's reduction
      break;
    default:
      m.params = sharded_store_->persistent_param_bytes();
      m.grads = shard * f;
      m.optimizer += sharded_store_->master_param_bytes();
      m.workspace = sharded_store_->workspace_bytes();
      break;
  }
  return m;
}

std::vector<FlatSpan> Engine::spans_of(const std::vector<OwnedRun>& runs, float* flat, float* shard) const {
  std::vector<FlatSpan> spans;
  for (const OwnedRun& r : runs) {
    spans.push_back({r.flat_begin, r.count, flat ? flat + r.flat_begin : shard + r.shard_offset});
  }
  return spans;
}

std::vector<FlatSpan> Engine::host_spans(std::vector<FlatSpan> spans, std::vector<StagedSpan>& staged, bool download) {
  staged.clear();
  if (backend_.device() == Device::CPU) return spans;
  for (FlatSpan& span : spans) {
    staged.push_back({span, std::vector<float>(static_cast<size_t>(span.count))});
    float* host = staged.back().host.data();
    if (download) {
      backend_.copy(f32_view(span.data, 0, span.count, device()), Tensor(host, DType::F32, {span.count}, Device::CPU));
    }
    span.data = host;
  }
  return spans;
}

std::vector<FlatSpan> Engine::saved_spans(StateKind kind) {
  return host_spans(device_saved_spans(kind), saving_[static_cast<size_t>(kind)], /*download=*/true);
}

void Engine::release_saved_spans() {
  for (std::vector<StagedSpan>& kind : saving_) kind = {};
}

std::vector<FlatSpan> Engine::held_spans(StateKind kind) {
  return host_spans(device_held_spans(kind), loading_[static_cast<size_t>(kind)], /*download=*/false);
}

std::vector<FlatSpan> Engine::device_saved_spans(StateKind kind) {
  const std::vector<OwnedRun> runs = partition_->owned_runs();
  if (kind == StateKind::Params) {
    // The fp32 parameters: the model's own in fp32 at stages 0-2; otherwise the master, flat at
    // stage 0 and in shard layout at stages 1-3.
    if (flat_store_ && !mixed()) return spans_of(runs, flat_params(), nullptr);
    float* master = master_params().f32();
    return settings_.zero_stage == 0 ? spans_of(runs, master, nullptr) : spans_of(runs, nullptr, master);
  }
  float* state = (kind == StateKind::ExpAvg ? optimizer_->exp_avg() : optimizer_->exp_avg_sq()).f32();
  // Stage 0's Adam state is laid out flat; the others' like the shard.
  return settings_.zero_stage == 0 ? spans_of(runs, state, nullptr) : spans_of(runs, nullptr, state);
}

std::vector<FlatSpan> Engine::device_held_spans(StateKind kind) {
  const int64_t n = partition_->numel();
  if (kind == StateKind::Params) {
    if (flat_store_ && !mixed()) return {{0, n, flat_params()}};
    if (settings_.zero_stage == 0) return {{0, n, master_params().f32()}};
    return device_saved_spans(kind);
  }
  if (settings_.zero_stage == 0) {
    return {{0, n, (kind == StateKind::ExpAvg ? optimizer_->exp_avg() : optimizer_->exp_avg_sq()).f32()}};
  }
  return device_saved_spans(kind);
}

}  // namespace strata
