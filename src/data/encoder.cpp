// `strata data encode`: text files -> byte-level token shards (train_NNNNNN.bin, and the tail
// of the corpus as val_NNNNNN.bin). The text is held in memory once as bytes; tokens are
// converted per block while writing, so peak memory is about the corpus size.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <string_view>

#include "core/error.h"
#include "core/log.h"
#include "data/data.h"
#include "data/shard_writer.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

std::string shard_name(const char* prefix, int64_t index) {
  char name[64];
  std::snprintf(name, sizeof(name), "%s_%06lld.bin", prefix, static_cast<long long>(index));
  return name;
}

void validate(const EncodeOptions& options) {
  std::vector<std::string> errors;
  if (options.inputs.empty()) errors.push_back("data encode: no input files given (pass one or more text files)");
  if (options.out_dir.empty()) errors.push_back("data encode: the output directory is empty (pass --out DIR)");
  if (!(options.val_fraction >= 0.0 && options.val_fraction <= 0.5)) {
    errors.push_back("data encode: val_fraction " + std::to_string(options.val_fraction) +
                     " is outside [0, 0.5] (use e.g. 0.01; 0 writes no val shard)");
  }
  if (options.shard_tokens < 1 || options.shard_tokens > INT32_MAX) {
    errors.push_back("data encode: shard_tokens " + std::to_string(options.shard_tokens) +
                     " is outside [1, 2147483647] (the llm.c header stores an int32 count)");
  }
  if (errors.size() == 1) throw UserError(errors.front());
  if (!errors.empty()) throw UserErrors(errors);
}

void append_file(const std::string& path, std::string& text) {
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    throw UserError("data encode: input file '" + path + "' does not exist (check the path)");
  }
  if (fs::is_directory(path, ec)) {
    throw UserError("data encode: input '" + path + "' is a directory (pass text files)");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw UserError("data encode: cannot open input file '" + path + "': " + std::strerror(errno));
  }
  const size_t before = text.size();
  const auto size = fs::file_size(path, ec);
  if (!ec) text.reserve(before + static_cast<size_t>(size));
  text.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (in.bad()) throw UserError("data encode: error reading '" + path + "'");
  log_info("data encode: read {} ({} bytes)", path, text.size() - before);
}

// True for names this encoder writes: (train|val)_DDDDDD.bin, or a leftover .tmp of one.
bool is_encoder_shard_name(const std::string& name) {
  std::string_view rest(name);
  if (rest.substr(0, 6) == "train_") {
    rest.remove_prefix(6);
  } else if (rest.substr(0, 4) == "val_") {
    rest.remove_prefix(4);
  } else {
    return false;
  }
  if (rest.size() < 6) return false;
  for (size_t i = 0; i < 6; ++i) {
    if (rest[i] < '0' || rest[i] > '9') return false;
  }
  rest.remove_prefix(6);
  return rest == ".bin" || rest == ".bin.tmp";
}

// Shards of an earlier run with more shards would otherwise be picked up by 'train_*.bin'.
void remove_stale_shards(const fs::path& dir, const std::set<std::string>& written) {
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && is_encoder_shard_name(name) && !written.count(name)) {
      std::error_code ec;
      fs::remove(entry.path(), ec);
      if (ec) {
        throw UserError("data encode: cannot remove stale shard " + entry.path().string() + ": " +
                        ec.message() + " (delete it by hand, or use an empty output directory)");
      }
      log_info("data encode: removed stale shard {} from an earlier run", entry.path().string());
    }
  }
}

void write_byte_shard(const std::string& path, const std::string& text, int64_t first, int64_t count) {
  data_detail::ShardFileWriter writer(path, count, /*wide=*/false);
  writer.append_bytes(reinterpret_cast<const unsigned char*>(text.data()) + first,
                      static_cast<size_t>(count));
  writer.commit();
}

}  // namespace

EncodeSummary encode_text_files(const EncodeOptions& options) {
  validate(options);
  std::string text;
  for (size_t i = 0; i < options.inputs.size(); ++i) {
    if (i > 0) text.push_back('\n');
    append_file(options.inputs[i], text);
  }
  const auto total = static_cast<int64_t>(text.size());
  if (total == 0) throw UserError("data encode: the input files are empty: there is nothing to encode");

  int64_t val_tokens = 0;
  if (options.val_fraction > 0) {
    if (total < 2) {
      throw UserError("data encode: 1 byte of input cannot be split into train and val (add text "
                      "or set the val fraction to 0)");
    }
    // At least one token on each side, so neither split is silently empty.
    val_tokens = std::llround(static_cast<double>(total) * options.val_fraction);
    val_tokens = std::min(std::max<int64_t>(val_tokens, 1), total - 1);
  }
  const int64_t train_tokens = total - val_tokens;

  const fs::path dir(options.out_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) {
    throw UserError("data encode: cannot create output directory '" + options.out_dir + "': " +
                    (ec ? ec.message() : std::string("a file of that name exists")));
  }

  EncodeSummary summary;
  summary.input_bytes = total;
  summary.train_tokens = train_tokens;
  summary.val_tokens = val_tokens;
  std::set<std::string> written;
  // Train and val shards alike hold at most shard_tokens tokens each.
  auto write_split = [&](const char* prefix, int64_t first_token, int64_t tokens) {
    std::vector<std::string> paths;
    const int64_t num_shards = (tokens + options.shard_tokens - 1) / options.shard_tokens;
    for (int64_t s = 0; s < num_shards; ++s) {
      const int64_t first = s * options.shard_tokens;
      const int64_t count = std::min(options.shard_tokens, tokens - first);
      const std::string name = shard_name(prefix, s);
      const std::string path = (dir / name).string();
      write_byte_shard(path, text, first_token + first, count);
      written.insert(name);
      paths.push_back(path);
      log_info("data encode: wrote {} ({} tokens, {} shard {}/{})", path, count, prefix, s + 1,
               num_shards);
    }
    return paths;
  };
  summary.train_shards = write_split("train", 0, train_tokens);
  summary.val_shards = write_split("val", train_tokens, val_tokens);
  remove_stale_shards(dir, written);
  log_info("data encode: {} bytes -> {} train tokens in {} shard(s), {} val tokens in {} shard(s) "
           "(byte tokenizer, vocab {})",
           total, train_tokens, summary.train_shards.size(), val_tokens, summary.val_shards.size(),
           kByteVocabSize);
  return summary;
}

}  // namespace strata
