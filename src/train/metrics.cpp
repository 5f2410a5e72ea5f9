// Formatting of step metrics for the console and the JSONL file.
#include "train/metrics.h"

#include <fmt/core.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/core.h"

namespace strata {

std::string format_duration(double seconds) {
  if (seconds < 60) return fmt::format("{:.1f}s", seconds);
  const auto total = static_cast<int64_t>(seconds + 0.5);
  if (total < 3600) return fmt::format("{}m{:02d}s", total / 60, total % 60);
  return fmt::format("{}h{:02d}m", total / 3600, (total % 3600) / 60);
}

size_t peak_host_memory_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<size_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

std::string format_step_line(const StepMetrics& m) {
  // A NaN norm (an overflowed fp16 step) prints as nan, whatever its sign bit.
  const std::string norm = std::isnan(m.grad_norm) ? std::string("nan") : fmt::format("{:.3f}", m.grad_norm);
  std::string line = fmt::format(
      "step {:>{}}/{} | loss {:.4f} | lr {:.3e} | norm {} | {:.0f} ms | {:.0f} tok/s | {:.2f} TFLOP/s", m.step,
      std::to_string(m.total_steps).size(), m.total_steps, m.loss, m.lr, norm, m.step_seconds * 1e3,
      m.tokens_per_second, m.tflops_per_rank);
  if (m.mfu >= 0) line += fmt::format(" | MFU {:.1f}%", m.mfu * 100);
  if (m.loss_scale >= 0) line += fmt::format(" | scale {}", m.loss_scale);
  if (m.skipped) line += m.nonfinite ? " | NOT FINITE: skipped" : " | skipped";
  line += fmt::format(" | mem {:.0f} MiB | ETA {}", static_cast<double>(m.peak_memory_bytes) / (1 << 20),
                      format_duration(m.eta_seconds));
  if (m.forward_seconds >= 0) {
    line += fmt::format(" | fwd {:.0f} bwd {:.0f} opt {:.0f} ms, comm wait {:.0f} ms ({:.0f}%)", m.forward_seconds * 1e3,
                        m.backward_seconds * 1e3, m.optimizer_seconds * 1e3, m.comm_wait_seconds * 1e3,
                        m.step_seconds > 0 ? 100 * m.comm_wait_seconds / m.step_seconds : 0.0);
    if (m.tp_wait_seconds >= 0) line += fmt::format(", TP wait {:.0f} ms", m.tp_wait_seconds * 1e3);
  }
  if (!m.stages.empty()) {
    line += " | stages fwd/bwd/p2p wait/opt ms, bubble:";
    for (size_t s = 0; s < m.stages.size(); ++s) {
      const StepMetrics::StageTimes& st = m.stages[s];
      line += fmt::format("{} {:.0f}/{:.0f}/{:.0f}/{:.0f} {:.0f}%", s ? "," : "", st.forward * 1e3, st.backward * 1e3,
                          st.pipe_wait * 1e3, st.optimizer * 1e3, st.bubble * 100);
    }
    line += fmt::format(" (theory {:.0f}%)", m.bubble_theory * 100);
  }
  return line;
}

nlohmann::json step_record(const StepMetrics& m) {
  nlohmann::json r = {{"type", "train"},
                      {"step", m.step},
                      {"loss", m.loss},
                      {"lr", m.lr},
                      {"grad_norm", m.grad_norm},
                      {"step_time_s", m.step_seconds},
                      {"tokens_per_s", m.tokens_per_second},
                      {"tflops_per_rank", m.tflops_per_rank},
                      {"mfu", m.mfu >= 0 ? nlohmann::json(m.mfu) : nlohmann::json(nullptr)},
                      {"peak_memory_bytes", m.peak_memory_bytes},
                      {"eta_s", m.eta_seconds}};
  if (m.loss_scale >= 0) r["loss_scale"] = m.loss_scale;
  if (m.loss_scale >= 0 || m.skipped) r["skipped"] = m.skipped;
  if (m.nonfinite) r["nonfinite"] = true;
  if (m.forward_seconds >= 0) {
    r["forward_s"] = m.forward_seconds;
    r["backward_s"] = m.backward_seconds;
    r["optimizer_s"] = m.optimizer_seconds;
    r["comm_wait_s"] = m.comm_wait_seconds;
    if (m.tp_wait_seconds >= 0) r["tp_wait_s"] = m.tp_wait_seconds;
  }
  if (!m.stages.empty()) {
    nlohmann::json stages = nlohmann::json::array();
    for (size_t s = 0; s < m.stages.size(); ++s) {
      const StepMetrics::StageTimes& st = m.stages[s];
      stages.push_back({{"stage", s},
                        {"forward_s", st.forward},
                        {"backward_s", st.backward},
                        {"pipe_wait_s", st.pipe_wait},
                        {"optimizer_s", st.optimizer},
                        {"bubble", st.bubble}});
    }
    r["stages"] = stages;
    r["bubble_theory"] = m.bubble_theory;
  }
  if (!m.comm.is_null()) r["comm"] = m.comm;
  if (!m.comm_calls.is_null()) r["comm_calls"] = m.comm_calls;
  return r;
}

namespace {

// `path` opened for appending, its folders created; a UserError naming `key` when it cannot be.
std::FILE* open_appending(const std::string& key, const std::string& path) {
  const std::filesystem::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  std::FILE* file = std::fopen(path.c_str(), "a");
  if (!file) throw UserError(fmt::format("{}: cannot open '{}' for writing: {}", key, path, std::strerror(errno)));
  return file;
}

}  // namespace

void check_report_file(const std::string& key, const std::string& path) {
  std::fclose(open_appending(key, path));
}

MetricsWriter::MetricsWriter(const std::string& path) : path_(path) {
  file_.reset(open_appending("logging.metrics_file", path));
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  earlier_bytes_ = ec ? 0 : static_cast<int64_t>(size);
}

namespace {

// The bytes of `path` from `offset` on.
std::string read_from(const std::string& path, int64_t offset) {
  std::ifstream in(path, std::ios::binary);
  in.seekg(offset);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Where the last complete line of the file's first `bytes` bytes ends (0: none).
int64_t complete_lines_end(const std::string& path, int64_t bytes) {
  std::ifstream in(path, std::ios::binary);
  constexpr int64_t kWindow = 1 << 16;
  for (int64_t end = bytes; end > 0;) {
    const int64_t begin = std::max<int64_t>(0, end - kWindow);
    std::string piece(static_cast<size_t>(end - begin), '\0');
    in.seekg(begin);
    in.read(piece.data(), static_cast<std::streamsize>(piece.size()));
    const size_t newline = piece.rfind('\n');
    if (newline != std::string::npos) return begin + static_cast<int64_t>(newline) + 1;
    end = begin;
  }
  return 0;
}

}  // namespace

void MetricsWriter::start_run(bool resumed) {
  if (!file_ || failed() || earlier_bytes_ == 0) return;
  const int64_t keep = resumed ? complete_lines_end(path_, earlier_bytes_) : 0;
  if (keep == earlier_bytes_) return;  // a resumed run continuing whole records
  const std::string own = read_from(path_, earlier_bytes_);  // this run's records so far
  file_.reset();
  std::error_code ec;
  const std::string prev = path_ + ".prev";
  if (resumed) {
    std::filesystem::resize_file(path_, static_cast<uint64_t>(keep), ec);
  } else {
    std::filesystem::rename(path_, prev, ec);
    if (!ec) std::filesystem::resize_file(prev, static_cast<uint64_t>(earlier_bytes_), ec);
  }
  if (ec) return fail("setting aside the earlier records of", ec.message());
  if (resumed) {
    log_warn("logging.metrics_file: {} ended in an unfinished record ({} bytes, cut short by a full disk or a "
             "kill): dropped",
             path_, earlier_bytes_ - keep);
  } else {
    log_info("logging.metrics_file: {} held an earlier run's records: moved to {}; this run starts the file anew",
             path_, prev);
  }
  earlier_bytes_ = 0;
  file_.reset(std::fopen(path_.c_str(), "a"));
  append(own);
}

void MetricsWriter::write(const nlohmann::json& record) {
  if (!file_ || failed()) return;
  // Samples of a byte-level model are arbitrary bytes: invalid UTF-8 becomes U+FFFD rather
  // than an exception, so a record is always valid JSON.
  append(record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

void MetricsWriter::append(const std::string& bytes) {
  errno = 0;
  const bool written = file_ && std::fwrite(bytes.data(), 1, bytes.size(), file_.get()) == bytes.size() &&
                       std::fflush(file_.get()) == 0;
  if (!written) fail("writing", errno != 0 ? std::strerror(errno) : "short write");
}

void MetricsWriter::fail(const std::string& doing, const std::string& reason) {
  error_ = fmt::format("logging.metrics_file: {} '{}' failed: {}", doing, path_, reason);
  log_error("{}", error_);
}

}  // namespace strata
