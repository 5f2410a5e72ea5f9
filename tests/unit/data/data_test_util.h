// Helpers shared by the data tests: a self-deleting temporary directory, raw shard writing
// for deliberately malformed files, and capture of an error's message.
#pragma once
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"

namespace strata::test {

class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    const auto ticks = std::chrono::steady_clock::now().time_since_epoch().count();
    path_ = std::filesystem::temp_directory_path() /
            ("strata_data_test_" + std::to_string(::getpid()) + "_" +
             std::to_string(counter++) + "_" + std::to_string(ticks));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// A shard written byte by byte with any header values, to build broken files.
inline void write_raw_shard(const std::string& path, int32_t magic, int32_t version,
                            int32_t declared_tokens, const std::vector<uint16_t>& tokens) {
  int32_t header[256] = {};
  header[0] = magic;
  header[1] = version;
  header[2] = declared_tokens;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  std::fwrite(header, sizeof(header), 1, f);
  if (!tokens.empty()) std::fwrite(tokens.data(), sizeof(uint16_t), tokens.size(), f);
  std::fclose(f);
}

// The message of the UserError `action` throws; any other exception escapes and fails the test.
template <typename F>
std::string user_error_message(F&& action) {
  try {
    action();
  } catch (const UserError& e) {
    return e.what();
  }
  return "<no UserError thrown>";
}

}  // namespace strata::test
