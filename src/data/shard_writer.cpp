// Shard writing: header, tokens converted in fixed-size blocks (so a 100M-token shard never
// needs a second full-size buffer), fsync before the rename so a crash leaves either the
// old file or the complete new one.
#include "data/shard_writer.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "core/error.h"
#include "data/data.h"

namespace strata::data_detail {
namespace {
constexpr size_t kBlockTokens = 1 << 16;
}  // namespace

ShardFileWriter::ShardFileWriter(const std::string& path, int64_t token_count, bool wide)
    : path_(path), tmp_path_(path + ".tmp"), declared_tokens_(token_count), wide_(wide) {
  if (token_count < 0 || token_count > INT32_MAX) {
    throw UserError(path + ": cannot write " + std::to_string(token_count) +
                    " tokens in one shard (the llm.c header holds an int32 count; split the data "
                    "into shards of at most 2147483647 tokens)");
  }
  file_ = std::fopen(tmp_path_.c_str(), "wb");
  if (!file_) fail("cannot create " + tmp_path_);
  int32_t header[256] = {};
  header[0] = wide ? kShardMagicU32 : kShardMagicU16;
  header[1] = wide ? kShardVersionU32 : kShardVersionU16;
  header[2] = static_cast<int32_t>(token_count);
  write_raw(header, sizeof(header));
}

ShardFileWriter::~ShardFileWriter() {
  if (file_) {
    std::fclose(file_);
    std::remove(tmp_path_.c_str());
  }
}

void ShardFileWriter::fail(const std::string& what) const {
  throw UserError(what + ": " + std::strerror(errno) + " (check that the directory exists, is "
                  "writable and the disk is not full)");
}

void ShardFileWriter::write_raw(const void* data, size_t bytes) {
  if (bytes && std::fwrite(data, 1, bytes, file_) != bytes) fail("cannot write " + tmp_path_);
}

void ShardFileWriter::append(const int32_t* tokens, size_t n) {
  if (written_tokens_ + static_cast<int64_t>(n) > declared_tokens_) {
    throw std::logic_error("ShardFileWriter: more tokens appended than declared for " + path_);
  }
  std::vector<uint16_t> narrow;
  std::vector<uint32_t> wide;
  for (size_t begin = 0; begin < n; begin += kBlockTokens) {
    const size_t count = std::min(kBlockTokens, n - begin);
    for (size_t i = 0; i < count; ++i) {
      const int32_t t = tokens[begin + i];
      if (t < 0 || (!wide_ && t > 65535)) {
        throw std::invalid_argument("ShardFileWriter: token " + std::to_string(t) +
                                    " does not fit the shard's token width for " + path_);
      }
    }
    if (wide_) {
      wide.assign(tokens + begin, tokens + begin + count);
      write_raw(wide.data(), count * sizeof(uint32_t));
    } else {
      narrow.assign(tokens + begin, tokens + begin + count);
      write_raw(narrow.data(), count * sizeof(uint16_t));
    }
  }
  written_tokens_ += static_cast<int64_t>(n);
}

void ShardFileWriter::append_bytes(const unsigned char* bytes, size_t n) {
  std::vector<int32_t> block;
  for (size_t begin = 0; begin < n; begin += kBlockTokens) {
    const size_t count = std::min(kBlockTokens, n - begin);
    block.assign(bytes + begin, bytes + begin + count);
    append(block.data(), count);
  }
}

void ShardFileWriter::commit() {
  if (written_tokens_ != declared_tokens_) {
    throw std::logic_error("ShardFileWriter: " + path_ + " declared " +
                           std::to_string(declared_tokens_) + " tokens but got " +
                           std::to_string(written_tokens_));
  }
  if (std::fflush(file_) != 0) fail("cannot write " + tmp_path_);
  if (::fsync(fileno(file_)) != 0) fail("cannot sync " + tmp_path_);
  const int close_status = std::fclose(file_);
  file_ = nullptr;
  if (close_status != 0) {
    const int saved = errno;
    std::remove(tmp_path_.c_str());
    errno = saved;
    fail("cannot close " + tmp_path_);
  }
  if (std::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    const int saved = errno;
    std::remove(tmp_path_.c_str());
    errno = saved;
    fail("cannot rename " + tmp_path_ + " to " + path_);
  }
}

}  // namespace strata::data_detail
