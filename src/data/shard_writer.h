// Streaming writer of one llm.c token shard, shared by write_token_shard and the encoder.
// Internal to src/data: the token count is fixed up front (it goes in the header) and the
// file only appears under its final name once commit() has written and synced all of it.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>

namespace strata::data_detail {

class ShardFileWriter {
 public:
  // wide: uint32 tokens (magic 20240801 v7), else uint16 (magic 20240520 v1).
  ShardFileWriter(const std::string& path, int64_t token_count, bool wide);
  ~ShardFileWriter();  // an uncommitted writer removes its temporary file
  ShardFileWriter(const ShardFileWriter&) = delete;
  ShardFileWriter& operator=(const ShardFileWriter&) = delete;

  void append(const int32_t* tokens, size_t n);
  void append_bytes(const unsigned char* bytes, size_t n);  // each byte is one token
  void commit();  // checks the count, fsyncs, renames path.tmp -> path

 private:
  void write_raw(const void* data, size_t bytes);
  [[noreturn]] void fail(const std::string& what) const;

  std::string path_;
  std::string tmp_path_;
  std::FILE* file_ = nullptr;
  int64_t declared_tokens_;
  int64_t written_tokens_ = 0;
  bool wide_;
};

}  // namespace strata::data_detail
