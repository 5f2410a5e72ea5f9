// Pipeline parallelism in the engine: the rank's chunks of the model (one Gpt per chunk and
// in-flight micro-batch slot, all on the one parameter store), the executor that runs this
// rank's schedule table (compute, and the stage-to-stage transfers of each Communicate action
// posted as one group), the strategy's gradient reductions after it, the tied embeddings'
// gradient summed between the first and last stage, and inference through every stage.
#include <algorithm>
#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>

#include "engine/engine.h"

namespace strata {
namespace {

// Pads a compute that began at `began` to at least `seconds` (the pipeline's cost hook).
void pad_to(Backend& backend, const Timer& began, double seconds) {
  if (seconds <= 0) return;
  backend.synchronize();
  const double rest = seconds - began.seconds();
  if (rest > 0) std::this_thread::sleep_for(std::chrono::duration<double>(rest));
}

}  // namespace

PipelineStagePlan pipeline_stage_plan(const PipelineSettings& ps, int n_layer, int stages, int stage) {
  PipelineStagePlan plan;
  plan.shape = {ps.schedule, stages, ps.schedule == PipeSchedule::Interleaved ? ps.virtual_stages : 1,
                ps.micro_batches};
  const std::vector<PipeShapeProblem> problems = pipe_shape_problems(plan.shape, n_layer);
  if (!problems.empty()) throw UserError("parallelism.pipeline: " + problems.front().message);
  const int chunk_count = stages * plan.shape.virtual_stages;
  const std::vector<ChunkLayers> layers = ps.partition.empty() ? uniform_partition(n_layer, chunk_count) : ps.partition;
  // The partition comes from the config's (validated) key: one that does not fit is a bug here.
  if (static_cast<int>(layers.size()) != chunk_count || layers.back().end != n_layer) {
    throw std::logic_error("pipeline_stage_plan: " + std::to_string(layers.size()) + " chunks for " +
                           std::to_string(chunk_count) + " over " + std::to_string(n_layer) + " layers");
  }
  for (int c = 0; c < plan.shape.virtual_stages; ++c) {
    const int k = c * stages + stage;
    const ChunkLayers& l = layers[static_cast<size_t>(k)];
    plan.chunks.push_back({l.begin, l.end, k == 0, k == chunk_count - 1});
  }
  plan.slots = std::max(1, pipe_in_flight_bound(plan.shape, stage));
  plan.chunk_slots = pipe_chunk_in_flight(plan.shape, stage);
  return plan;
}

void Engine::plan_pipeline() {
  if (!pp_) {
    chunks_ = {GptChunk{}};
    return;
  }
  stages_ = pp_->size();
  stage_ = pp_->rank();
  PipelineStagePlan plan = pipeline_stage_plan(settings_.pipeline, dims_.n_layer, stages_, stage_);
  shape_ = plan.shape;
  chunks_ = std::move(plan.chunks);
  slots_ = plan.slots;
  chunk_slots_ = plan.chunk_slots;
  chunk_first_.assign(chunk_slots_.size(), 0);
  for (size_t c = 1; c < chunk_slots_.size(); ++c) chunk_first_[c] = chunk_first_[c - 1] + chunk_slots_[c - 1];
  table_ = pipe_schedule(shape_, stage_);
}

void Engine::communicate(const PipeAction& action, int B, int T, int below) {
  // Messages between two stages are told apart by tag (MPI) and listed in one order on both
  // sides (NCCL matches by order): activations before gradients, then by micro-batch and chunk.
  auto key = [](const PipeTransfer& t) { return std::make_tuple(t.gradient, t.micro_batch, t.consumer_chunk); };
  auto by_key = [&](const PipeTransfer& a, const PipeTransfer& b) { return key(a) < key(b); };
  std::vector<PipeTransfer> sends, recvs;
  for (const PipeTransfer& t : action.sends)
    if (t.micro_batch < below) sends.push_back(t);
  for (const PipeTransfer& t : action.recvs)
    if (t.micro_batch < below) recvs.push_back(t);
  if (sends.empty() && recvs.empty()) return;  // cut off by a stop
  std::sort(sends.begin(), sends.end(), by_key);
  std::sort(recvs.begin(), recvs.end(), by_key);
  const int chunk_count = stages_ * shape_.virtual_stages;
  auto tag = [&](const PipeTransfer& t) {
    return ((t.micro_batch * chunk_count + t.consumer_chunk) * 2 + (t.gradient ? 1 : 0)) % 32768;
  };
  std::vector<Comm::Message> out, in;
  for (const PipeTransfer& t : sends) {
    // The producer is the chunk before the consumer (activations) or after it (gradients).
    const int producer = t.gradient ? t.consumer_chunk + 1 : t.consumer_chunk - 1;
    Gpt& g = chunk_model(producer / stages_, t.micro_batch);
    out.push_back({t.gradient ? g.chunk_input_grad(B, T) : g.chunk_output(B, T), t.peer, tag(t)});
  }
  for (const PipeTransfer& t : recvs) {
    Gpt& g = chunk_model(t.consumer_chunk / stages_, t.micro_batch);
    in.push_back({t.gradient ? g.chunk_output_grad(B, T) : g.chunk_input(B, T), t.peer, tag(t)});
  }
  // The tensors sent were written by the backend's queued work: the communicator orders itself
  // after it (staging copies, or NCCL's stream wait).
  const Timer wait;
  pp_->p2p_group_async(out, in)->wait();
  times_.pipe_wait += wait.seconds();
}

int Engine::run_step(const NextBatch& next, int micro_batches, int B, int T, float dloss, const StepStop& stop) {
  const int m = micro_batches;
  begin_step(m);
  if (pp_) {
    // The pipeline runs the step's micro-batches together; the ranks vote on a stop as it
    // reaches each one, and stop together part-way.
    std::vector<StepBatch> batches;
    std::vector<const int32_t*> tokens, targets;
    for (int i = 0; i < m; ++i) batches.push_back(next());
    for (const StepBatch& b : batches) {
      tokens.push_back(b.tokens.data());
      targets.push_back(b.targets.data());
    }
    pipeline_step(tokens, targets, B, T, dloss, stop);
    if (stopped_before_ < m) {
      abandon_step();
      return stopped_before_;
    }
    return m;
  }
  for (int i = 0; i < m; ++i) {
    // A stop is honoured between micro-batches: a step of many micro-batches (or slow ones) is
    // abandoned rather than outlasting the grace a launcher gives before SIGKILL.
    if (i > 0 && stop.agreed && stop.agreed()) {
      abandon_step();
      return i;
    }
    const StepBatch batch = next();
    micro_step(batch.tokens.data(), batch.targets.data(), B, T, dloss);
  }
  finish_reduction();
  return m;
}

void Engine::pipeline_step(const std::vector<const int32_t*>& tokens, const std::vector<const int32_t*>& targets,
                           int B, int T, float dloss, const StepStop& stop) {
  if (!pp_) throw std::logic_error("Engine::pipeline_step without a pipeline");
  const int m = static_cast<int>(tokens.size());
  if (m != micro_batches_ || m != shape_.micro_batches || micro_index_ != 0 || targets.size() != tokens.size()) {
    throw std::logic_error("Engine::pipeline_step: begin_step with the pipeline's micro-batch count first");
  }
  const float scaled_dloss = static_cast<float>(dloss * loss_scaler_.scale());
  logged_heads_.clear();
  const double tp_wait_before = tp_->wait_seconds();
  // Measured, the stages start the table together, so that the longest run is the span of the
  // pipeline (the bubble's denominator) rather than that plus the stages' skew.
  if (settings_.synchronize_phases) pp_->barrier();
  const Timer run;
  stopped_before_ = m;
  const int lag = pipe_stop_vote_lag(shape_);
  int voted = 0;  // micro-batches whose vote this rank has posted and taken
  for (const PipeAction& a : table_) {
    // A vote for every micro-batch this action is the first to touch (simulate_stop_vote proves
    // the cut consistent and free of deadlocks and stalls for every schedule).
    for (const int last = pipe_last_micro_batch(a); stop.vote && stopped_before_ == m && voted <= last; ++voted) {
      stop.vote->post(stop.local_stop());
      if (voted >= lag && stop.vote->any_yes(voted - lag)) stopped_before_ = voted;
    }
    if (a.kind == PipeAction::Kind::Communicate) {
      communicate(a, B, T, stopped_before_);
      continue;
    }
    if (a.micro_batch >= stopped_before_) continue;
    Gpt& g = chunk_model(a.chunk, a.micro_batch);
    const size_t mb = static_cast<size_t>(a.micro_batch);
    const Timer t;
    if (a.kind == PipeAction::Kind::Forward) {
      g.forward_chunk(tokens[mb], targets[mb], B, T, true, scaled_dloss);
      if (g.chunk().head) logged_heads_.emplace_back(&g, a.micro_batch);
      pad_to(backend_, t, settings_.pipeline.forward_seconds);
      times_.forward += phase_seconds(t);
      continue;
    }
    // SP's partial layernorm gradients are completed once per reduction: every micro-batch's
    // when the strategy reduces each (stages 2-3), else the sum after the chunk's last one.
    g.backward_chunk(scaled_dloss, strategy_->reduces_every_micro_batch() || a.micro_batch + 1 == m);
    strategy_->chunk_backward_done(chunks_[static_cast<size_t>(a.chunk)]);
    pad_to(backend_, t, settings_.pipeline.backward_seconds);
    times_.backward += phase_seconds(t);
  }
  if (stop.vote) stop.vote->finish();
  times_.tp_wait += tp_->wait_seconds() - tp_wait_before;
  times_.pipeline += run.seconds();
  if (stopped_before_ < m) return;  // the caller abandons the step
  const Timer t;
  strategy_->finish_pipeline([this](const Tensor& grads) { sum_tied_embeddings(grads); });
  times_.backward += phase_seconds(t);
  micro_index_ = m;
}

std::vector<float> Engine::take_step_losses() {
  if (!pp_) return model_->take_losses();
  std::vector<float> losses(static_cast<size_t>(micro_batches_), 0.0f);
  // Each slot's model logged its micro-batches in the order logged_heads_ lists them.
  struct Taken {
    Gpt* model;
    std::vector<float> means;
    size_t next = 0;
  };
  std::vector<Taken> taken;
  for (const auto& [model, micro_batch] : logged_heads_) {
    auto it = std::find_if(taken.begin(), taken.end(), [m = model](const Taken& t) { return t.model == m; });
    if (it == taken.end()) it = taken.insert(taken.end(), Taken{model, model->take_losses()});
    losses[static_cast<size_t>(micro_batch)] = it->means.at(it->next++);
  }
  logged_heads_.clear();
  return losses;
}

void Engine::sum_tied_embeddings(const Tensor& grads) {
  if (!tied()) return;
  const Timer wait;
  embedding_->all_reduce(grads);
  times_.comm_wait += wait.seconds();
}

void Engine::forward_through_stages(const int32_t* tokens, int B, int T, const std::function<void(Gpt&)>& head) {
  const int chunk_count = stages_ * shape_.virtual_stages;
  for (int k = 0; k < chunk_count; ++k) {
    if (k % stages_ != stage_) continue;
    Gpt& g = chunk_model(k / stages_, 0);
    const Timer wait;
    if (k > 0) pp_->recv(g.chunk_input(B, T), (k - 1) % stages_, 0);
    times_.pipe_wait += wait.seconds();
    if (g.chunk().head) {
      head(g);
    } else {
      g.forward_chunk(tokens, nullptr, B, T, false, 0.0f);
      pp_->send(g.chunk_output(B, T), (k + 1) % stages_, 0);
    }
  }
}

float Engine::forward_loss(const int32_t* tokens, const int32_t* targets, int B, int T) {
  if (!pp_) return model_->forward(tokens, targets, B, T);
  float loss = 0.0f;
  forward_through_stages(tokens, B, T, [&](Gpt& g) {
    g.forward_chunk(tokens, targets, B, T, false, 0.0f);
    loss = g.take_losses().back();
  });
  return loss;
}

std::vector<float> Engine::last_token_logits(const int32_t* tokens, int T) {
  if (!pp_) return model_->last_token_logits(tokens, T);
  std::vector<float> values(static_cast<size_t>(dims_.vocab_size));
  forward_through_stages(tokens, 1, T, [&](Gpt& g) { values = g.last_token_logits(tokens, T); });
  // Every stage samples the same next token from the last stage's logits.
  if (logits_row_.bytes() == 0) logits_row_ = backend_.allocate(values.size() * sizeof(float));
  const Tensor row = logits_row_.view(0, DType::F32, {dims_.vocab_size});
  if (last_stage()) backend_.copy(Tensor(values.data(), DType::F32, {dims_.vocab_size}, Device::CPU), row);
  pp_->broadcast(row, stages_ - 1);
  backend_.copy(row, Tensor(values.data(), DType::F32, {dims_.vocab_size}, Device::CPU));
  return values;
}

}  // namespace strata
