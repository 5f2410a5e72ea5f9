// Token shards: glob expansion, validation of every shard at open (so a bad file fails the
// job at start-up with its name, not hours later), memory mapping and reads of the
// concatenated token stream across shard boundaries.
#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "core/error.h"
#include "data/data.h"
#include "data/mapped_files.h"
#include "data/shard_writer.h"

namespace strata {

struct TokenDataset::Mapping {
  const unsigned char* base = nullptr;
  size_t bytes = 0;
  int token_bytes = 2;
  int64_t count = 0;

  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (!base) return;
    unregister_mapped_file(base);
    ::munmap(const_cast<unsigned char*>(base), bytes);
  }
  const unsigned char* tokens() const { return base + kShardHeaderBytes; }
};

namespace {

// The first token >= vocab_size (position -1 when none) and the largest token of the shard,
// which is what model.vocab_size must exceed. The max-reduction pass vectorizes; the position is
// searched for only when a bad token exists.
struct VocabCheck {
  int64_t first_bad = -1, first_bad_token = 0, largest = 0;
};
template <typename TokenT>
VocabCheck check_vocab(const TokenT* tokens, int64_t count, int64_t vocab_size) {
  TokenT max_token = 0;
  for (int64_t i = 0; i < count; ++i) max_token = std::max(max_token, tokens[i]);
  VocabCheck out;
  out.largest = static_cast<int64_t>(max_token);
  if (count == 0 || out.largest < vocab_size) return out;
  for (int64_t i = 0; i < count; ++i) {
    if (static_cast<int64_t>(tokens[i]) >= vocab_size) {
      out.first_bad = i;
      out.first_bad_token = static_cast<int64_t>(tokens[i]);
      break;
    }
  }
  return out;
}

// The shard file memory-mapped whole, after the checks a file must pass to be mapped.
std::shared_ptr<TokenDataset::Mapping> map_shard_file(const std::string& path, const std::string& key,
                                                      const std::string& where, const std::string& recreate) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw UserError(where + "cannot open: " + std::strerror(errno) +
                    " (check that the file exists and is readable)");
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int saved = errno;
    ::close(fd);
    throw UserError(where + "cannot stat: " + std::strerror(saved));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw UserError(where + "is a directory, not a token shard (" + key +
                    ": give a glob that matches only shard files, e.g. 'dir/train_*.bin')");
  }
  const int64_t file_bytes = static_cast<int64_t>(st.st_size);
  if (file_bytes < kShardHeaderBytes) {
    ::close(fd);
    throw UserError(where + "too small to be a token shard: " + std::to_string(file_bytes) +
                    " bytes, but the header alone is 1024 bytes (" + recreate + ")");
  }
  void* base = ::mmap(nullptr, static_cast<size_t>(file_bytes), PROT_READ, MAP_PRIVATE, fd, 0);
  const int mmap_errno = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (base == MAP_FAILED) {
    throw UserError(where + "cannot memory-map: " + std::strerror(mmap_errno));
  }
  auto mapping = std::make_shared<TokenDataset::Mapping>();
  mapping->base = static_cast<const unsigned char*>(base);
  mapping->bytes = static_cast<size_t>(file_bytes);
  register_mapped_file(base, mapping->bytes, path);
  return mapping;
}

std::shared_ptr<const TokenDataset::Mapping> open_shard(const std::string& path, int vocab_size,
                                                        const std::string& key) {
  const std::string where = key + ": " + path + ": ";
  const std::string recreate =
      "re-create it with `strata data encode` or an llm.c-compatible data script";
  const std::shared_ptr<TokenDataset::Mapping> mapping = map_shard_file(path, key, where, recreate);
  const int64_t file_bytes = static_cast<int64_t>(mapping->bytes);

  int32_t header[3];
  std::memcpy(header, mapping->base, sizeof(header));
  const int32_t magic = header[0], version = header[1], count = header[2];
  if (magic == kShardMagicU16) {
    mapping->token_bytes = 2;
  } else if (magic == kShardMagicU32) {
    mapping->token_bytes = 4;
  } else {
    throw UserError(where + "bad magic " + std::to_string(magic) + " (expected " +
                    std::to_string(kShardMagicU16) + " for uint16 or " +
                    std::to_string(kShardMagicU32) + " for uint32 tokens; is this an llm.c "
                    "token shard? " + recreate + ")");
  }
  const int32_t expected_version = mapping->token_bytes == 2 ? kShardVersionU16 : kShardVersionU32;
  if (version != expected_version) {
    throw UserError(where + "unsupported version " + std::to_string(version) + " for magic " +
                    std::to_string(magic) + " (expected version " +
                    std::to_string(expected_version) + "; " + recreate + ")");
  }
  if (count < 0) {
    throw UserError(where + "corrupt header: negative token count " + std::to_string(count) +
                    " (" + recreate + ")");
  }
  mapping->count = count;
  const int64_t expected_bytes = kShardHeaderBytes + int64_t{mapping->token_bytes} * count;
  if (file_bytes != expected_bytes) {
    const std::string sizes = "header says " + std::to_string(count) + " tokens (" +
                              std::to_string(expected_bytes) + " bytes) but file has " +
                              std::to_string(file_bytes) + " bytes";
    if (file_bytes < expected_bytes) {
      throw UserError(where + "truncated: " + sizes + " (the file was cut short, e.g. by an "
                      "interrupted copy; " + recreate + ")");
    }
    throw UserError(where + "size mismatch: " + sizes + " (unexpected data after the tokens; " +
                    recreate + ")");
  }

  // The header is 1024 bytes into a page-aligned mapping, so the token array is aligned.
  const VocabCheck vocab =
      mapping->token_bytes == 2
          ? check_vocab(reinterpret_cast<const uint16_t*>(mapping->tokens()), count, vocab_size)
          : check_vocab(reinterpret_cast<const uint32_t*>(mapping->tokens()), count, vocab_size);
  if (vocab.first_bad >= 0) {
    // `strata data decode` opens shards under its own key, where no model.vocab_size applies.
    // Data a config names (data.train, data.val) is for a model yet to be built, whose vocabulary the
    // config may grow; data a command's flag names (strata eval --data) is for a trained model.
    const std::string advice =
        key.rfind("data decode", 0) == 0
            ? "the shards were encoded with a larger vocabulary: decode them with the tokenizer that encoded them "
              "(--tokenizer; without it ids are bytes, 0-255)"
        : key.rfind("data.", 0) != 0
            ? "the data was encoded with another tokenizer than the model's: re-encode it with the model's"
            : "the data was encoded with another tokenizer: re-encode it for this model, or set model.vocab_size to "
              "at least " + std::to_string(vocab.largest + 1) + ", the shard's largest token + 1";
    throw UserError(where + "token " + std::to_string(vocab.first_bad_token) + " at position " +
                    std::to_string(vocab.first_bad) + " is \u2265 vocab_size " + std::to_string(vocab_size) + " (" +
                    advice + ")");
  }
  return mapping;
}

std::vector<std::string> expand_glob(const std::string& pattern, const std::string& key) {
  if (pattern.empty()) {
    throw UserError(key + " is empty: set it to a glob pattern of token shards, e.g. "
                    "'data/train_*.bin'");
  }
  glob_t matches{};
  const int status = ::glob(pattern.c_str(), 0, nullptr, &matches);
  std::vector<std::string> paths;
  if (status == 0) {
    for (size_t i = 0; i < matches.gl_pathc; ++i) paths.emplace_back(matches.gl_pathv[i]);
  }
  ::globfree(&matches);
  if (status == GLOB_NOMATCH || (status == 0 && paths.empty())) {
    std::error_code ec;
    const std::string cwd = std::filesystem::current_path(ec).string();
    throw UserError(key + ": no files match '" + pattern + "' (check the path" +
                    (pattern[0] == '/' ? std::string() : "; relative paths start from " + cwd) +
                    "; `strata data encode` creates shards)");
  }
  if (status != 0) {
    throw UserError(key + ": cannot expand '" + pattern + "': " +
                    (status == GLOB_NOSPACE ? "out of memory" : "a directory could not be read"));
  }
  std::sort(paths.begin(), paths.end());  // byte order, independent of the locale
  return paths;
}

}  // namespace

TokenDataset TokenDataset::open(const std::string& glob_pattern, int vocab_size,
                                const std::string& key) {
  if (vocab_size <= 0) {
    throw std::invalid_argument("TokenDataset::open: vocab_size must be positive");
  }
  TokenDataset dataset;
  dataset.key_ = key;
  dataset.pattern_ = glob_pattern;
  for (const std::string& path : expand_glob(glob_pattern, key)) {
    auto mapping = open_shard(path, vocab_size, key);
    dataset.shards_.push_back(ShardInfo{path, mapping->count, mapping->token_bytes});
    dataset.shard_first_token_.push_back(dataset.num_tokens_);
    dataset.num_tokens_ += mapping->count;
    dataset.mappings_.push_back(std::move(mapping));
  }
  return dataset;
}

void TokenDataset::read(int64_t offset, int64_t n, int32_t* out) const {
  if (offset < 0 || n < 0 || offset + n > num_tokens_) {
    throw std::out_of_range("TokenDataset::read: tokens [" + std::to_string(offset) + ", " +
                            std::to_string(offset + n) + ") outside [0, " +
                            std::to_string(num_tokens_) + ") of " + key_);
  }
  // Last shard whose first token is <= offset; empty shards are skipped by the loop.
  size_t shard = static_cast<size_t>(
      std::upper_bound(shard_first_token_.begin(), shard_first_token_.end(), offset) -
      shard_first_token_.begin() - 1);
  while (n > 0) {
    const Mapping& m = *mappings_[shard];
    const int64_t local = offset - shard_first_token_[shard];
    const int64_t take = std::min(n, m.count - local);
    if (take > 0) {
      if (m.token_bytes == 2) {
        const uint16_t* src = reinterpret_cast<const uint16_t*>(m.tokens()) + local;
        std::copy(src, src + take, out);
      } else {
        const uint32_t* src = reinterpret_cast<const uint32_t*>(m.tokens()) + local;
        std::transform(src, src + take, out, [](uint32_t t) { return static_cast<int32_t>(t); });
      }
      out += take;
      offset += take;
      n -= take;
    }
    ++shard;
  }
}

std::string TokenDataset::describe() const {
  constexpr size_t kListed = 3;
  std::string text = key_ + " ('" + pattern_ + "': " + std::to_string(shards_.size()) +
                     (shards_.size() == 1 ? " shard: " : " shards: ");
  for (size_t i = 0; i < shards_.size() && i < kListed; ++i) {
    text += (i ? ", " : "") + shards_[i].path;
  }
  if (shards_.size() > kListed) text += ", ... and " + std::to_string(shards_.size() - kListed) + " more";
  return text + ")";
}

void write_token_shard(const std::string& path, const std::vector<int32_t>& tokens, bool wide) {
  for (const int32_t t : tokens) {
    if (t < 0) {
      throw std::invalid_argument("write_token_shard: negative token id " + std::to_string(t));
    }
    if (t > 65535) wide = true;
  }
  data_detail::ShardFileWriter writer(path, static_cast<int64_t>(tokens.size()), wide);
  writer.append(tokens.data(), tokens.size());
  writer.commit();
}

}  // namespace strata
