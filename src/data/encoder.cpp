// `strata data encode`: text files -> token shards (train_NNNNNN.bin, and the tail of the corpus
// as val_NNNNNN.bin), byte by byte (vocabulary 256) or with a GPT-2 BPE tokenizer (documents after
// end-of-text tokens; bpe_encode.cpp). The text is held in memory once; byte tokens are converted
// per block while writing, BPE tokens held as int32 (about the text's size again).
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>

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
  if (!options.document_delimiter.empty() && options.tokenizer.empty())
    errors.push_back("data encode: --split-on splits documents for a BPE tokenizer's end-of-text tokens; give --tokenizer");
  if (options.threads < 0) errors.push_back("data encode: --threads must be >= 0 (0: every core)");
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

// True when the file opens with a shard header's magic (a .tmp leftover need not: it was cut short).
bool starts_like_a_shard(const fs::path& path) {
  if (path.extension() == ".tmp") return true;
  std::ifstream in(path, std::ios::binary);
  int32_t magic = 0;
  in.read(reinterpret_cast<char*>(&magic), sizeof magic);
  return in.gcount() == sizeof magic && (magic == kShardMagicU16 || magic == kShardMagicU32);
}

// Shards of an earlier run with more shards would otherwise be picked up by 'train_*.bin'. A file
// named like one that is no shard is the user's: it is not deleted, and it would break the glob.
void remove_stale_shards(const fs::path& dir, const std::set<std::string>& written) {
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && is_encoder_shard_name(name) && !written.count(name)) {
      if (!starts_like_a_shard(entry.path()))
        throw UserError("data encode: " + entry.path().string() +
                        " is named like a token shard but is not one (no shard header), and a train_*.bin or "
                        "val_*.bin glob would read it: move it out of " + dir.string() +
                        ", or write the shards to an empty directory");
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

// What the shards hold: the text's bytes (vocabulary 256) or the tokens of a BPE tokenizer, in
// the pieces the encoder produced them in.
struct TokenStream {
  const std::string* bytes = nullptr;
  const std::vector<std::vector<int32_t>>* pieces = nullptr;
  bool wide = false;
  int64_t size() const {
    if (!pieces) return static_cast<int64_t>(bytes->size());
    int64_t total = 0;
    for (const auto& p : *pieces) total += static_cast<int64_t>(p.size());
    return total;
  }
  void write(const std::string& path, int64_t first, int64_t count) const {
    data_detail::ShardFileWriter writer(path, count, wide);
    if (!pieces) {
      writer.append_bytes(reinterpret_cast<const unsigned char*>(bytes->data()) + first, static_cast<size_t>(count));
    } else {
      int64_t start = 0;  // of the piece below
      for (const auto& p : *pieces) {
        const int64_t n = static_cast<int64_t>(p.size());
        const int64_t from = std::max(first, start), to = std::min(first + count, start + n);
        if (from < to) writer.append(p.data() + (from - start), static_cast<size_t>(to - from));
        start += n;
      }
    }
    writer.commit();
  }
};

// The input files as one text: joined by newlines for the byte tokenizer; for a BPE tokenizer
// each file (or each part between delimiters) a document of its own, its start in `starts`.
std::string read_inputs(const EncodeOptions& options, std::vector<size_t>& starts) {
  std::string text;
  const std::string& delimiter = options.document_delimiter;
  for (size_t i = 0; i < options.inputs.size(); ++i) {
    if (options.tokenizer.empty() || delimiter.empty()) {
      if (options.tokenizer.empty() && i > 0) text.push_back('\n');
      const size_t file_start = text.size();
      append_file(options.inputs[i], text);
      if (!options.tokenizer.empty() && text.size() > file_start) starts.push_back(file_start);
      continue;
    }
    std::string file;
    append_file(options.inputs[i], file);
    if (file.find(delimiter) == std::string::npos && file.size() > delimiter.size()) {
      log_warn("data encode: --split-on does not occur in {}: the whole file is one document", options.inputs[i]);
    }
    // The delimiters themselves are dropped: end-of-text tokens join the documents instead.
    for (size_t doc = 0; doc < file.size();) {
      const size_t at = std::min(file.find(delimiter, doc), file.size());
      if (at > doc) {
        starts.push_back(text.size());
        text.append(file, doc, at - doc);
      }
      doc = at == file.size() ? at : at + delimiter.size();
    }
  }
  return text;
}

}  // namespace

std::string unescape_delimiter(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\') {
      out.push_back(text[i]);
      continue;
    }
    const char next = i + 1 < text.size() ? text[i + 1] : '\0';
    switch (next) {
      case 'n': out.push_back('\n'); break;
      case 'r': out.push_back('\r'); break;
      case 't': out.push_back('\t'); break;
      case '\\': out.push_back('\\'); break;
      default:
        // A backslash taken as itself would make '\x' or a mistyped escape a separator that
        // never occurs, and the whole file one document.
        throw UserError(fmt::format("'\\{}' in '{}' is not an escape it knows (\\n, \\r, \\t, \\\\)",
                                    next == '\0' ? std::string() : std::string(1, next), text));
    }
    ++i;
  }
  return out;
}

EncodeSummary encode_text_files(const EncodeOptions& options) {
  validate(options);
  std::optional<BpeTokenizer> tokenizer;
  if (!options.tokenizer.empty()) tokenizer = BpeTokenizer::load(options.tokenizer, "data encode: --tokenizer");
  if (tokenizer && tokenizer->end_of_text() < 0)
    throw UserError("data encode: --tokenizer " + tokenizer->source() +
                    ": its vocabulary has no <|endoftext|> token to separate the documents");
  std::vector<size_t> starts;
  const std::string text = read_inputs(options, starts);
  if (text.empty()) throw UserError("data encode: the input files are empty: there is nothing to encode");
  std::vector<std::vector<int32_t>> ids;
  TokenStream stream{&text, nullptr, false};
  if (tokenizer) {
    const int threads = options.threads > 0 ? options.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    ids = bpe_encode_documents(*tokenizer, text, starts, threads);
    stream = TokenStream{nullptr, &ids, tokenizer->vocab_size() > 65536};
  }
  const int64_t total = stream.size();

  int64_t val_tokens = 0;
  if (options.val_fraction > 0) {
    if (total < 2) {
      throw UserError("data encode: 1 token of input cannot be split into train and val (add text "
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
  summary.input_bytes = static_cast<int64_t>(text.size());
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
      stream.write(path, first_token + first, count);
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
  log_info("data encode: {} bytes -> {} train tokens in {} shard(s), {} val tokens in {} shard(s) ({})",
           text.size(), train_tokens, summary.train_shards.size(), val_tokens, summary.val_shards.size(),
           tokenizer ? fmt::format("{} document(s), GPT-2 BPE from {}, vocab {}, {} tokens", starts.size(),
                                   tokenizer->source(), tokenizer->vocab_size(), stream.wide ? "uint32" : "uint16")
                     : fmt::format("byte tokenizer, vocab {}", kByteVocabSize));
  return summary;
}

}  // namespace strata
