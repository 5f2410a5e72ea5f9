// Private to src/train: the Trainer behind `strata train` (trainer.cpp: the loop, steps, saves,
// evaluation, samples; trainer_start.cpp: resume or initialise, and the cross-rank start checks;
// trainer_reports.cpp: the start-up banner, memory and device reports, traffic) and what it is
// built from.
#pragma once
#include <fmt/core.h>

#include <filesystem>
#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "core/core.h"
#include "train/metrics.h"
#include "train/train.h"
#include "train/train_internal.h"

namespace strata {

inline std::string bytes_text(int64_t bytes) { return fmt::format("{:.2f} MiB", static_cast<double>(bytes) / (1 << 20)); }

inline std::string precision_text(DType precision) {
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
        train(open_train_sequences(cfg, vocab_size, seq_len)),
        tokenizer(open_tokenizer(cfg)) {
    if (!cfg.data.val.empty()) {
      val_data = TokenDataset::open(cfg.data.val, vocab_size, "data.val");
      check_val_apart(train, *val_data);
      GlobalSampler(*val_data, seq_len, false, 0);  // evaluation needs a sequence: say so now, not at the first eval
    }
    if (!cfg.logging.metrics_file.empty() && mpi.world_rank() == 0) metrics = MetricsWriter(cfg.logging.metrics_file);
    const std::optional<std::string>& profile = cfg.flops_profiler.output_file;
    if (cfg.flops_profiler.enabled && profile && !profile->empty() && mpi.world_rank() == 0)
      check_report_file("flops_profiler.output_file", *profile);  // now, not at the profiled step
    if (cfg.csv_monitor.enabled && mpi.world_rank() == 0)
      csv = CsvMonitor((std::filesystem::path(cfg.csv_monitor.output_path) / cfg.csv_monitor.job_name).string());
  }
  TrainingDevice device;
  TrainSequences train;
  std::optional<BpeTokenizer> tokenizer;  // data.tokenizer
  std::optional<TokenDataset> val_data;
  MetricsWriter metrics;
  CsvMonitor csv;
};

// T built from args on every rank under agree_on_user_errors; running out of host memory while
// building it is a user error too (the estimate of check_memory_fits missed, or could not know).
template <typename T, typename... Args>
std::unique_ptr<T> make_agreed(const MpiRuntime& mpi, const std::string& what, Args&&... args) {
  std::unique_ptr<T> made;
  agree_on_user_errors(mpi, what, [&] {
    try {
      made = std::make_unique<T>(std::forward<Args>(args)...);
    } catch (const std::bad_alloc&) {
      throw UserError(what + ": out of host memory; use a smaller model, micro-batch or seq_len, more ranks or a "
                             "higher ZeRO stage");
    }
  });
  return made;
}

// Collective: check_memory_fits on every rank, agreed; true (for a member initializer).
inline bool memory_checked(const MpiRuntime& mpi, const Config& cfg, const TrainingDevice& device) {
  agree_on_user_errors(mpi, "checking memory", [&] { check_memory_fits(cfg, mpi, device); });
  return true;
}

// A fault of the run that the trainer reports with a complete message and ends with exit 1,
// saving nothing. Every rank meets it together (its finding is collective), so rank 0 alone says it.
class RunFault : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Trainer {
 public:
  Trainer(const MpiRuntime& mpi, Config cfg, TrainOptions options)
      : mpi_(mpi), cfg_(std::move(cfg)), options_(std::move(options)), dims_(gpt_dims_from_config(cfg_)),
        setup_(make_agreed<RankSetup>(mpi, "setting up devices and data", cfg_, mpi, dims_.vocab_size, dims_.seq_len)),
        device_(setup_->device),
        backend_(*device_.backend),
        topology_(mpi, GridShape{cfg_.derived.dp_size, cfg_.derived.pp_size, cfg_.derived.tp_size},
                  agree_on_devices(mpi, cfg_, device_), device_.access ? &*device_.access : nullptr),
        train_data_(setup_->train),
        val_data_(setup_->val_data),
        metrics_(setup_->metrics),
        memory_checked_(memory_checked(mpi, cfg_, device_)),
        engine_owner_(make_agreed<Engine>(mpi, "allocating the model and optimizer", backend_,
                                          engine_groups(topology_), dims_, cfg_.derived.micro_batch,
                                          cfg_.model.recompute,
                                          engine_settings_from_config(cfg_, backend_.device(), mpi.local_size()))),
        engine_(*engine_owner_),
        schedule_(lr_schedule_from_config(cfg_)) {
    BatchLayout layout;
    layout.micro_batch = cfg_.derived.micro_batch;
    layout.grad_accum = cfg_.derived.grad_accum;
    layout.dp_size = cfg_.derived.dp_size;
    layout.dp_rank = topology_.coord().dp;
    layout.seq_len = dims_.seq_len;
    loader_ = std::make_unique<BatchLoader>(train_data_, layout, /*prefetch=*/true);
    check_same_data();
  }

  int run();  // the process's exit code

 private:
  int run_loop();
  void start_state();
  void load_pretrained();
  // checkpoint.resume auto: loads the newest sound checkpoint into the engine; false when there
  // is none (a fresh start).
  bool resume_newest_sound(std::string* path);
  void prepare_checkpoint_dir();
  void settle_run_identity(const std::string& resumed_from, bool from_folder);
  void set_aside_later_checkpoints(const std::string& root, const std::string& id, const std::string& resumed_from);
  uint64_t checkpoint_bytes();  // collective: every rank's checkpoint files together
  void check_same_start(int64_t step);
  void check_same_data();
  nlohmann::json data_order() const;
  void warn_if_data_order_changed(const nlohmann::json& saved) const;
  // One optimizer step; false when a stop signal made the ranks abandon it part-way.
  bool train_step(StepMetrics& m);
  // The step's outcome into the loop state and metrics (fp16: the loss scale, an overflow logged).
  void record_outcome(const StepOutcome& outcome, StepMetrics& m);
  // Collective: the global batch's mean loss from every rank's micro-batch losses.
  double global_mean_loss(const std::vector<float>& losses);
  void save(int64_t step);
  // Saves the state after `step` unless there is nowhere to save it, it is saved already, or the
  // latest steps had non-finite gradients (then the checkpoints before them stay the newest).
  void save_if_sound(int64_t step);
  // After the ranks agreed to stop on a signal: says so, saves, returns the exit code (0).
  int stop_for_signal();
  // Both false when a stop signal interrupted them.
  bool evaluate(int64_t step);
  // The evaluation and the sample of this step, as due; false when a stop cut them short (those
  // not made are then the state's pending_reports, saved with the step).
  bool make_reports(bool eval, bool sample);
  bool sample(int64_t step);
  // trainer_faults.cpp: counts a step with a non-finite gradient; false when the run must stop
  // (after reporting why).
  bool count_nonfinite(const StepMetrics& m);
  // Throws RunFault when the state a save would write is not finite.
  void check_state_finite(int64_t step);
  std::string nonfinite_advice() const;
  void log_banner();  // model, batch, data, layout, ZeRO, precision, device
  void log_offload();
  void report_memory();
  void report_device_memory();
  void describe_devices();
  void report_flops_profile(const StepMetrics& m);
  bool agree_to_stop();
  void reset_traffic();
  void traffic(StepMetrics& m);
  void phase_times(StepMetrics& m);  // wall_clock_breakdown: the engine's phases, PP stages' bubbles

  const MpiRuntime& mpi_;
  Config cfg_;
  TrainOptions options_;
  GptDims dims_;
  std::unique_ptr<RankSetup> setup_;
  TrainingDevice& device_;
  Backend& backend_;
  Topology topology_;
  const TrainSequences& train_data_;
  const std::optional<TokenDataset>& val_data_;
  MetricsWriter& metrics_;
  bool memory_checked_;  // before the engine allocates
  std::unique_ptr<BatchLoader> loader_;
  std::unique_ptr<Engine> engine_owner_;
  Engine& engine_;
  LrSchedule schedule_;
  LoopState state_;
  Rng sample_rng_;
  int64_t nonfinite_in_a_row_ = 0;
  int abandoned_after_ = 0;  // micro-batches done of a step abandoned for a stop signal
  bool metrics_failed_ = false;  // the ranks agreed that rank 0's metrics file failed
  std::unique_ptr<CheckpointDirLock> dir_lock_;
  std::unique_ptr<WorldVote> stop_vote_;  // pipelines: the stop votes part-way through a step  // rank 0, while it trains into checkpoint.dir
  int64_t last_saved_step_ = -1;  // the newest checkpoint of this run (or the one it resumed from)
};

}  // namespace strata
