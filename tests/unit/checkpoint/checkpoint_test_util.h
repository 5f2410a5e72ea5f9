// Shared helpers for the checkpoint tests: scratch directories, raw file access, a thread
// barrier so several simulated ranks can run one collective save inside one process.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/manifest.h"
#include "core/log.h"

namespace strata::test {

// A fresh directory under the system temp dir, removed with everything in it at scope exit.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "strata_ckpt_XXXXXX").string();
    if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Replaces a checkpoint's manifest with `text` and seals it as a save does (the checksum
// sidecar), for tests of what the reader makes of a manifest that is intact but wrong.
inline void write_sealed_manifest(const std::string& dir, const std::string& text) {
  write_bytes(dir + "/manifest.json", text);
  write_bytes(dir + "/manifest.checksum", ckpt::manifest_checksum_text(text));
}

// Reusable barrier for `count` threads (C++17 has no std::barrier).
class ThreadBarrier {
 public:
  explicit ThreadBarrier(int count) : count_(count) {}
  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    const uint64_t generation = generation_;
    if (++waiting_ == count_) {
      waiting_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return generation_ != generation; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  int count_;
  int waiting_ = 0;
  uint64_t generation_ = 0;
};

// Runs body(rank, context) on world_size threads joined by one barrier; returns each rank's
// exception (null where it returned normally).
inline std::vector<std::exception_ptr> run_ranks(int world_size,
                                                 const std::function<void(int, const SaveContext&)>& body) {
  ThreadBarrier barrier(world_size);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world_size));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world_size; ++rank) {
    threads.emplace_back([&, rank] {
      SaveContext context{rank, world_size, [&barrier] { barrier.arrive_and_wait(); }};
      try {
        body(rank, context);
      } catch (...) {
        errors[static_cast<size_t>(rank)] = std::current_exception();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return errors;
}

inline std::string error_message(const std::exception_ptr& error) {
  if (!error) return "";
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  }
}

// Extracts a row-major box from a full row-major tensor.
template <typename T>
std::vector<T> extract_box(const std::vector<T>& full, const std::vector<int64_t>& shape,
                           const std::vector<int64_t>& offset, const std::vector<int64_t>& box) {
  int64_t count = 1;
  for (int64_t d : box) count *= d;
  std::vector<T> out;
  out.reserve(static_cast<size_t>(count));
  std::vector<int64_t> index(box.size(), 0);
  for (int64_t n = 0; n < count; ++n) {
    int64_t linear = 0;
    for (size_t d = 0; d < shape.size(); ++d) linear = linear * shape[d] + offset[d] + index[d];
    out.push_back(full[static_cast<size_t>(linear)]);
    for (size_t d = box.size(); d-- > 0;) {
      if (++index[d] < box[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

struct QuietLogs {
  QuietLogs() { set_log_level(LogLevel::Error); }
  ~QuietLogs() { set_log_level(LogLevel::Info); }
};

}  // namespace strata::test
