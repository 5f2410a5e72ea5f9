// Public header of src/data: llm.c-format token shards (validated and memory-mapped), the
// deterministic global sequence order shared by all ranks, the per-rank prefetching batch
// loader, the byte-level tokenizer and the text-to-shards encoder behind `strata data encode`.
#pragma once
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace strata {

// ---- Token shards ---------------------------------------------------------------------

// llm.c shard format: 256 int32 header ([0] magic, [1] version, [2] token count), then tokens.
constexpr int32_t kShardMagicU16 = 20240520;
constexpr int32_t kShardVersionU16 = 1;
constexpr int32_t kShardMagicU32 = 20240801;
constexpr int32_t kShardVersionU32 = 7;
constexpr int64_t kShardHeaderBytes = 256 * 4;

struct ShardInfo {
  std::string path;
  int64_t tokens = 0;
  int token_bytes = 2;  // 2 (uint16 tokens) or 4 (uint32 tokens)
};

// The concatenation of every shard matched by a glob pattern, in filename order. Shards stay
// memory-mapped for the dataset's lifetime; copies share the mappings and reads are
// thread-safe.
class TokenDataset {
 public:
  // Validates every shard (header, size, token ids < vocab_size); each problem is a
  // UserError that starts with `key` (the config key, e.g. "data.train") and names the file.
  static TokenDataset open(const std::string& glob_pattern, int vocab_size, const std::string& key);

  int64_t num_tokens() const { return num_tokens_; }
  // Copies tokens [offset, offset + n) of the concatenation into out, across shard boundaries.
  void read(int64_t offset, int64_t n, int32_t* out) const;
  const std::vector<ShardInfo>& shards() const { return shards_; }
  const std::string& key() const { return key_; }
  const std::string& pattern() const { return pattern_; }
  // "data.train ('data/*.bin': 2 shards, /d/a.bin, /d/b.bin)" for messages about the whole set.
  std::string describe() const;

  struct Mapping;  // one mmap'ed shard; defined in token_dataset.cpp

 private:
  TokenDataset() = default;
  std::string key_;
  std::string pattern_;
  std::vector<ShardInfo> shards_;
  std::vector<std::shared_ptr<const Mapping>> mappings_;
  std::vector<int64_t> shard_first_token_;  // offset of each shard's first token
  int64_t num_tokens_ = 0;
};

// Writes tokens as an llm.c shard: uint16 unless `wide` or some token > 65535. The file is
// written to `path.tmp` and renamed, so a reader never sees a half-written shard.
void write_token_shard(const std::string& path, const std::vector<int32_t>& tokens, bool wide);

// ---- Global sequence order --------------------------------------------------------------

// Sequence g covers tokens [s, s + T + 1) with s = start of g: inputs are the first T,
// targets the last T. Unshuffled, sequence g of epoch e starts at (g mod n)·T. Shuffled,
// each epoch is a permutation of [0, n) drawn from (seed, epoch) alone, so every rank (and
// every resumed run) sees the same order.
class GlobalSampler {
 public:
  // `source` names the data in the "too little data" error (TokenDataset::describe()).
  GlobalSampler(int64_t num_tokens, int seq_len, bool shuffle, uint64_t seed,
                const std::string& source = "data");
  GlobalSampler(const TokenDataset& dataset, int seq_len, bool shuffle, uint64_t seed);

  int64_t num_sequences() const { return num_sequences_; }
  int seq_len() const { return seq_len_; }
  bool shuffle() const { return shuffle_; }
  uint64_t seed() const { return seed_; }
  int64_t epoch_of(int64_t index) const { return index / num_sequences_; }
  // First token of global sequence `index` (any index >= 0; epochs wrap around).
  int64_t sequence_start(int64_t index) const;

 private:
  struct PermutationCache;  // shared by copies: its content depends on (seed, epoch, n) only
  int64_t num_sequences_;
  int seq_len_;
  bool shuffle_;
  uint64_t seed_;
  std::shared_ptr<PermutationCache> cache_;
};

// ---- Blending several sources ------------------------------------------------------------

// Where each global sequence of a blend of sources comes from: sequence g is sequence
// local_index of source `source`, and each source's sequences are taken in its own order
// (0, 1, 2, …; its GlobalSampler maps them to tokens and wraps its epochs). The order depends on
// the weights alone, so every rank, layout and resumed run sees the same one, and any g is
// located directly. Shares are exact per block of block_size() sequences: the first k blocks
// hold each source's largest-remainder share of k·block_size() (so after n sequences a source
// is within one block of weight·n); inside a block the sources interleave, each placed where it
// is furthest behind its share (Megatron's greedy rule).
class BlendOrder {
 public:
  struct Position {
    int source = 0;
    int64_t local_index = 0;
  };
  // weights: one per source, each finite and > 0 (std::invalid_argument otherwise).
  explicit BlendOrder(std::vector<double> weights);

  Position locate(int64_t global_index) const;
  // Sequences of `source` among the first n global sequences.
  int64_t count_before(int source, int64_t n) const;
  int64_t block_size() const { return block_size_; }
  int sources() const { return static_cast<int>(shares_.size()); }

 private:
  struct BlockCache;  // the last block laid out; shared by copies
  int64_t cumulative(int source, int64_t blocks) const;  // sequences of source in the first `blocks` blocks
  std::vector<double> shares_;  // weights / their sum
  int64_t block_size_;
  std::shared_ptr<BlockCache> cache_;
};

// ---- The training stream ----------------------------------------------------------------

// The training data as one stream of global sequences: one dataset in its sampler's order, or a
// blend of several, each read in its own sampler's order (its own epochs and shuffle) and
// interleaved by a BlendOrder of their weights. Copies share the mappings and caches.
class TrainSequences {
 public:
  struct Source {
    TokenDataset dataset;
    GlobalSampler sampler;  // built from `dataset`
    double weight = 1;
  };
  // Every sampler has the same seq_len (std::invalid_argument otherwise). One source is read in
  // its sampler's order alone: its weight plays no part.
  explicit TrainSequences(std::vector<Source> sources);
  TrainSequences(const TokenDataset& dataset, const GlobalSampler& sampler);

  int seq_len() const { return sources_.front().sampler.seq_len(); }
  bool blended() const { return order_ != nullptr; }
  const std::vector<Source>& sources() const { return sources_; }
  int64_t num_tokens() const;  // of every source together
  // Sequences of `source` among the first n global sequences.
  int64_t count_before(int source, int64_t n) const;
  // Reads `count` consecutive global sequences from `first_global_index` into tokens and
  // targets, each (count, T) row-major.
  void read(int64_t first_global_index, int count, int32_t* tokens, int32_t* targets) const;

 private:
  std::vector<Source> sources_;
  std::shared_ptr<const BlendOrder> order_;  // null for one source
};

// Reads `count` consecutive global sequences starting at `first_global_index` into
// tokens and targets, each (count, T) row-major. Eval walks the val split with this.
void read_sequences(const TokenDataset& dataset, const GlobalSampler& sampler,
                    int64_t first_global_index, int count, int32_t* tokens, int32_t* targets);

// ---- Per-rank batches ---------------------------------------------------------------------

// Step s covers global sequences [s·G, (s+1)·G), G = micro_batch·grad_accum·dp_size (counted
// from where the run's data starts; see BatchLoader::seek). DP rank r owns the contiguous
// slice starting at s·G + r·micro_batch·grad_accum; micro-step m takes the micro_batch
// sequences at offset m·micro_batch inside it.
struct BatchLayout {
  int micro_batch = 1;
  int grad_accum = 1;
  int dp_size = 1;
  int dp_rank = 0;
  int seq_len = 0;
};

int64_t global_batch_sequences(const BatchLayout& layout);
// Global index of the first sequence of micro-step `micro_index` of `step` on this rank.
int64_t micro_batch_first_sequence(const BatchLayout& layout, int64_t step, int micro_index);

struct MicroBatch {
  int64_t step = 0;
  int micro_index = 0;
  std::vector<int32_t> tokens;   // (micro_batch, T)
  std::vector<int32_t> targets;  // (micro_batch, T)
};

// Yields this rank's micro-batches in order: all of step s, then step s+1, ... With prefetch
// a background thread prepares the next few; results are identical either way. The loader
// keeps its own (cheap, shared-mapping) copy of the sequences.
class BatchLoader {
 public:
  BatchLoader(TrainSequences sequences, BatchLayout layout, bool prefetch);
  BatchLoader(const TokenDataset& dataset, const GlobalSampler& sampler, BatchLayout layout, bool prefetch)
      : BatchLoader(TrainSequences(dataset, sampler), layout, prefetch) {}
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // The next call to next() returns micro-batch 0 of `step`, whose global batch starts at
  // global sequence `first_sequence`; each later step takes the next G sequences. Until the
  // first seek, step s starts at s·G. A checkpoint stores the step and first_sequence_of(step),
  // so a run resumed with another global batch continues the data where it stopped (neither
  // repeating nor skipping sequences).
  void seek(int64_t step, int64_t first_sequence);
  int64_t first_sequence_of(int64_t step) const;
  MicroBatch next();  // rethrows any error raised while preparing the batch
  int64_t next_step() const { return next_step_; }
  int next_micro_index() const { return next_micro_; }

  // Any micro-batch by position, computed directly (no queue, no state change).
  MicroBatch batch_at(int64_t step, int micro_index) const;
  const BatchLayout& layout() const { return layout_; }

 private:
  struct QueuedBatch {
    MicroBatch batch;
    std::exception_ptr error;
  };
  void start_worker();
  void stop_worker();
  void worker_loop(int64_t step, int micro_index);

  static constexpr size_t kPrefetchDepth = 3;
  TrainSequences sequences_;
  BatchLayout layout_;
  bool prefetch_;
  int64_t next_step_ = 0;
  int next_micro_ = 0;
  int64_t origin_step_ = 0, origin_sequence_ = 0;  // step origin_step_ starts at origin_sequence_

  std::thread worker_;
  std::mutex mutex_;
  std::condition_variable queue_changed_;
  std::deque<QueuedBatch> queue_;
  bool stop_requested_ = false;
};

// ---- GPT-2 byte-level BPE ---------------------------------------------------------------------

// A byte-level BPE tokenizer of GPT-2's kind: the text is split by GPT-2's pre-tokenizer pattern
// (bpe_internal.h) and each piece's bytes are merged pair by pair, always the adjacent pair of
// lowest rank, leftmost among equals. Copies share the tables; encode and decode may run on several
// threads at once.
class BpeTokenizer {
 public:
  // path: a HuggingFace tokenizer.json; a vocab.json with merges.txt beside it; a folder holding
  // either; or a tiktoken rank file ("BASE64 RANK" per line; a pair merges when the join of its
  // bytes is a token, and <|endoftext|> takes the id after the last rank). Problems are UserErrors
  // starting with `key` (the config key or option) and naming the file.
  static BpeTokenizer load(const std::string& path, const std::string& key);

  // Ordinary text: the text of a special token is encoded as text. Appends to out.
  void encode(std::string_view text, std::vector<int32_t>& out) const;
  std::vector<int32_t> encode(std::string_view text) const;
  // The tokens' bytes joined; an id without a token (a padded vocabulary's) becomes U+FFFD.
  std::string decode(const int32_t* ids, size_t n) const;
  int vocab_size() const;       // the largest id + 1
  int32_t end_of_text() const;  // <|endoftext|>'s id, or -1 when the vocabulary has none
  const std::string& source() const;  // the file(s) it was read from, for messages

  struct Tables;  // defined in bpe_tokenizer.cpp

 private:
  BpeTokenizer() = default;
  std::shared_ptr<const Tables> tables_;
};

// Encodes each document [document_starts[d], document_starts[d+1]) of text after an end-of-text
// token, on `threads` threads; the tokens are the same for any thread count. They come in order,
// in pieces (one per chunk of text encoded), never joined into one more copy of them all.
std::vector<std::vector<int32_t>> bpe_encode_documents(const BpeTokenizer& tokenizer, std::string_view text,
                                                       const std::vector<size_t>& document_starts, int threads);

// `strata data decode`: the tokens of the shards matched by `pattern` (in file-name order) as
// text, decoded with the tokenizer at `tokenizer_path` (empty: byte-level shards, an id a byte),
// into `out` (a file; "-" or empty: stdout; a reader that closes the pipe early ends it quietly).
// Returns the number of tokens decoded.
int64_t decode_token_shards(const std::string& pattern, const std::string& tokenizer_path, const std::string& out);

// ---- Byte tokenizer and encoder -------------------------------------------------------------

constexpr int kByteVocabSize = 256;

// Token id = byte value (0..255); any byte sequence round-trips, valid UTF-8 or not.
std::vector<int32_t> byte_encode(std::string_view text);
// Ids 0..255 become their byte (invalid UTF-8 passes through raw; the caller prints it);
// an id outside 0..255 (e.g. a padded-vocab id sampled by a model) becomes U+FFFD.
std::string byte_decode(const int32_t* tokens, size_t n);
// Decoded text as it may be printed to a terminal: a byte-level model emits any bytes, and
// control codes (ESC, BEL, CSI, a carriage return) would drive the terminal. Control characters
// other than newline and tab, C1 controls and bytes that are not UTF-8 are written as \xNN
// (\u00NN for a C1 control), and a backslash as \\ (so that \xNN is always an escape);
// everything else, any script, as it is.
std::string printable_text(std::string_view text);

struct EncodeOptions {
  std::vector<std::string> inputs;
  std::string out_dir;
  double val_fraction = 0.01;         // in [0, 0.5]; 0 writes no val shard
  int64_t shard_tokens = 100'000'000;  // most tokens per shard
  std::string tokenizer;  // a GPT-2 BPE tokenizer (BpeTokenizer::load); empty: bytes
  // With a tokenizer: each input file is a document, or, when this is set, each file splits into
  // documents at every occurrence of it (e.g. "\n\n"); every document follows an end-of-text token.
  std::string document_delimiter;
  int threads = 0;  // encoding threads; 0: every core
};

struct EncodeSummary {
  int64_t input_bytes = 0;  // text bytes including the newlines joining files
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
  std::vector<std::string> train_shards;
  std::vector<std::string> val_shards;  // empty when val_fraction is 0
};

// --split-on's text with the escapes \n, \r, \t and \\ turned into newline, carriage return, tab
// and backslash; UserError for any other backslash.
std::string unescape_delimiter(const std::string& text);

// Joins the input files with a newline between files and byte-encodes them, or, with a tokenizer,
// BPE-encodes each document after an end-of-text token (uint32 shards when the vocabulary
// exceeds 65536); writes the tail
// val_fraction of the tokens to val_000000.bin and the rest to train_000000.bin, ...; every
// shard holds at most shard_tokens tokens (so a huge val split continues in val_000001.bin).
// Stale train_/val_ shards of an earlier run in out_dir are removed so globs see only this run.
EncodeSummary encode_text_files(const EncodeOptions& options);

}  // namespace strata
