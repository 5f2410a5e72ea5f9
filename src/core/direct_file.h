// Part of src/core's public header (core.h): a scratch file on a fast local disk (offloaded state),
// read and written with O_DIRECT in 4096-byte-aligned pieces, each request on a thread of its
// own so that reads ahead and writes behind overlap the caller's work.
#pragma once
#include <cstddef>
#include <cstdint>
#include <future>
#include <memory>
#include <string>

namespace strata {

constexpr size_t kDirectAlign = 4096;  // offsets, sizes and buffers of O_DIRECT I/O

// Host memory aligned for O_DIRECT (zero-filled), freed by its owner.
struct AlignedHost {
  void operator()(void* p) const;
};
using AlignedBuffer = std::unique_ptr<char, AlignedHost>;
AlignedBuffer allocate_aligned(size_t bytes);

class DirectFile {
 public:
  // Creates a file of `bytes` (reserved on the disk, read back as zeros before it is written)
  // in directory `dir`, named after `what` and this process, and removes its name at once:
  // the file lives while it is open, so nothing is left behind however the process ends, and no
  // earlier run's file is ever read. A missing or unwritable directory, a file system without
  // O_DIRECT, or too little free space: UserError naming `setting` (the config key or option
  // that gave `dir`), the path and the numbers.
  DirectFile(const std::string& dir, const std::string& what, int64_t bytes, const std::string& setting = "nvme_path");
  ~DirectFile();
  DirectFile(const DirectFile&) = delete;
  DirectFile& operator=(const DirectFile&) = delete;
  // Asynchronous whole transfers; offset, bytes and buffer aligned to kDirectAlign. get() on the
  // future rethrows an I/O error (std::runtime_error naming the file).
  std::future<void> read(int64_t offset, void* buffer, size_t bytes) const;
  std::future<void> write(int64_t offset, const void* buffer, size_t bytes) const;
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

inline int64_t align_up(int64_t bytes) {
  const int64_t a = static_cast<int64_t>(kDirectAlign);
  return (bytes + a - 1) / a * a;
}

}  // namespace strata
