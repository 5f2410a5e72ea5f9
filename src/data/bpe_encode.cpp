// `strata data encode --tokenizer`: documents -> GPT-2 BPE tokens, each document after an
// end-of-text token as llm.c's data scripts lay them out (and `strata data decode`, back).
// Documents are cut into chunks at places where GPT-2's pattern splits the same way whatever
// follows (after a newline between two ASCII non-space characters), and the chunks are encoded on
// several threads; the tokens stay in input order, so the output does not depend on the thread count.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <thread>

#include "core/error.h"
#include "core/log.h"
#include "data/data.h"

namespace strata {
namespace {

constexpr size_t kChunkBytes = size_t{1} << 20;

bool ascii_non_space(char c) { return c > ' ' && c < 0x7F; }

// Cuts [begin, end) of text into pieces of about kChunkBytes at safe places.
void cut_document(std::string_view text, size_t begin, size_t end, std::vector<std::string_view>& chunks) {
  while (end - begin > kChunkBytes) {
    size_t cut = begin + kChunkBytes;
    while (cut < end && !(text[cut - 1] == '\n' && ascii_non_space(text[cut - 2]) && ascii_non_space(text[cut]))) ++cut;
    chunks.push_back(text.substr(begin, cut - begin));
    begin = cut;
  }
  chunks.push_back(text.substr(begin, end - begin));
}

// Progress on long inputs: bytes, rate, tokens and the time left, about once a second; and the
// rate and time of the whole encoding at the end.
class Progress {
 public:
  explicit Progress(int64_t total) : total_(total), start_(std::chrono::steady_clock::now()), last_(start_) {}
  void done(int64_t bytes, int64_t tokens) {
    bytes_ += bytes;
    tokens_ += tokens;
  }
  void report_if_due(bool final) {
    const auto now = std::chrono::steady_clock::now();
    // A line a second on long inputs; the last one always (it gives the rate).
    if (!final && (total_ < (int64_t{8} << 20) || now - last_ < std::chrono::seconds(1))) return;
    last_ = now;
    const double s = std::chrono::duration<double>(now - start_).count();
    const double rate = static_cast<double>(bytes_) / std::max(s, 1e-9);
    log_info("data encode: {:.1f} of {:.1f} MB, {:.1f} MB/s, {} tokens, {}", bytes_ / 1e6, total_ / 1e6, rate / 1e6,
             tokens_.load(), final ? fmt::format("{:.1f} s", s)
                                   : fmt::format("ETA {:.0f} s", (total_ - bytes_) / std::max(rate, 1.0)));
  }

 private:
  int64_t total_;
  std::atomic<int64_t> bytes_{0}, tokens_{0};
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace

std::vector<std::vector<int32_t>> bpe_encode_documents(const BpeTokenizer& tokenizer, std::string_view text,
                                                       const std::vector<size_t>& document_starts, int threads) {
  std::vector<std::string_view> chunks;
  std::vector<bool> opens_document;
  for (size_t d = 0; d < document_starts.size(); ++d) {
    const size_t end = d + 1 < document_starts.size() ? document_starts[d + 1] : text.size();
    const size_t before = chunks.size();
    cut_document(text, document_starts[d], end, chunks);
    opens_document.resize(chunks.size(), false);
    opens_document[before] = true;
  }
  std::vector<std::vector<int32_t>> encoded(chunks.size());
  Progress progress(static_cast<int64_t>(text.size()));
  std::atomic<size_t> next{0};
  const auto encode_chunk = [&](size_t c) {
    if (opens_document[c]) encoded[c].push_back(tokenizer.end_of_text());
    tokenizer.encode(chunks[c], encoded[c]);
    progress.done(static_cast<int64_t>(chunks[c].size()), static_cast<int64_t>(encoded[c].size()));
  };
  const auto work = [&] {
    for (size_t c; (c = next.fetch_add(1)) < chunks.size();) encode_chunk(c);
  };
  const int workers = std::max(1, std::min<int>(threads, static_cast<int>(chunks.size())));
  std::vector<std::thread> pool;
  for (int w = 1; w < workers; ++w) pool.emplace_back(work);
  // The calling thread encodes too, and reports between its chunks.
  for (size_t c; (c = next.fetch_add(1)) < chunks.size();) {
    encode_chunk(c);
    progress.report_if_due(false);
  }
  for (auto& t : pool) t.join();
  progress.report_if_due(true);
  return encoded;
}

int64_t decode_token_shards(const std::string& pattern, const std::string& tokenizer_path, const std::string& out) {
  // Without a tokenizer the shards are byte-level (strata data encode's default): an id is a byte.
  std::optional<BpeTokenizer> tokenizer;
  if (!tokenizer_path.empty()) tokenizer = BpeTokenizer::load(tokenizer_path, "data decode: --tokenizer");
  const int vocab_size = tokenizer ? tokenizer->vocab_size() : kByteVocabSize;
  const TokenDataset shards = TokenDataset::open(pattern, vocab_size, "data decode: --input");
  std::FILE* file = out.empty() || out == "-" ? stdout : std::fopen(out.c_str(), "wb");
  if (file == nullptr) throw UserError("data decode: --out " + out + ": cannot be written: " + std::strerror(errno));
  constexpr int64_t kBlock = int64_t{1} << 20;
  std::vector<int32_t> ids;
  bool written = true;
  errno = 0;
  for (int64_t first = 0; first < shards.num_tokens() && written; first += kBlock) {
    ids.resize(static_cast<size_t>(std::min(kBlock, shards.num_tokens() - first)));
    shards.read(first, static_cast<int64_t>(ids.size()), ids.data());
    const std::string text = tokenizer ? tokenizer->decode(ids.data(), ids.size()) : byte_decode(ids.data(), ids.size());
    written = std::fwrite(text.data(), 1, text.size(), file) == text.size();
  }
  written = std::fflush(file) == 0 && written;
  const int write_errno = errno;
  if (file != stdout) written = std::fclose(file) == 0 && written;
  if (!written && file == stdout && write_errno == EPIPE) return shards.num_tokens();  // `| head`: the reader had enough
  if (!written) {
    throw UserError("data decode: writing " + (file == stdout ? std::string("standard output") : out) +
                    " failed: " + std::strerror(write_errno != 0 ? write_errno : errno));
  }
  return shards.num_tokens();
}

}  // namespace strata
