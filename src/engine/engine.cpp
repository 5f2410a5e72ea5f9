// The engine's step protocol: construction (the pipeline plan, this rank's flat layout, the
// sharding strategy of the ZeRO stage and the model chunks on its store), one micro-batch's
// forward and backward with the strategy's reductions around it, and apply (norm, loss scale,
// clipping, the strategy's update); checkpoint spans staged through host memory.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "engine/engine.h"

namespace strata {
namespace {

// Outside fp16 the scaler is a fixed 1, so the same code path multiplies and divides by 1.
LossScalerSettings scaler_settings(const EngineSettings& s) {
  if (s.sharding.precision == DType::F16) return s.loss_scaler;
  LossScalerSettings unit;
  unit.static_scale = 1.0;
  return unit;
}

Comm& required(Comm* group, const char* name) {
  if (!group) throw std::logic_error(std::string("Engine: the ") + name + " group is required");
  return *group;
}

}  // namespace

EngineGroups engine_groups(Topology& topology) {
  return {&topology.dp(), &topology.world(), &topology.tp(), &topology.pp(), topology.embedding()};
}

Engine::Engine(Backend& backend, const EngineGroups& groups, const GptDims& dims, int micro_batch,
               ActivationRecompute recompute, const EngineSettings& settings)
    : backend_(backend), dp_(required(groups.dp, "dp")), scalars_(required(groups.scalars, "scalars")),
      tp_(std::make_unique<TensorParallel>(groups.tp, settings.sequence_parallel)), dims_(dims), settings_(settings),
      loss_scaler_(scaler_settings(settings)) {
  pp_ = groups.pp && groups.pp->size() > 1 ? groups.pp : nullptr;
  embedding_ = groups.embedding;
  const DType precision = settings.sharding.precision;
  if (precision != DType::F32 && precision != DType::BF16 && precision != DType::F16) {
    throw std::logic_error(std::string("Engine: precision must be F32, BF16 or F16, got ") + dtype_name(precision));
  }
  plan_pipeline();
  specs_ = gpt_rank_specs(dims, {tp_->rank(), tp_->size()}, chunks_);
  groups_ = gpt_layer_groups(specs_, dims.n_layer + 2);
  order_params();
  settings_.sharding.pipelined = pp_ != nullptr;
  strategy_ = make_sharding_strategy({&backend_, &dp_, &specs_, &groups_, tp_->size(), &times_.comm_wait},
                                     settings_.sharding);
  models_ = build_stage_models(dims, backend_, micro_batch, recompute, strategy_->store(), precision, tp_.get(), chunks_,
                               chunk_slots_, specs_, activation_scratch_);
  model_ = models_.front().get();
  // Under a pipeline the strategy reduces after the schedule or after each chunk's backward.
  if (!pp_) model_->set_grad_ready_callback([this](int group) { strategy_->grad_ready(group); });
}

void Engine::order_params() {
  std::unordered_map<std::string, int64_t> order;
  for (const ParamSpec& spec : gpt_param_specs(dims_)) {
    order.emplace(spec.name, static_cast<int64_t>(model_param_names_.size()));
    model_param_names_.push_back(spec.name);
  }
  for (const ParamSpec& spec : specs_) spec_order_.push_back(order.at(spec.name));
}

Engine::~Engine() = default;

void Engine::init_weights(uint64_t seed) {
  if (strategy_->model_holds_master() && !pp_) {
    model_->init_weights(seed);
    return;
  }
  // Whatever fp32 parameters this rank holds get their slices of the initial values.
  for (const FlatSpan& span : held_spans(StateKind::Params)) {
    for (const SpecSlice& s : slices_by_spec(specs_, span.flat_begin, span.count)) {
      fill_span(span, s.span_offset, s.count, [&](float* out) { gpt_init_values(dims_, *s.spec, seed, s.begin, s.count, out); });
    }
  }
  params_loaded();
}

void Engine::params_loaded() {
  for (std::vector<StagedSpan>& kind : loading_) {
    for (StagedSpan& s : kind) {
      backend_.copy(Tensor(s.host.data(), DType::F32, {s.device.count}, Device::CPU),
                    Tensor(s.device.data, DType::F32, {s.device.count}, device()));
    }
    kind.clear();
  }
  strategy_->params_loaded();
}

void Engine::begin_step(int micro_batches) {
  if (micro_batches < 1) throw std::invalid_argument("Engine::begin_step: at least one micro-batch");
  times_ = EngineTimes();
  micro_batches_ = micro_batches;
  micro_index_ = 0;
  const Timer t;  // clearing the gradient buffers counts as backward work
  strategy_->begin_step();
  times_.backward += phase_seconds(t);
}

void Engine::micro_step(const int32_t* tokens, const int32_t* targets, int B, int T, float dloss) {
  if (micro_index_ >= micro_batches_) throw std::logic_error("Engine::micro_step: more micro-batches than announced");
  if (pp_) throw std::logic_error("Engine::micro_step: a pipeline runs its micro-batches in pipeline_step");
  const bool last = micro_index_ + 1 == micro_batches_;
  Timer t;  // the previous micro-batch's gradient handling (stage 2): backward work
  strategy_->begin_micro_batch(last);
  times_.backward += phase_seconds(t);
  t.reset();
  const double tp_wait_before = tp_->wait_seconds();
  // The scale is a power of two (or 1), so scaling dloss adds no rounding of its own.
  const float scaled_dloss = static_cast<float>(dloss * loss_scaler_.scale());
  model_->forward_chunk(tokens, targets, B, T, /*for_backward=*/true, scaled_dloss);
  times_.forward += phase_seconds(t);
  t.reset();
  // Gradients SP leaves partial per TP rank are completed once they hold every micro-batch that
  // the coming reduction carries.
  model_->backward(scaled_dloss, /*complete_partial_grads=*/strategy_->reduces_every_micro_batch() || last);
  times_.tp_wait += tp_->wait_seconds() - tp_wait_before;
  strategy_->end_micro_batch();
  times_.backward += phase_seconds(t);
  ++micro_index_;
}

double Engine::phase_seconds(const Timer& t) {
  if (settings_.synchronize_phases) backend_.synchronize();
  return t.seconds();
}

void Engine::finish_reduction() {
  const Timer t;
  strategy_->finish_reductions();
  times_.backward += phase_seconds(t);
}

void Engine::abandon_step() {
  finish_reduction();
  take_step_losses();  // the micro-batches that ran are not a step's losses
  micro_index_ = micro_batches_;
}

StepOutcome Engine::apply(double lr) {
  const Timer t;
  const double norm_squared = grad_norm_squared(strategy_->grads());
  StepOutcome out;
  out.loss_scale = loss_scaler_.scale();
  // Any inf/nan in any rank's gradient makes the global sum of squares non-finite, and every
  // rank holds the same sum: the ranks agree to skip the step without a collective of its own.
  const bool fp16 = precision() == DType::F16;
  out.skipped = !std::isfinite(norm_squared);
  out.nonfinite = out.skipped && (!fp16 || loss_scaler_.at_minimum());
  if (fp16) loss_scaler_.update(out.skipped);
  out.next_loss_scale = loss_scaler_.scale();
  out.grad_norm = std::sqrt(norm_squared) / out.loss_scale;
  if (!out.skipped) {
    const float clip = clip_coefficient(out.grad_norm, settings_.gradient_clipping);
    // One multiplier unscales and clips; the scale is a power of two, so nothing is lost.
    strategy_->update(static_cast<float>(lr), static_cast<float>(clip / out.loss_scale));
  }
  times_.optimizer += phase_seconds(t);
  return out;
}

MemoryRecord Engine::memory() const {
  MemoryRecord m = strategy_->memory();
  m.activations = static_cast<int64_t>(activation_scratch_.bytes());
  for (const std::unique_ptr<Gpt>& model : models_) m.activations += static_cast<int64_t>(model->activation_bytes());
  return m;
}

std::vector<FlatSpan> Engine::host_spans(std::vector<FlatSpan> spans, std::vector<StagedSpan>& staged) {
  staged.clear();
  if (backend_.device() == Device::CPU) return spans;
  for (FlatSpan& span : spans) {
    if (span.on_host) continue;  // offloaded state: already host memory
    staged.push_back({span, std::vector<float>(static_cast<size_t>(span.count))});
    span.data = staged.back().host.data();
  }
  return spans;
}

std::vector<FlatSpan> Engine::saved_spans(StateKind kind) {
  std::vector<FlatSpan> spans = strategy_->saved_spans(kind);
  if (backend_.device() == Device::CPU) return spans;
  for (FlatSpan& span : spans) {
    if (span.on_host || !span.data) continue;
    // Device state: each piece is copied down as the checkpoint writes it.
    const float* on_device = span.data;
    const Device where = device();
    Backend& backend = backend_;
    span.read = [&backend, on_device, where](int64_t offset, int64_t count, float* out) {
      backend.copy(Tensor(const_cast<float*>(on_device) + offset, DType::F32, {count}, where),
                   Tensor(out, DType::F32, {count}, Device::CPU));
    };
    span.data = nullptr;
  }
  return spans;
}

std::vector<FlatSpan> Engine::held_spans(StateKind kind) {
  return host_spans(strategy_->held_spans(kind), loading_[static_cast<size_t>(kind)]);
}

}  // namespace strata
