// `strata train`: builds the model, data, optimizer and schedule from the config, resumes
// or initialises, and runs the loop — gradient accumulation, clipping, AdamW, evaluation,
// samples, metrics, checkpoints, and a clean stop on SIGINT/SIGTERM.
#include <fmt/core.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>

#include "backend/backend.h"
#include "core/core.h"
#include "train/metrics.h"
#include "train/signals.h"
#include "train/train.h"
#include "train/train_internal.h"

extern "C" void openblas_set_num_threads(int num_threads);

namespace strata {
namespace {

// With as many ranks on a node as cores, BLAS threads only fight each other.
void limit_blas_threads(const MpiRuntime& mpi) {
  if (std::getenv("OPENBLAS_NUM_THREADS")) return;  // the user decided
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (mpi.local_size() > 1) openblas_set_num_threads(std::max<int>(1, static_cast<int>(cores / mpi.local_size())));
}

std::string bytes_text(size_t bytes) { return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20)); }

class Trainer {
 public:
  Trainer(const MpiRuntime& mpi, Config cfg, TrainOptions options)
      : mpi_(mpi), cfg_(std::move(cfg)), options_(std::move(options)),
        backend_(make_cpu_backend()),
        dims_(gpt_dims_from_config(cfg_)),
        train_data_(TokenDataset::open(cfg_.data.train, dims_.vocab_size, "data.train")),
        model_(dims_, *backend_, cfg_.derived.micro_batch,
               cfg_.model.recompute == Recompute::Full ? ActivationRecompute::Full : ActivationRecompute::None),
        optimizer_(*backend_, adamw_from_config(cfg_), param_ranges(model_), model_.params_flat().numel()),
        schedule_(lr_schedule_from_config(cfg_)) {
    if (!cfg_.data.val.empty()) val_data_ = TokenDataset::open(cfg_.data.val, dims_.vocab_size, "data.val");
    sampler_.emplace(train_data_, dims_.seq_len, cfg_.data.shuffle, static_cast<uint64_t>(cfg_.train.seed));
    BatchLayout layout;
    layout.micro_batch = cfg_.derived.micro_batch;
    layout.grad_accum = cfg_.derived.grad_accum;
    layout.dp_size = cfg_.derived.dp_size;
    layout.dp_rank = 0;
    layout.seq_len = dims_.seq_len;
    loader_ = std::make_unique<BatchLoader>(train_data_, *sampler_, layout, /*prefetch=*/true);
    if (!cfg_.logging.metrics_file.empty() && mpi_.world_rank() == 0) metrics_ = MetricsWriter(cfg_.logging.metrics_file);
  }

  int run();

 private:
  void start_state();
  void train_step(StepMetrics& m);
  void save(int64_t step);
  void evaluate(int64_t step);
  void sample(int64_t step);
  void print_memory_report();

  const MpiRuntime& mpi_;
  Config cfg_;
  TrainOptions options_;
  std::unique_ptr<Backend> backend_;
  GptDims dims_;
  TokenDataset train_data_;
  std::optional<TokenDataset> val_data_;
  std::optional<GlobalSampler> sampler_;
  std::unique_ptr<BatchLoader> loader_;
  Gpt model_;
  AdamW optimizer_;
  LrSchedule schedule_;
  MetricsWriter metrics_;
  LoopState state_;
  Rng sample_rng_;
};

void Trainer::start_state() {
  std::string resume_path;
  std::string source_key = "checkpoint.resume";
  const std::string& resume = cfg_.checkpoint.resume;
  if (resume == "auto") {
    if (!cfg_.checkpoint.dir.empty()) {
      if (auto latest = find_latest_checkpoint(cfg_.checkpoint.dir)) resume_path = *latest;
    }
  } else if (resume != "none") {
    resume_path = resume;
  }
  if (!resume_path.empty()) {
    state_ = load_training_checkpoint(resume_path, source_key, model_, optimizer_, mpi_.world_rank());
    schedule_.set_iteration(state_.scheduler_iteration);
    sample_rng_.restore(state_.sample_rng);
    log_info("resumed from {} at step {}", resume_path, state_.step);
  } else {
    model_.init_weights(static_cast<uint64_t>(cfg_.train.seed));
    sample_rng_ = Rng(static_cast<uint64_t>(cfg_.train.seed), rng_stream_id("sample"));
    state_.sample_rng = sample_rng_.state();
    log_info("initialised weights (seed {})", cfg_.train.seed);
    if (cfg_.checkpoint.save_initial && !cfg_.checkpoint.dir.empty()) save(0);
  }
  loader_->seek(state_.step);
}

void Trainer::print_memory_report() {
  const size_t param_bytes = model_.params_flat().bytes();
  log_info("memory per rank: parameters {} | gradients {} | optimizer state {} | activations {}", bytes_text(param_bytes),
           bytes_text(param_bytes), bytes_text(optimizer_.state_bytes()), bytes_text(model_.activation_bytes()));
}

void Trainer::train_step(StepMetrics& m) {
  const Timer step_timer;
  const int gas = cfg_.derived.grad_accum;
  const int micro = cfg_.derived.micro_batch;
  const int seq = dims_.seq_len;
  // Loss is the mean over every token of the global batch; each token's gradient weight:
  const float dloss = 1.0f / static_cast<float>(static_cast<double>(cfg_.derived.global_batch) * seq);
  model_.zero_grads();
  double loss_sum = 0, forward_s = 0, backward_s = 0;
  for (int i = 0; i < gas; ++i) {
    const MicroBatch batch = loader_->next();
    Timer t;
    loss_sum += model_.forward(batch.tokens.data(), batch.targets.data(), micro, seq);
    forward_s += t.seconds();
    t.reset();
    model_.backward(dloss);
    backward_s += t.seconds();
  }
  if (state_.step == 0 && !options_.dump_grads_path.empty()) {
    dump_gradients(options_.dump_grads_path, model_);
    log_info("wrote the first step's gradients to {}", options_.dump_grads_path);
  }
  Timer t;
  const double grad_norm = std::sqrt(backend_->sum_squares(model_.grads_flat()));
  const float clip = clip_coefficient(grad_norm, cfg_.gradient_clipping);
  const double lr = schedule_.current_lr();
  optimizer_.step(model_.params_flat(), model_.grads_flat(), static_cast<float>(lr), clip);
  schedule_.advance();
  ++state_.step;
  state_.scheduler_iteration = schedule_.iteration();
  state_.optimizer_steps = optimizer_.steps_taken();

  m.step = state_.step;
  m.loss = loss_sum / gas;
  m.lr = lr;
  m.grad_norm = grad_norm;
  m.step_seconds = step_timer.seconds();
  m.tokens_per_second = static_cast<double>(cfg_.derived.tokens_per_step) / m.step_seconds;
  m.tflops_per_rank = m.tokens_per_second * static_cast<double>(cfg_.derived.flops_per_token) / mpi_.world_size() / 1e12;
  m.peak_memory_bytes = peak_host_memory_bytes();
  if (cfg_.wall_clock_breakdown) {
    m.forward_seconds = forward_s;
    m.backward_seconds = backward_s;
    m.optimizer_seconds = t.seconds();
  }
}

void Trainer::save(int64_t step) {
  const Timer t;
  SaveContext context;
  context.rank = mpi_.world_rank();
  context.world_size = mpi_.world_size();
  context.barrier = [this] { mpi_.barrier(); };
  state_.sample_rng = sample_rng_.state();
  const std::string dir = save_training_checkpoint(cfg_, step, state_, model_, optimizer_, context);
  log_info("saved checkpoint {} ({:.1f}s)", dir, t.seconds());
}

void Trainer::evaluate(int64_t step) {
  if (!val_data_) return;
  const Timer t;
  const double val_loss = evaluate_loss(model_, *val_data_, dims_.seq_len, cfg_.derived.micro_batch, cfg_.train.eval_iters);
  log_info("eval step {} | val loss {:.4f} | {:.1f}s", step, val_loss, t.seconds());
  metrics_.write({{"type", "eval"}, {"step", step}, {"val_loss", val_loss}});
}

void Trainer::sample(int64_t step) {
  const std::string text = sample_text(model_, cfg_.logging.sample_prompt, cfg_.logging.sample_tokens, sample_rng_);
  log_info("sample at step {}:\n{}{}\n---", step, cfg_.logging.sample_prompt, text);
  metrics_.write({{"type", "sample"}, {"step", step}, {"prompt", cfg_.logging.sample_prompt}, {"text", text}});
}

int Trainer::run() {
  const int64_t total = cfg_.train.iters;
  log_info("model: {} layers, {} heads, d_model {}, vocab {} (padded {}), seq_len {}: {} parameters", dims_.n_layer,
           dims_.n_head, dims_.d_model, dims_.vocab_size, dims_.padded_vocab, dims_.seq_len, cfg_.derived.n_params);
  log_info("batch: {} sequences x {} tokens per step (micro {} x accumulation {} x DP {}); {:.3g} FLOP/token",
           cfg_.derived.global_batch, dims_.seq_len, cfg_.derived.micro_batch, cfg_.derived.grad_accum,
           cfg_.derived.dp_size, static_cast<double>(cfg_.derived.flops_per_token));
  log_info("data: {} tokens in {} train shard(s){}", train_data_.num_tokens(), train_data_.shards().size(),
           val_data_ ? fmt::format(", {} val tokens", val_data_->num_tokens()) : std::string());
  print_memory_report();
  start_state();
  if (state_.step >= total) {
    log_info("nothing to do: the checkpoint is at step {} and train.iters is {}", state_.step, total);
    return 0;
  }
  install_stop_signal_handlers();
  const Timer run_timer;
  const int64_t first_step = state_.step;
  bool saved_last = false;
  while (state_.step < total) {
    StepMetrics m;
    m.total_steps = total;
    train_step(m);
    const int64_t done = state_.step - first_step;
    m.eta_seconds = run_timer.seconds() / static_cast<double>(done) * static_cast<double>(total - state_.step);
    metrics_.write(step_record(m));
    const bool last = state_.step == total;
    if (cfg_.steps_per_print > 0 && (state_.step % cfg_.steps_per_print == 0 || state_.step == 1 || last)) {
      log_info("{}", format_step_line(m));
    }
    if (!std::isfinite(m.loss)) {
      log_error("loss is {} at step {}: stopping (lower optimizer.params.lr or enable gradient_clipping)", m.loss, m.step);
      return kExitInternalError;
    }
    if (cfg_.train.eval_interval > 0 && (state_.step % cfg_.train.eval_interval == 0 || last)) evaluate(state_.step);
    if (cfg_.logging.sample_interval > 0 && (state_.step % cfg_.logging.sample_interval == 0 || last)) sample(state_.step);
    saved_last = false;
    if (!cfg_.checkpoint.dir.empty() &&
        ((cfg_.checkpoint.save_interval > 0 && state_.step % cfg_.checkpoint.save_interval == 0) || last)) {
      save(state_.step);
      saved_last = true;
    }
    if (stop_requested()) {
      log_info("signal {} received: stopping after step {}", stop_signal(), state_.step);
      if (!cfg_.checkpoint.dir.empty() && !saved_last) save(state_.step);
      return 0;
    }
  }
  log_info("done: {} steps in {}", total - first_step, format_duration(run_timer.seconds()));
  return 0;
}

}  // namespace

int run_train(const MpiRuntime& mpi, const TrainOptions& options) {
  Config cfg = load_config_file(options.config_path, options.overrides, mpi.world_size());
  check_runnable(cfg, mpi.world_size());
  limit_blas_threads(mpi);
  if (mpi.world_rank() == 0) {
    log_info("strata {} | {} rank(s) | config {}", STRATA_VERSION, mpi.world_size(), options.config_path);
    log_info("resolved config:\n{}{}", config_to_yaml(cfg), derived_to_yaml(cfg));
  }
  Trainer trainer(mpi, std::move(cfg), options);
  return trainer.run();
}

}  // namespace strata
