// Internal to src/checkpoint: POSIX file helpers with the durability steps checkpoints need
// (fsync of files and directories, atomic replace by rename). Every failure is a UserError
// that names the path and the system's reason.
#pragma once
#include <cstdint>
#include <string>

namespace strata::ckpt {

// An open file descriptor, closed on destruction.
class FileHandle {
 public:
  static FileHandle open_read(const std::string& path);
  static FileHandle create_write(const std::string& path);  // truncates
  FileHandle() = default;
  FileHandle(FileHandle&& other) noexcept;
  FileHandle& operator=(FileHandle&& other) noexcept;
  FileHandle(const FileHandle&) = delete;
  FileHandle& operator=(const FileHandle&) = delete;
  ~FileHandle();

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  uint64_t size() const;
  void write_all(const void* data, size_t n);
  void pread_all(void* dst, size_t n, uint64_t offset) const;  // UserError on a short read
  void sync();
  void close();   // reports errors close() finds (delayed write failures)
  int release();  // gives up ownership of the descriptor

 private:
  int fd_ = -1;
  std::string path_;
};

// Reads exactly n bytes at offset; UserError naming path on a short read or an I/O error.
void pread_exact(int fd, const std::string& path, void* dst, size_t n, uint64_t offset);
void fsync_directory(const std::string& path);
// Writes text to path + ".tmp", fsyncs, renames over path, fsyncs the parent directory.
void write_file_atomic(const std::string& path, const std::string& text);
std::string read_text_file(const std::string& path);
bool path_exists(const std::string& path);
bool is_directory(const std::string& path);
std::string parent_directory(const std::string& path);
std::string join_path(const std::string& dir, const std::string& name);

std::string hex64(uint64_t value);                           // 16 lowercase hex digits
bool parse_hex64(const std::string& text, uint64_t* value);  // inverse of hex64

}  // namespace strata::ckpt
