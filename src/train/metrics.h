// Step metrics: the rank-0 log line, the JSONL record and DeepSpeed's CSV files, throughput and
// FLOP figures, and the process's peak memory.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace strata {

struct StepMetrics {
  int64_t step = 0, total_steps = 0;
  double loss = 0, lr = 0, grad_norm = 0;
  double step_seconds = 0;
  double tokens_per_second = 0;      // whole job
  double tflops_per_rank = 0;        // achieved model FLOP/s per rank, in TFLOP/s
  double mfu = -1;                   // fraction of peak; < 0 when no peak is known (CPU)
  size_t peak_memory_bytes = 0;
  double eta_seconds = 0;
  // wall_clock_breakdown phases (seconds), negative when not measured; comm_wait is the time
  // blocked on data-parallel collectives, tp_wait on tensor-parallel ones (< 0 without TP), each
  // part of the phase it happened in
  double forward_seconds = -1, backward_seconds = -1, comm_wait_seconds = -1, optimizer_seconds = -1;
  double tp_wait_seconds = -1;
  // Under pipeline parallelism, each stage's phases (its DP rank 0, TP rank 0) and its measured
  // bubble (the share of the pipeline's span it was not computing), beside theory's.
  struct StageTimes {
    double forward = 0, backward = 0, pipe_wait = 0, optimizer = 0, bubble = 0;
  };
  std::vector<StageTimes> stages;
  double bubble_theory = -1;
  // fp16: the loss scale the step's gradients carried (< 0 outside fp16); whether a non-finite
  // gradient skipped the optimizer step, and whether that was a fault (not an fp16 overflow the
  // loss scale answers)
  double loss_scale = -1;
  bool skipped = false;
  bool nonfinite = false;
  // Payload bytes per communicator and operation during the step, e.g. {"dp.all_reduce": 1024},
  // and the number of calls of each
  nlohmann::json comm, comm_calls;
};

std::string format_step_line(const StepMetrics& m);
nlohmann::json step_record(const StepMetrics& m);
std::string format_duration(double seconds);  // "1h02m", "3m05s", "12.3s"
size_t peak_host_memory_bytes();              // peak resident set size of this process

// An output file named by `key` that cannot be opened for appending (its folders are created) is
// a user error, found at start-up rather than when the first report is due.
void check_report_file(const std::string& key, const std::string& path);

// Appends one JSON object per line; flushed after every record so a killed run keeps its log.
// A record that cannot be written (a full disk, /dev/full) is reported at once (the path and the
// system's reason, as an error line) and marks the writer failed: later records are dropped and
// the trainer stops the run (exit 2) once it has saved a checkpoint.
class MetricsWriter {
 public:
  MetricsWriter() = default;
  // Opens for append, creating parent directories. What the file held before is settled by
  // start_run, once the run knows whether it resumes (a job the checkpoint folder's lock refuses
  // never gets there, and leaves the file of the job holding it as it was).
  explicit MetricsWriter(const std::string& path);
  // A resumed run continues the file, less an unfinished last record (a write cut short by a
  // full disk or a kill): its own records would otherwise be glued to it. A run that does not
  // resume starts the file anew, so that readers never join two runs' steps into one curve: the
  // earlier run's records move to `<path>.prev` (replacing an older one). The records this run
  // wrote before the call stay, in order.
  void start_run(bool resumed);
  void write(const nlohmann::json& record);
  bool enabled() const { return file_ != nullptr; }
  bool failed() const { return !error_.empty(); }
  const std::string& error() const { return error_; }

 private:
  // Writes and flushes bytes; a failure marks the writer failed, reported as `doing` the path.
  void append(const std::string& bytes);
  void fail(const std::string& doing, const std::string& reason);
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file_{nullptr, &std::fclose};
  std::string path_;
  std::string error_;
  int64_t earlier_bytes_ = 0;  // the file's size when this run opened it
};

// DeepSpeed's csv_monitor: in DIR (output_path/job_name), one file per event, named after it
// with '/' as '_' (Train_Samples_lr.csv), a header row "step,<last part of the name>" and one
// "samples,value" row per optimizer step, where samples counts the sequences trained on so far.
// The events are DeepSpeed's: train_loss (its pipeline engine's), lr, loss_scale under fp16,
// and the elapsed_time_ms_* phases under wall_clock_breakdown. Files are appended to (a resumed
// run continues them; the header is written to new files only). A write that fails is reported
// once and ends the monitor, not the run.
class CsvMonitor {
 public:
  CsvMonitor() = default;
  explicit CsvMonitor(const std::string& dir);
  void write_step(const StepMetrics& m, int64_t samples);
  bool enabled() const { return !dir_.empty(); }

 private:
  void write_event(const std::string& name, double value, int64_t samples);
  std::string dir_;
  std::set<std::string> started_;  // files known to have their header (looked at once per run)
  bool failed_ = false;
};

}  // namespace strata
