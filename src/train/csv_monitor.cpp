// DeepSpeed's CSV monitor files, written by rank 0 after each optimizer step (metrics.h says
// what each file holds).
#include <fmt/core.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/core.h"
#include "train/metrics.h"

namespace strata {
namespace {

// Python's repr of a float, which DeepSpeed's csv writer prints: whole values keep ".0".
std::string python_float(double value) {
  if (std::isfinite(value) && value == std::floor(value) && std::fabs(value) < 1e16) return fmt::format("{:.1f}", value);
  return fmt::format("{}", value);
}

}  // namespace

CsvMonitor::CsvMonitor(const std::string& dir) : dir_(dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir))
    throw UserError(fmt::format("csv_monitor: cannot create the directory '{}': {}", dir,
                                ec ? ec.message() : "not a directory"));
}

void CsvMonitor::write_event(const std::string& name, double value, int64_t samples) {
  if (failed_) return;
  std::string file = name;
  for (char& c : file) c = c == '/' || c == ' ' ? '_' : c;
  const std::string path = dir_ + "/" + file + ".csv";
  // A file this run has not written yet may hold a header already (a resumed run): look once.
  std::error_code ec;
  const bool fresh = started_.count(path) == 0 &&
                     (!std::filesystem::exists(path, ec) || std::filesystem::file_size(path, ec) == 0);
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> out(std::fopen(path.c_str(), "a"), &std::fclose);
  std::string text;
  if (fresh) text = "step," + name.substr(name.rfind('/') + 1) + "\r\n";  // csv.writer ends rows with \r\n
  text += fmt::format("{},{}\r\n", samples, python_float(value));
  if (!out || std::fwrite(text.data(), 1, text.size(), out.get()) != text.size() || std::fflush(out.get()) != 0) {
    log_error("csv_monitor: cannot write '{}': {}; no more CSV records are written", path, std::strerror(errno));
    failed_ = true;
    return;
  }
  started_.insert(path);
}

void CsvMonitor::write_step(const StepMetrics& m, int64_t samples) {
  if (!enabled()) return;
  write_event("Train/Samples/train_loss", m.loss, samples);
  write_event("Train/Samples/lr", m.lr, samples);
  if (m.loss_scale >= 0) write_event("Train/Samples/loss_scale", m.loss_scale, samples);
  if (m.forward_seconds < 0) return;
  // DeepSpeed's phases: backward_allreduce is the time waiting on the gradients' reduction.
  write_event("Train/Samples/elapsed_time_ms_forward", m.forward_seconds * 1e3, samples);
  write_event("Train/Samples/elapsed_time_ms_backward", m.backward_seconds * 1e3, samples);
  write_event("Train/Samples/elapsed_time_ms_backward_inner",
              std::max(0.0, m.backward_seconds - m.comm_wait_seconds) * 1e3, samples);
  write_event("Train/Samples/elapsed_time_ms_backward_allreduce", m.comm_wait_seconds * 1e3, samples);
  write_event("Train/Samples/elapsed_time_ms_step", m.optimizer_seconds * 1e3, samples);
}

}  // namespace strata
