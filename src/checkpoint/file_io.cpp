// POSIX file helpers for checkpoints. Reads and writes loop until complete because the kernel
// may split large transfers; every failure names the path and the system's reason.
#include "checkpoint/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace strata {
namespace ckpt {
namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw UserError(path + ": " + what + ": " + std::strerror(errno));
}

}  // namespace

FileHandle FileHandle::open_read(const std::string& path) {
  FileHandle file;
  file.path_ = path;
  file.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (file.fd_ < 0) fail(path, "cannot open for reading");
  return file;
}

FileHandle FileHandle::create_write(const std::string& path) {
  FileHandle file;
  file.path_ = path;
  file.fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (file.fd_ < 0) fail(path, "cannot create");
  return file;
}

FileHandle::FileHandle(FileHandle&& other) noexcept : fd_(other.fd_), path_(std::move(other.path_)) { other.fd_ = -1; }

FileHandle& FileHandle::operator=(FileHandle&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    path_ = std::move(other.path_);
    other.fd_ = -1;
  }
  return *this;
}

FileHandle::~FileHandle() {
  if (fd_ >= 0) ::close(fd_);
}

uint64_t FileHandle::size() const {
  struct stat st;
  if (::fstat(fd_, &st) != 0) fail(path_, "cannot stat");
  return static_cast<uint64_t>(st.st_size);
}

void FileHandle::write_all(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t done = ::write(fd_, p, n);
    if (done < 0) {
      if (errno == EINTR) continue;
      fail(path_, "write failed");
    }
    p += done;
    n -= static_cast<size_t>(done);
  }
}

void FileHandle::pread_all(void* dst, size_t n, uint64_t offset) const { pread_exact(fd_, path_, dst, n, offset); }

void pread_exact(int fd, const std::string& path, void* dst, size_t n, uint64_t offset) {
  char* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t done = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (done < 0) {
      if (errno == EINTR) continue;
      fail(path, "read failed");
    }
    if (done == 0) throw UserError(path + ": file is truncated (unexpected end of file while reading)");
    p += done;
    n -= static_cast<size_t>(done);
    offset += static_cast<uint64_t>(done);
  }
}

void FileHandle::sync() {
  if (::fsync(fd_) != 0) fail(path_, "fsync failed");
}

void FileHandle::close() {
  if (fd_ < 0) return;
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail(path_, "close failed");
}

int FileHandle::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

void fsync_directory(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail(path, "cannot open directory to sync it");
  // Some filesystems cannot fsync a directory (EINVAL); their renames are durable anyway.
  if (::fsync(fd) != 0 && errno != EINVAL) {
    const int saved = errno;
    ::close(fd);
    errno = saved;
    fail(path, "fsync of directory failed");
  }
  ::close(fd);
}

void write_file_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  FileHandle file = FileHandle::create_write(tmp);
  file.write_all(text.data(), text.size());
  file.sync();
  file.close();
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail(path, "cannot rename " + tmp + " over it");
  fsync_directory(parent_directory(path));
}

std::string read_text_file(const std::string& path) {
  FileHandle file = FileHandle::open_read(path);
  std::string text(file.size(), '\0');
  file.pread_all(text.data(), text.size(), 0);
  return text;
}

bool path_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

bool is_directory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string parent_directory(const std::string& path) {
  std::string trimmed = path;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  const size_t slash = trimmed.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return trimmed.substr(0, slash);
}

std::string join_path(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  if (dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

std::string hex64(uint64_t value) {
  static const char digits[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i) {
    out[static_cast<size_t>(i)] = digits[value & 0xf];
    value >>= 4;
  }
  return out;
}

bool parse_hex64(const std::string& text, uint64_t* value) {
  if (text.size() != 16) return false;
  uint64_t v = 0;
  for (char c : text) {
    int d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else
      return false;
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  *value = v;
  return true;
}

}  // namespace ckpt
}  // namespace strata
