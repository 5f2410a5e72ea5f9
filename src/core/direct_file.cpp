// DirectFile: O_DIRECT pread/pwrite of offloaded state, one thread per request (requests are
// pieces of megabytes, so a thread's start costs nothing beside the transfer).
#include "core/direct_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>

#include <fmt/core.h>

#include "core/error.h"

namespace strata {
namespace {

// Bytes in the unit that shows them: a small file system's numbers are not all "0.00 GiB".
std::string readable(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes >= (int64_t{1} << 30)) return fmt::format("{:.2f} GiB", b / (1 << 30));
  if (bytes >= (int64_t{1} << 20)) return fmt::format("{:.1f} MiB", b / (1 << 20));
  return fmt::format("{:.1f} KiB", b / 1024);
}

// Transfers all `bytes` at `offset`, resuming after short transfers and interrupts.
void transfer(int fd, const std::string& path, bool writing, int64_t offset, char* buffer, size_t bytes) {
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = writing ? ::pwrite(fd, buffer + done, bytes - done, static_cast<off_t>(offset) + done)
                              : ::pread(fd, buffer + done, bytes - done, static_cast<off_t>(offset) + done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      throw std::runtime_error(fmt::format("offload file {}: {} of {} bytes at {} failed: {}", path,
                                           writing ? "writing" : "reading", bytes, offset,
                                           n < 0 ? std::strerror(errno) : "end of file"));
    }
    done += static_cast<size_t>(n);
  }
}

}  // namespace

void AlignedHost::operator()(void* p) const { std::free(p); }

AlignedBuffer allocate_aligned(size_t bytes) {
  const size_t rounded = static_cast<size_t>(align_up(static_cast<int64_t>(std::max<size_t>(bytes, 1))));
  void* p = std::aligned_alloc(kDirectAlign, rounded);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, rounded);
  return AlignedBuffer(static_cast<char*>(p));
}

DirectFile::DirectFile(const std::string& dir, const std::string& what, int64_t bytes, const std::string& setting) {
  struct stat st {};
  if (dir.empty() || ::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw UserError(fmt::format("{} '{}' is not a directory: create it, or give a directory on a local disk", setting,
                                dir));
  // A name no other file has: the PID alone repeats across containers, and a file system that
  // refuses O_DIRECT may have created the file before refusing.
  std::random_device entropy;
  for (int attempt = 0; attempt < 16; ++attempt) {
    path_ = fmt::format("{}/strata-{}-{}-{:08x}.swp", dir, what, static_cast<long>(::getpid()), entropy());
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_DIRECT | O_CLOEXEC, 0600);
    if (fd_ >= 0 || errno != EEXIST) break;
  }
  if (fd_ < 0 && errno == EINVAL) {
    const int open_error = errno;
    ::unlink(path_.c_str());  // some file systems (ramfs) create it, then refuse the flag
    errno = open_error;
    throw UserError(fmt::format("{} '{}': its file system does not support O_DIRECT, which offloading to nvme reads "
                                "and writes with; use a directory on a local disk",
                                setting, dir));
  }
  if (fd_ < 0)
    throw UserError(fmt::format("{} '{}': cannot create {}: {}", setting, dir, path_, std::strerror(errno)));
  ::unlink(path_.c_str());  // the name goes now; the file lives while it is open
  struct statvfs fs {};
  const int64_t free_bytes =
      ::fstatvfs(fd_, &fs) == 0 ? static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize) : -1;
  const int reserved = bytes > 0 ? ::posix_fallocate(fd_, 0, static_cast<off_t>(bytes)) : 0;
  if (reserved != 0) {
    ::close(fd_);
    fd_ = -1;
    throw UserError(fmt::format("{} '{}': cannot reserve {} for the offloaded {} ({} free; the ranks that share "
                                "this file system reserve a file each): {}",
                                setting, dir, readable(bytes), what,
                                free_bytes >= 0 ? readable(free_bytes) : std::string("unknown"), std::strerror(reserved)));
  }
}

DirectFile::~DirectFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::future<void> DirectFile::read(int64_t offset, void* buffer, size_t bytes) const {
  const int fd = fd_;
  const std::string path = path_;
  return std::async(std::launch::async, [=] { transfer(fd, path, false, offset, static_cast<char*>(buffer), bytes); });
}

std::future<void> DirectFile::write(int64_t offset, const void* buffer, size_t bytes) const {
  const int fd = fd_;
  const std::string path = path_;
  return std::async(std::launch::async,
                    [=] { transfer(fd, path, true, offset, static_cast<char*>(const_cast<void*>(buffer)), bytes); });
}

}  // namespace strata
