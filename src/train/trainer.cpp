// `strata train`: builds the rank grid, the data-parallel engine (model, TP slice, ZeRO stage,
// precision, optimizer), data and schedule from the config, resumes or initialises, and runs
// the loop — gradient accumulation, reduction, fp16 overflow skips, clipping, AdamW,
// evaluation, samples, metrics with memory and traffic figures, checkpoints, and a stop on
// SIGINT/SIGTERM agreed by every rank.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <limits>
#include <vector>

#include "train/signals.h"
#include "train/trainer.h"

extern "C" void openblas_set_num_threads(int num_threads);

namespace strata {

bool Trainer::train_step(StepMetrics& m) {
  reset_traffic();
  const Timer step_timer;
  const int gas = cfg_.derived.grad_accum;
  const int seq = dims_.seq_len;
  // Loss is the mean over every token of the global batch, at every ZeRO stage and layout: each
  // token's gradient weight carries the division by DP, before the reduction, so that a 16-bit
  // backward holds the values of the single-rank run on every layout (its fp16 overflows too).
  const Derived& d = cfg_.derived;
  const float dloss =
      1.0f / static_cast<float>(static_cast<double>(d.micro_batch) * d.grad_accum * seq * d.dp_size);
  const NextBatch next = [this] {
    MicroBatch b = loader_->next();
    return StepBatch{std::move(b.tokens), std::move(b.targets)};
  };
  const StepStop stop{stop_vote_.get(), [] { return stop_requested(); }, [this] { return agree_to_stop(); }};
  const int done = engine_.run_step(next, gas, cfg_.derived.micro_batch, seq, dloss, stop);
  if (done < gas) {
    abandoned_after_ = done;
    return false;
  }
  if (state_.step == 0 && !options_.dump_grads_path.empty() && mpi_.world_rank() == 0) {
    dump_gradients(options_.dump_grads_path, engine_.model(), engine_.loss_scale());
    log_info("wrote the first step's gradients to {}", options_.dump_grads_path);
  }
  const double lr = schedule_.current_lr();
  const StepOutcome outcome = engine_.apply(lr);
  const std::vector<float> losses = engine_.take_step_losses();  // after the step's last op: one wait
  // DeepSpeed: a step skipped for an fp16 overflow does not advance the LR schedule either; nor
  // does any other step skipped for a non-finite gradient.
  if (!outcome.skipped) schedule_.advance();
  ++state_.step;
  state_.scheduler_iteration = schedule_.iteration();
  state_.optimizer_steps = engine_.optimizer_steps();
  record_outcome(outcome, m);
  m.step = state_.step;
  m.loss = global_mean_loss(losses);
  m.lr = lr;
  m.grad_norm = outcome.grad_norm;
  backend_.synchronize();  // device work still queued belongs to this step's time
  m.step_seconds = step_timer.seconds();
  m.tokens_per_second = static_cast<double>(cfg_.derived.tokens_per_step) / m.step_seconds;
  m.tflops_per_rank = m.tokens_per_second * static_cast<double>(cfg_.derived.flops_per_token) / mpi_.world_size() / 1e12;
  if (backend_.peak_flops() > 0) m.mfu = m.tflops_per_rank * 1e12 / backend_.peak_flops();
  // On a device the allocator's high-water mark; on the CPU the process's peak RSS.
  m.peak_memory_bytes =
      backend_.device() == Device::CPU ? peak_host_memory_bytes() : backend_.memory_stats().peak_allocated_bytes;
  traffic(m);
  if (cfg_.wall_clock_breakdown) phase_times(m);
  return true;
}

void Trainer::record_outcome(const StepOutcome& outcome, StepMetrics& m) {
  m.skipped = outcome.skipped;
  m.nonfinite = outcome.nonfinite;
  if (engine_.precision() != DType::F16) return;
  state_.loss_scaler = engine_.loss_scaler_state();
  m.loss_scale = outcome.loss_scale;
  if (outcome.skipped && !outcome.nonfinite) {
    // An overflow the hysteresis absorbs keeps the scale and spends one of its budget.
    const int hysteresis_left = engine_.loss_scaler_state().hysteresis_left;
    const std::string change =
        outcome.next_loss_scale == outcome.loss_scale
            ? fmt::format("{} kept (hysteresis {} → {})", outcome.loss_scale, hysteresis_left + 1, hysteresis_left)
            : fmt::format("{} → {}", outcome.loss_scale, outcome.next_loss_scale);
    log_info("fp16 overflow at step {}: loss scale {}, step skipped", state_.step, change);
    metrics_.write({{"type", "overflow"}, {"step", state_.step}, {"loss_scale", outcome.loss_scale},
                    {"next_loss_scale", outcome.next_loss_scale}, {"hysteresis_left", hysteresis_left}});
  }
}

double Trainer::global_mean_loss(const std::vector<float>& losses) {
  // Micro-batch losses of the DP replicas in global batch order (rank-major), summed in that
  // order: the same figure, bit for bit, as one rank running every micro-batch. A replica's TP
  // ranks hold the same losses, and its first one on the last pipeline stage counts.
  const std::vector<float> all = all_gather_floats(topology_.world(), losses);
  const GridShape& shape = topology_.shape();
  double loss_sum = 0;
  for (int d = 0; d < shape.dp; ++d) {
    const size_t r = static_cast<size_t>(grid_rank(shape, GridCoord{d, shape.pp - 1, 0}));
    for (size_t i = 0; i < losses.size(); ++i) loss_sum += all[r * losses.size() + i];
  }
  return loss_sum / (static_cast<double>(cfg_.derived.grad_accum) * shape.dp);
}

void Trainer::save(int64_t step) {
  const Timer t;
  check_state_finite(step);
  SaveContext context;
  context.rank = mpi_.world_rank();
  context.world_size = mpi_.world_size();
  context.barrier = [this] { mpi_.barrier(); };
  uint64_t saved_bytes = 0;  // every rank's tensors, summed once by the save
  context.sum_over_ranks = [this, &saved_bytes](uint64_t bytes) {
    uint64_t total = 0;
    for (int64_t b : mpi_.all_gather({static_cast<int64_t>(bytes)})) total += static_cast<uint64_t>(b);
    saved_bytes = total;
    return total;
  };
  state_.sample_rng = sample_rng_.state();
  state_.next_sequence = loader_->first_sequence_of(step);
  state_.data_order = data_order();
  std::string dir;
  // Each rank judges the save from its own view of the file system; the ranks agree on it, so
  // that none carries on into the next collective while another stops.
  agree_on_user_errors(mpi_, fmt::format("saving the checkpoint of step {}", step),
                       [&] { dir = save_training_checkpoint(cfg_, step, state_, engine_, context); });
  last_saved_step_ = step;
  log_info("saved checkpoint {} ({:.1f} MB from {} rank{}, {:.1f} s)", dir, static_cast<double>(saved_bytes) / 1e6,
           mpi_.world_size(), mpi_.world_size() == 1 ? "" : "s", t.seconds());
}

bool Trainer::make_reports(bool eval, bool sample_due) {
  state_.pending_reports.clear();
  if (eval && !evaluate(state_.step)) {
    state_.pending_reports.push_back("eval");
    if (sample_due) state_.pending_reports.push_back("sample");
    return false;
  }
  if (sample_due && !sample(state_.step)) {
    state_.pending_reports.push_back("sample");
    return false;
  }
  return true;
}

bool Trainer::evaluate(int64_t step) {
  if (!val_data_) return true;
  const Timer t;
  const std::optional<double> val_loss =
      evaluate_loss(engine_, *val_data_, dims_.seq_len, cfg_.derived.micro_batch,
                    eval_sequences(cfg_.train.eval_iters, cfg_.derived.global_batch), topology_,
                    [this] { return agree_to_stop(); });
  if (!val_loss) return false;
  log_info("eval step {} | val loss {:.4f} | {:.1f}s", step, *val_loss, t.seconds());
  metrics_.write({{"type", "eval"}, {"step", step}, {"val_loss", *val_loss}});
  return true;
}

// Every rank samples (with ZeRO-3 or TP the forward needs them all; the RNG stays identical).
bool Trainer::sample(int64_t step) {
  // An interrupted sample has drawn from the RNG: the checkpoint must hold the draws of the
  // finished samples only, so that a resumed run samples as an uninterrupted one.
  const RngState before = sample_rng_.state();
  const BpeTokenizer* tokenizer = setup_->tokenizer ? &*setup_->tokenizer : nullptr;
  const std::optional<std::vector<int32_t>> tokens =
      sample_tokens(engine_, sample_start(cfg_, tokenizer), cfg_.logging.sample_tokens, sample_rng_,
                    [this] { return agree_to_stop(); });
  if (!tokens) {
    sample_rng_.restore(before);
    return false;
  }
  if (const std::optional<std::string> decoded = sample_as_text(cfg_, tokenizer, *tokens)) {
    // The record's text is the generated tokens alone, with a prompt or without (a byte-level
    // sample without one starts after a newline, a tokenizer's after its end-of-text token).
    const std::string& text = *decoded;
    log_info("sample at step {}:\n{}{}\n---", step, printable_text(cfg_.logging.sample_prompt), printable_text(text));
    // The ids too: text that is not UTF-8 is written with replacement characters, which lose them.
    metrics_.write({{"type", "sample"}, {"step", step}, {"prompt", cfg_.logging.sample_prompt}, {"text", text},
                    {"tokens", *tokens}});
    return true;
  }
  // No text for a larger vocabulary without a tokenizer: the ids.
  log_info("sample at step {} (token ids, after id {}):\n{}\n---", step, cfg_.model.vocab_size - 1,
           fmt::format("{}", fmt::join(*tokens, " ")));
  metrics_.write({{"type", "sample"}, {"step", step}, {"tokens", *tokens}});
  return true;
}

void Trainer::save_if_sound(int64_t step) {
  if (cfg_.checkpoint.dir.empty() || last_saved_step_ == step) return;
  if (nonfinite_in_a_row_ > 0) {
    log_info("not saving step {}: the last {} step(s) had a non-finite gradient{}", step, nonfinite_in_a_row_,
             last_saved_step_ >= 0 ? fmt::format("; the checkpoint of step {} stays the newest", last_saved_step_)
                                   : std::string());
    return;
  }
  save(step);
}

int Trainer::stop_for_signal() {
  if (metrics_failed_) {
    // On the error's stream, so that it follows the error also where both streams go to one file.
    if (mpi_.world_rank() == 0)
      log_warn("stopping after step {}: the metrics file cannot be written (see the error above)", state_.step);
    save_if_sound(state_.step);
    return kExitUserError;
  }
  // SIGUSR1 is what launch/strata-mpirun forwards for the user's SIGINT or SIGTERM (and Slurm's
  // warning before a time limit): named so, not as the number the user never sent.
  const int sig = stop_signal();
  const std::string who = sig == SIGUSR1 ? std::string("the launcher's stop signal (SIGUSR1) received")
                          : sig != 0     ? fmt::format("signal {} received", sig)
                                         : std::string("a stop signal reached another rank");
  if (abandoned_after_ > 0) {
    log_info("{}: abandoned step {} after {} of {} micro-batches; stopping after step {}", who, state_.step + 1,
             abandoned_after_, cfg_.derived.grad_accum, state_.step);
  } else {
    log_info("{}: stopping after step {}", who, state_.step);
  }
  save_if_sound(state_.step);
  return 0;
}

// A signal may reach some ranks only (or one step apart): all stop after the same step. A
// metrics file that cannot be written (rank 0's) stops the run the same way.
bool Trainer::agree_to_stop() {
  float flags[2] = {stop_requested() ? 1.0f : 0.0f, metrics_.failed() ? 1.0f : 0.0f};
  topology_.world().all_reduce(Tensor(flags, DType::F32, {2}), ReduceOp::Max);
  if (flags[1] > 0.0f) metrics_failed_ = true;
  return flags[0] > 0.0f || flags[1] > 0.0f;
}

int Trainer::run() {
  try {
    return run_loop();
  } catch (const RunFault& fault) {
    if (mpi_.world_rank() == 0) log_error("{}", fault.what());
    return kExitInternalError;
  }
}

int Trainer::run_loop() {
  const int64_t total = cfg_.train.iters;
  log_banner();
  // The folder's lock first: a job refused for a folder in use writes nothing, not even the memory
  // record into the metrics file the running job may share.
  if (!cfg_.checkpoint.dir.empty()) prepare_checkpoint_dir();
  report_memory();
  // The memory record was the metrics file's first write: no use training without it.
  if (agree_to_stop()) {
    if (mpi_.world_rank() == 0)
      log_warn("stopping before the first step: the metrics file cannot be written (see the error above)");
    return kExitUserError;
  }
  start_state();
  if (state_.step >= total && state_.pending_reports.empty()) {
    log_info("nothing to do: the checkpoint is at step {} and train.iters is {}", state_.step, total);
    return 0;
  }
  // Only from here on is a stop signal deferred to a step boundary: during set-up (which may
  // wait minutes on a checkpoint, or on a peer that failed) it ends the process at once.
  install_stop_signal_handlers();
  if (engine_.pipeline_stages() > 1) stop_vote_ = std::make_unique<WorldVote>(mpi_);  // collective
  if (!state_.pending_reports.empty()) {
    const std::vector<std::string> pending = state_.pending_reports;
    const auto has = [&](const char* what) { return std::find(pending.begin(), pending.end(), what) != pending.end(); };
    log_info("the {} of step {} that a stop cut short: making {} now", fmt::join(pending, " and "), state_.step,
             pending.size() == 1 ? "it" : "them");
    if (!make_reports(has("eval"), has("sample"))) return stop_for_signal();
  }
  const Timer run_timer;
  const int64_t first_step = state_.step;
  const auto due = [&](int64_t interval, bool last) {
    return interval > 0 && (state_.step % interval == 0 || last);
  };
  while (state_.step < total) {
    StepMetrics m;
    m.total_steps = total;
    const bool profiling = cfg_.flops_profiler.enabled && state_.step + 1 == cfg_.flops_profiler.profile_step;
    engine_.set_synchronize_phases(profiling || cfg_.wall_clock_breakdown);
    if (!train_step(m)) return stop_for_signal();
    if (profiling) report_flops_profile(m);
    const int64_t done = state_.step - first_step;
    if (done == 1) report_device_memory();
    m.eta_seconds = run_timer.seconds() / static_cast<double>(done) * static_cast<double>(total - state_.step);
    metrics_.write(step_record(m));
    setup_->csv.write_step(m, state_.step * cfg_.derived.global_batch);
    const bool last = state_.step == total;
    if (cfg_.steps_per_print > 0 && (state_.step % cfg_.steps_per_print == 0 || state_.step == 1 || last)) {
      log_info("{}", format_step_line(m));
    }
    if (!count_nonfinite(m)) return kExitInternalError;
    if (!make_reports(due(cfg_.train.eval_interval, last), due(cfg_.logging.sample_interval, last)))
      return stop_for_signal();
    if (due(cfg_.checkpoint.save_interval, last) || last) save_if_sound(state_.step);
    if (agree_to_stop()) return stop_for_signal();
  }
  log_info("done: {} steps in {}", total - first_step, format_duration(run_timer.seconds()));
  return 0;
}

void limit_blas_threads(const MpiRuntime& mpi) {
  if (std::getenv("OPENBLAS_NUM_THREADS")) return;  // the user decided
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (mpi.local_size() > 1) openblas_set_num_threads(std::max<int>(1, static_cast<int>(cores / mpi.local_size())));
}

namespace {

// Ranks that read different configs (a node with its own copy of the file, or other --set
// values) would run different schedules of collectives and hang, or train different models.
void check_same_config(const MpiRuntime& mpi, const std::string& path, const std::string& resolved) {
  if (mpi.world_size() == 1) return;
  Checksum64 hash;
  hash.update(resolved.data(), resolved.size());
  const int differs = first_rank_unlike_rank0(mpi.all_gather({static_cast<int64_t>(hash.digest())}), 1);
  if (differs < 0) return;
  throw UserError(fmt::format("config {}: rank {} resolved another config than rank 0 (a different copy of the file "
                              "on its node, or other --set values); every rank must train with the same config",
                              path, differs),
                  RaisedOn::EveryRank);
}

}  // namespace

int run_train(const MpiRuntime& mpi, const TrainOptions& options) {
  install_setup_signal_handlers();  // again, now that the rank is known
  Config cfg;
  agree_on_user_errors(mpi, "reading the config", [&] {
    cfg = load_config_file(options.config_path, options.overrides, mpi.world_size());
    check_runnable(cfg, mpi.world_size(), !options.dump_grads_path.empty());
  });
  check_same_config(mpi, options.config_path, config_to_yaml(cfg) + derived_to_yaml(cfg));
  limit_blas_threads(mpi);
  if (mpi.world_rank() == 0) {
    log_info("strata {} | {} rank(s) | config {}", STRATA_VERSION, mpi.world_size(), options.config_path);
    log_info("resolved config:\n{}{}", config_to_yaml(cfg), derived_as_comments(cfg));
    for (const std::string& note : deepspeed_notes(cfg)) log_info("config: {}", note);
    for (const std::string& warning : config_warnings(cfg)) log_warn("config: {}", warning);
  }
  Trainer trainer(mpi, std::move(cfg), options);
  return trainer.run();
}

}  // namespace strata
