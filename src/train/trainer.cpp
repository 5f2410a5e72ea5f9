// `strata train`: builds the rank grid, the data-parallel engine (model, ZeRO stage,
// precision, optimizer), data and schedule from the config, resumes or initialises, and runs
// the loop — gradient accumulation, reduction, fp16 overflow skips, clipping, AdamW,
// evaluation, samples, metrics with memory and traffic figures, checkpoints, and a stop on
// SIGINT/SIGTERM agreed by every rank.
#include <fmt/core.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <vector>

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

std::string bytes_text(int64_t bytes) { return fmt::format("{:.2f} MiB", static_cast<double>(bytes) / (1 << 20)); }

ActivationRecompute recompute_of(const Config& cfg) {
  switch (cfg.model.recompute) {
    case Recompute::Full: return ActivationRecompute::Full;
    case Recompute::Selective: return ActivationRecompute::Selective;
    default: return ActivationRecompute::None;
  }
}

std::string precision_text(DType precision) {
  switch (precision) {
    case DType::BF16:
      return "bf16 (bf16 parameters and activations; fp32 master weights, gradient accumulation and Adam state)";
    case DType::F16:
      return "fp16 (fp16 parameters and activations; fp32 master weights, gradient accumulation and Adam state; "
             "loss scaling)";
    default:
      return "fp32";
  }
}

// What a rank sets up on its own, before any collective: its device, the data shards and
// their sequence order, and (rank 0) the metrics file.
struct RankSetup {
  RankSetup(const Config& cfg, const MpiRuntime& mpi, int vocab_size, int seq_len)
      : device(make_training_device(cfg, mpi)),
        train_data(TokenDataset::open(cfg.data.train, vocab_size, "data.train")),
        sampler(train_data, seq_len, cfg.data.shuffle, static_cast<uint64_t>(cfg.train.seed)) {
    if (!cfg.data.val.empty()) {
      val_data = TokenDataset::open(cfg.data.val, vocab_size, "data.val");
      GlobalSampler(*val_data, seq_len, false, 0);  // evaluation needs a sequence: say so now, not at the first eval
    }
    if (!cfg.logging.metrics_file.empty() && mpi.world_rank() == 0) metrics = MetricsWriter(cfg.logging.metrics_file);
  }
  TrainingDevice device;
  TokenDataset train_data;
  GlobalSampler sampler;
  std::optional<TokenDataset> val_data;
  MetricsWriter metrics;
};

// T built from args on every rank under agree_on_user_errors.
template <typename T, typename... Args>
std::unique_ptr<T> make_agreed(const MpiRuntime& mpi, const std::string& what, Args&&... args) {
  std::unique_ptr<T> made;
  agree_on_user_errors(mpi, what, [&] { made = std::make_unique<T>(std::forward<Args>(args)...); });
  return made;
}

class Trainer {
 public:
  Trainer(const MpiRuntime& mpi, Config cfg, TrainOptions options)
      : mpi_(mpi), cfg_(std::move(cfg)), options_(std::move(options)), dims_(gpt_dims_from_config(cfg_)),
        setup_(make_agreed<RankSetup>(mpi, "setting up devices and data", cfg_, mpi, dims_.vocab_size, dims_.seq_len)),
        device_(setup_->device),
        backend_(*device_.backend),
        topology_(mpi, GridShape{cfg_.derived.dp_size, cfg_.derived.pp_size, cfg_.derived.tp_size},
                  agree_on_devices(mpi, cfg_, device_), device_.access ? &*device_.access : nullptr),
        train_data_(setup_->train_data),
        val_data_(setup_->val_data),
        metrics_(setup_->metrics),
        engine_owner_(make_agreed<Engine>(mpi, "allocating the model and optimizer", backend_, topology_.dp(),
                                          topology_.world(), dims_, cfg_.derived.micro_batch, recompute_of(cfg_),
                                          engine_settings_from_config(cfg_), &topology_.tp())),
        engine_(*engine_owner_),
        schedule_(lr_schedule_from_config(cfg_)) {
    BatchLayout layout;
    layout.micro_batch = cfg_.derived.micro_batch;
    layout.grad_accum = cfg_.derived.grad_accum;
    layout.dp_size = cfg_.derived.dp_size;
    layout.dp_rank = topology_.coord().dp;
    layout.seq_len = dims_.seq_len;
    loader_ = std::make_unique<BatchLoader>(train_data_, setup_->sampler, layout, /*prefetch=*/true);
    check_same_data();
  }

  int run();

 private:
  void start_state();
  void check_same_start(int64_t step);
  void check_same_data();
  nlohmann::json data_order() const;
  void warn_if_data_order_changed(const nlohmann::json& saved) const;
  void train_step(StepMetrics& m);
  void save(int64_t step);
  void evaluate(int64_t step);
  void sample(int64_t step);
  void report_memory();
  void report_device_memory();
  void describe_devices();
  bool agree_to_stop();
  void reset_traffic();
  void traffic(StepMetrics& m);

  const MpiRuntime& mpi_;
  Config cfg_;
  TrainOptions options_;
  GptDims dims_;
  std::unique_ptr<RankSetup> setup_;
  TrainingDevice& device_;
  Backend& backend_;
  Topology topology_;
  const TokenDataset& train_data_;
  const std::optional<TokenDataset>& val_data_;
  MetricsWriter& metrics_;
  std::unique_ptr<BatchLoader> loader_;
  std::unique_ptr<Engine> engine_owner_;
  Engine& engine_;
  LrSchedule schedule_;
  LoopState state_;
  Rng sample_rng_;
};

// Each rank finds and reads its checkpoint on its own (ranks on different nodes may see
// different files); the ranks agree that all of them succeeded and start from the same step
// before the first collective.
void Trainer::start_state() {
  std::string resume_path;
  const std::string source_key = "checkpoint.resume";
  bool resumed = false;
  agree_on_user_errors(mpi_, "resuming from a checkpoint", [&] {
    const std::string& resume = cfg_.checkpoint.resume;
    if (resume == "auto") {
      if (!cfg_.checkpoint.dir.empty()) {
        if (auto latest = find_latest_checkpoint(cfg_.checkpoint.dir)) resume_path = *latest;
      }
    } else if (resume != "none") {
      resume_path = resume;
    }
    if (resume_path.empty()) return;
    state_ = read_training_checkpoint(resume_path, source_key, engine_, mpi_.world_rank());
    resumed = true;
  });
  check_same_start(resumed ? state_.step : -1);
  if (resumed) {
    engine_.params_loaded();
    schedule_.set_iteration(state_.scheduler_iteration);
    sample_rng_.restore(state_.sample_rng);
    log_info("resumed from {} at step {}", resume_path, state_.step);
    const int64_t by_batch = state_.step * cfg_.derived.global_batch;
    if (state_.next_sequence < 0) {
      state_.next_sequence = by_batch;  // a checkpoint from before the field existed
    } else if (state_.next_sequence != by_batch) {
      log_info("the data continues at sequence {}, not at step x global batch = {} x {} = {}: the run so far used "
               "another global batch",
               state_.next_sequence, state_.step, cfg_.derived.global_batch, by_batch);
    }
    warn_if_data_order_changed(state_.data_order);
  } else {
    engine_.init_weights(static_cast<uint64_t>(cfg_.train.seed));
    state_.next_sequence = 0;
    sample_rng_ = Rng(static_cast<uint64_t>(cfg_.train.seed), rng_stream_id("sample"));
    state_.sample_rng = sample_rng_.state();
    if (engine_.precision() == DType::F16) state_.loss_scaler = engine_.loss_scaler_state();
    log_info("initialised weights (seed {})", cfg_.train.seed);
    if (cfg_.checkpoint.save_initial && !cfg_.checkpoint.dir.empty()) save(0);
  }
  loader_->seek(state_.step, state_.next_sequence);
}

// `step` is the checkpoint's step, or -1 for fresh weights. A UserError on every rank when the
// ranks differ: with checkpoint.dir on storage that is not shared, a node may see an older
// checkpoint or none, and a run from mixed states would be wrong (or hang).
void Trainer::check_same_start(int64_t step) {
  if (mpi_.world_size() == 1) return;
  const std::vector<int64_t> steps = gather_from_all_ranks(mpi_, {step});
  const int differs = first_rank_unlike_rank0(steps, 1);
  if (differs < 0) return;
  const auto start = [&](int r) {
    const int64_t s = steps[static_cast<size_t>(r)];
    return s < 0 ? std::string("fresh weights (no checkpoint found)") : fmt::format("a checkpoint at step {}", s);
  };
  throw UserError(fmt::format(
      "checkpoint.resume: {}: the ranks found different checkpoints: rank 0 would start from {}, rank {} from {}; "
      "checkpoint.dir must be storage that every node shares, or name one checkpoint in checkpoint.resume",
      cfg_.checkpoint.resume, start(0), differs, start(differs)),
      RaisedOn::EveryRank);
}

// Every rank reads the data on its own node: copies that differ (another version of the corpus)
// would give each rank other sequences than the global order assigns it.
void Trainer::check_same_data() {
  if (mpi_.world_size() == 1) return;
  const std::vector<int64_t> all =
      gather_from_all_ranks(mpi_, {train_data_.num_tokens(), val_data_ ? val_data_->num_tokens() : -1});
  const int r = first_rank_unlike_rank0(all, 2);
  if (r < 0) return;
  const int k = all[2 * static_cast<size_t>(r)] != all[0] ? 0 : 1;  // train first
  throw UserError(fmt::format("{}: rank {} finds {} tokens, rank 0 {}: every rank must read the same data (a shared "
                              "file system, or identical copies on every node)",
                              k == 0 ? "data.train" : "data.val", r, all[2 * static_cast<size_t>(r) + k],
                              all[static_cast<size_t>(k)]),
                  RaisedOn::EveryRank);
}

nlohmann::json Trainer::data_order() const {
  return {{"tokens", train_data_.num_tokens()}, {"shuffle", cfg_.data.shuffle}, {"seed", cfg_.train.seed}};
}

// A resumed run may change its data on purpose (more text, shuffling on); it is told that the
// sequences from here differ from those an uninterrupted run would have read.
void Trainer::warn_if_data_order_changed(const nlohmann::json& saved) const {
  if (saved.is_null() || mpi_.world_rank() != 0) return;
  const nlohmann::json now = data_order();
  const auto then = [&](const char* key) { return saved.contains(key) ? saved.at(key) : nlohmann::json(); };
  std::string changes;
  const auto add = [&](const std::string& what, const char* key) {
    changes += fmt::format("{}{} is {}, {} then", changes.empty() ? "" : "; ", what, now[key].dump(), then(key).dump());
  };
  if (then("tokens") != now["tokens"]) add("the token count of data.train", "tokens");
  if (then("shuffle") != now["shuffle"]) {
    add("data.shuffle", "shuffle");
  } else if (cfg_.data.shuffle && then("seed") != now["seed"]) {
    add("train.seed (which orders the shuffled data)", "seed");
  }
  if (changes.empty()) return;
  log_warn("the data order differs from the checkpoint's run ({}): from here on this run reads other sequences than "
           "an uninterrupted run would",
           changes);
}

// Every rank's memory, gathered to all (cheap, once) and reported by rank 0.
void Trainer::report_memory() {
  const EngineMemory mem = engine_.memory();
  const ActivationBytes& act = engine_.model().activation_breakdown();
  const std::vector<double> mine = {static_cast<double>(mem.params),    static_cast<double>(mem.grads),
                                    static_cast<double>(mem.optimizer), static_cast<double>(mem.workspace),
                                    static_cast<double>(act.total),     static_cast<double>(act.per_layer),
                                    static_cast<double>(act.shared)};
  const std::vector<double> all = all_gather_doubles(topology_.world(), mine);
  nlohmann::json ranks = nlohmann::json::array();
  log_info("memory per rank (ZeRO stage {}, DP {}, TP {}{}, recompute {}):", cfg_.zero_optimization.stage,
           cfg_.derived.dp_size, cfg_.derived.tp_size, engine_.tensor_parallel().sequence_parallel() ? " with SP" : "",
           to_string(cfg_.model.recompute));
  log_info("  {:>4} {:>12} {:>12} {:>12} {:>12} {:>12} {:>14}", "rank", "params", "grads", "optimizer", "workspace",
           "activations", "per layer");
  for (int r = 0; r < topology_.world().size(); ++r) {
    const double* v = all.data() + static_cast<size_t>(r) * mine.size();
    const auto bytes = [&](int i) { return static_cast<int64_t>(v[i]); };
    log_info("  {:>4} {:>12} {:>12} {:>12} {:>12} {:>12} {:>14}", r, bytes_text(bytes(0)), bytes_text(bytes(1)),
             bytes_text(bytes(2)), bytes_text(bytes(3)), bytes_text(bytes(4)), bytes_text(bytes(5)));
    ranks.push_back({{"rank", r},
                     {"params", bytes(0)},
                     {"grads", bytes(1)},
                     {"optimizer", bytes(2)},
                     {"workspace", bytes(3)},
                     {"activations", bytes(4)},
                     {"activations_per_layer", bytes(5)},
                     {"activations_shared", bytes(6)}});
  }
  metrics_.write({{"type", "memory"},
                  {"zero_stage", cfg_.zero_optimization.stage},
                  {"dp", cfg_.derived.dp_size},
                  {"tp", cfg_.derived.tp_size},
                  {"sequence_parallel", engine_.tensor_parallel().sequence_parallel()},
                  {"recompute", to_string(cfg_.model.recompute)},
                  {"n_params", cfg_.derived.n_params},
                  {"ranks", ranks}});
}

void Trainer::describe_devices() {
  const char* comm = device_.comm == CommBackendKind::Nccl ? "nccl"
                     : device_.access                      ? "mpi (device buffers staged through host memory)"
                                                            : "mpi";
  log_info("device: {} | communication: {}", device_.description, comm);
}

// The allocator's figures after the first step (every buffer and the largest transient
// scratch exist by then): the most any rank allocated, and rank 0's view of its device.
void Trainer::report_device_memory() {
  if (backend_.device() == Device::CPU) return;
  const MemoryStats mine = backend_.memory_stats();
  const std::vector<double> all = all_gather_doubles(
      topology_.world(), {static_cast<double>(mine.allocated_bytes), static_cast<double>(mine.peak_allocated_bytes)});
  double peak = 0;
  for (size_t i = 1; i < all.size(); i += 2) peak = std::max(peak, all[i]);
  const auto mib = [](double bytes) { return bytes / (1 << 20); };
  log_info("device memory after the first step: peak allocated {:.0f} MiB (largest rank); rank 0: {:.0f} MiB "
           "allocated, {:.0f} of {:.0f} MiB in use on its device",
           mib(peak), mib(static_cast<double>(mine.allocated_bytes)), mib(static_cast<double>(mine.device_used_bytes)),
           mib(static_cast<double>(mine.device_total_bytes)));
  metrics_.write({{"type", "device_memory"}, {"peak_allocated_max", static_cast<int64_t>(peak)},
                  {"allocated", static_cast<int64_t>(mine.allocated_bytes)},
                  {"device_used", static_cast<int64_t>(mine.device_used_bytes)},
                  {"device_total", static_cast<int64_t>(mine.device_total_bytes)}});
}

void Trainer::reset_traffic() {
  for (Comm* c : topology_.all_comms()) c->counters().reset();
}

void Trainer::traffic(StepMetrics& m) {
  m.comm = m.comm_calls = nlohmann::json::object();
  for (Comm* c : topology_.all_comms()) {
    for (const auto& [op, stats] : c->counters().by_op) {
      m.comm[c->name() + "." + op] = stats.payload_bytes;
      m.comm_calls[c->name() + "." + op] = stats.calls;
    }
  }
}

void Trainer::train_step(StepMetrics& m) {
  reset_traffic();
  const Timer step_timer;
  const int gas = cfg_.derived.grad_accum;
  const int micro = cfg_.derived.micro_batch;
  const int seq = dims_.seq_len;
  // Loss is the mean over every token of the global batch; each token's gradient weight:
  const float dloss = 1.0f / static_cast<float>(static_cast<double>(cfg_.derived.global_batch) * seq);
  engine_.begin_step(gas);
  std::vector<float> losses;
  for (int i = 0; i < gas; ++i) {
    const MicroBatch batch = loader_->next();
    losses.push_back(engine_.micro_step(batch.tokens.data(), batch.targets.data(), micro, seq, dloss));
  }
  engine_.finish_reduction();
  if (state_.step == 0 && !options_.dump_grads_path.empty() && mpi_.world_rank() == 0) {
    dump_gradients(options_.dump_grads_path, engine_.model(), engine_.loss_scale());
    log_info("wrote the first step's gradients to {}", options_.dump_grads_path);
  }
  const double lr = schedule_.current_lr();
  const StepOutcome outcome = engine_.apply(lr);
  // DeepSpeed: a step skipped for an fp16 overflow does not advance the LR schedule either.
  if (!outcome.skipped) schedule_.advance();
  ++state_.step;
  state_.scheduler_iteration = schedule_.iteration();
  state_.optimizer_steps = engine_.optimizer_steps();
  if (engine_.precision() == DType::F16) {
    state_.loss_scaler = engine_.loss_scaler_state();
    m.loss_scale = outcome.loss_scale;
    m.skipped = outcome.skipped;
    if (outcome.skipped) {
      log_info("fp16 overflow at step {}: loss scale {} → {}, step skipped", state_.step, outcome.loss_scale,
               outcome.next_loss_scale);
      metrics_.write({{"type", "overflow"}, {"step", state_.step}, {"loss_scale", outcome.loss_scale},
                      {"next_loss_scale", outcome.next_loss_scale}});
    }
  }
  // Micro-batch losses of the DP replicas in global batch order (rank-major), summed in that
  // order: the same figure, bit for bit, as one rank running every micro-batch. The world is
  // ordered TP fastest; a replica's TP ranks hold the same losses, and its first one counts.
  const std::vector<float> all = all_gather_floats(topology_.world(), losses);
  const size_t per_rank = losses.size(), tp = static_cast<size_t>(cfg_.derived.tp_size);
  double loss_sum = 0;
  for (size_t r = 0; r * per_rank < all.size(); r += tp) {
    for (size_t i = 0; i < per_rank; ++i) loss_sum += all[r * per_rank + i];
  }

  m.step = state_.step;
  m.loss = loss_sum / (static_cast<double>(gas) * cfg_.derived.dp_size);
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
  if (cfg_.wall_clock_breakdown) {
    const EngineTimes& t = engine_.times();
    m.forward_seconds = t.forward;
    m.backward_seconds = t.backward;
    m.comm_wait_seconds = t.comm_wait;
    if (cfg_.derived.tp_size > 1) m.tp_wait_seconds = t.tp_wait;
    m.optimizer_seconds = t.optimizer;
  }
}

void Trainer::save(int64_t step) {
  const Timer t;
  SaveContext context;
  context.rank = mpi_.world_rank();
  context.world_size = mpi_.world_size();
  context.barrier = [this] { mpi_.barrier(); };
  state_.sample_rng = sample_rng_.state();
  state_.next_sequence = loader_->first_sequence_of(step);
  state_.data_order = data_order();
  std::string dir;
  // Each rank judges the save from its own view of the file system; the ranks agree on it, so
  // that none carries on into the next collective while another stops.
  agree_on_user_errors(mpi_, fmt::format("saving the checkpoint of step {}", step),
                       [&] { dir = save_training_checkpoint(cfg_, step, state_, engine_, context); });
  log_info("saved checkpoint {} ({:.1f}s)", dir, t.seconds());
}

void Trainer::evaluate(int64_t step) {
  if (!val_data_) return;
  const Timer t;
  const double val_loss =
      evaluate_loss(engine_.model(), *val_data_, dims_.seq_len, cfg_.derived.micro_batch, cfg_.train.eval_iters,
                    topology_.world(), topology_.coord().dp, cfg_.derived.dp_size, engine_.zero_stage() == 3);
  log_info("eval step {} | val loss {:.4f} | {:.1f}s", step, val_loss, t.seconds());
  metrics_.write({{"type", "eval"}, {"step", step}, {"val_loss", val_loss}});
}

// Every rank samples (with ZeRO-3 or TP the forward needs them all; the RNG stays identical).
void Trainer::sample(int64_t step) {
  const std::string text = sample_text(engine_.model(), cfg_.logging.sample_prompt, cfg_.logging.sample_tokens, sample_rng_);
  log_info("sample at step {}:\n{}{}\n---", step, cfg_.logging.sample_prompt, text);
  metrics_.write({{"type", "sample"}, {"step", step}, {"prompt", cfg_.logging.sample_prompt}, {"text", text}});
}

// A signal may reach some ranks only (or one step apart): all stop after the same step.
bool Trainer::agree_to_stop() {
  float flag = stop_requested() ? 1.0f : 0.0f;
  topology_.world().all_reduce(Tensor(&flag, DType::F32, {1}), ReduceOp::Max);
  return flag > 0.0f;
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
  log_info("layout: {} rank(s) = DP {} x TP {} x PP {} (rank = (pp*DP + dp)*TP + tp); sequence parallelism {}",
           mpi_.world_size(), cfg_.derived.dp_size, cfg_.derived.tp_size, cfg_.derived.pp_size,
           engine_.tensor_parallel().sequence_parallel() ? "on"
           : cfg_.parallelism.sequence_parallel          ? "off (it needs TP > 1)"
                                                         : "off");
  log_info("ZeRO stage {} over DP {}{}", cfg_.zero_optimization.stage, cfg_.derived.dp_size,
           engine_settings_from_config(cfg_).overlap_comm ? " (reductions overlap backward)" : "");
  log_info("precision: {}", precision_text(engine_.precision()));
  describe_devices();
  report_memory();
  start_state();
  if (state_.step >= total) {
    log_info("nothing to do: the checkpoint is at step {} and train.iters is {}", state_.step, total);
    return 0;
  }
  // Only from here on is a stop signal deferred to a step boundary: during set-up (which may
  // wait minutes on a checkpoint, or on a peer that failed) it ends the process at once.
  install_stop_signal_handlers();
  const Timer run_timer;
  const int64_t first_step = state_.step;
  bool saved_last = false;
  while (state_.step < total) {
    StepMetrics m;
    m.total_steps = total;
    train_step(m);
    const int64_t done = state_.step - first_step;
    if (done == 1) report_device_memory();
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
    if (agree_to_stop()) {
      if (stop_signal() != 0) {
        log_info("signal {} received: stopping after step {}", stop_signal(), state_.step);
      } else {
        log_info("a stop signal reached another rank: stopping after step {}", state_.step);
      }
      if (!cfg_.checkpoint.dir.empty() && !saved_last) save(state_.step);
      return 0;
    }
  }
  log_info("done: {} steps in {}", total - first_step, format_duration(run_timer.seconds()));
  return 0;
}

// Ranks that read different configs (a node with its own copy of the file, or other --set
// values) would run different schedules of collectives and hang, or train different models.
void check_same_config(const MpiRuntime& mpi, const std::string& path, const std::string& resolved) {
  if (mpi.world_size() == 1) return;
  Checksum64 hash;
  hash.update(resolved.data(), resolved.size());
  const int differs = first_rank_unlike_rank0(gather_from_all_ranks(mpi, {static_cast<int64_t>(hash.digest())}), 1);
  if (differs < 0) return;
  throw UserError(fmt::format("config {}: rank {} resolved another config than rank 0 (a different copy of the file "
                              "on its node, or other --set values); every rank must train with the same config",
                              path, differs),
                  RaisedOn::EveryRank);
}

}  // namespace

int run_train(const MpiRuntime& mpi, const TrainOptions& options) {
  Config cfg;
  agree_on_user_errors(mpi, "reading the config", [&] {
    cfg = load_config_file(options.config_path, options.overrides, mpi.world_size());
    check_runnable(cfg, mpi.world_size(), !options.dump_grads_path.empty());
  });
  check_same_config(mpi, options.config_path, config_to_yaml(cfg) + derived_to_yaml(cfg));
  limit_blas_threads(mpi);
  if (mpi.world_rank() == 0) {
    log_info("strata {} | {} rank(s) | config {}", STRATA_VERSION, mpi.world_size(), options.config_path);
    log_info("resolved config:\n{}{}", config_to_yaml(cfg), derived_to_yaml(cfg));
  }
  Trainer trainer(mpi, std::move(cfg), options);
  return trainer.run();
}

}  // namespace strata
