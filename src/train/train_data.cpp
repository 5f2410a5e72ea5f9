// data.train as the trainer reads it: each source's shards opened and validated, a sampler per
// source, and the lines that describe a blend (the start-up banner and `strata config`); and
// data.tokenizer, checked against the model's vocabulary.
#include <fmt/core.h>

#include <cstdio>
#include <filesystem>
#include <utility>

#include "core/core.h"
#include "train/train.h"
#include "train/train_internal.h"

namespace strata {

namespace {

// Each source's shuffle has a seed of its own: the golden-ratio step keeps them far apart.
constexpr uint64_t kSourceSeedStep = 0x9E3779B97F4A7C15ull;

std::string source_key(size_t index, size_t count) {
  return count == 1 ? std::string("data.train") : fmt::format("data.train[{}]", index);
}

}  // namespace

TrainSequences open_train_sequences(const Config& cfg, int vocab_size, int seq_len) {
  const std::vector<DataSource>& list = cfg.data.train;
  std::vector<TrainSequences::Source> sources;
  for (size_t i = 0; i < list.size(); ++i) {
    TokenDataset dataset = TokenDataset::open(list[i].path, vocab_size, source_key(i, list.size()));
    const uint64_t seed = static_cast<uint64_t>(cfg.train.seed) + kSourceSeedStep * i;
    GlobalSampler sampler(dataset, seq_len, cfg.data.shuffle, seed);
    sources.push_back({std::move(dataset), std::move(sampler), list[i].weight});
  }
  return TrainSequences(std::move(sources));
}

void check_val_apart(const TrainSequences& train, const TokenDataset& val) {
  std::error_code ec;
  for (const ShardInfo& v : val.shards()) {
    const auto val_file = std::filesystem::weakly_canonical(v.path, ec);
    for (const TrainSequences::Source& s : train.sources()) {
      for (const ShardInfo& t : s.dataset.shards()) {
        if (std::filesystem::weakly_canonical(t.path, ec) != val_file) continue;
        throw UserError(fmt::format("data.val: {} is also a training shard ({} '{}' matches it): the validation loss "
                                    "would be measured on training data; narrow the glob (strata data encode writes "
                                    "train_*.bin and val_*.bin)",
                                    v.path, s.dataset.key(), s.dataset.pattern()));
      }
    }
  }
}

std::vector<std::string> describe_blend(const TrainSequences& data, int64_t iters, int64_t global_batch) {
  double total_weight = 0;
  for (const TrainSequences::Source& s : data.sources()) total_weight += s.weight;
  const int64_t run_sequences = iters * global_batch;
  std::vector<std::string> lines;
  for (size_t i = 0; i < data.sources().size(); ++i) {
    const TrainSequences::Source& s = data.sources()[i];
    const int64_t taken = data.count_before(static_cast<int>(i), run_sequences);
    lines.push_back(fmt::format("{} '{}': {} tokens in {} shard(s), weight {} ({:.2f}% of the sequences), {:.3g} "
                                "epochs in {} steps",
                                s.dataset.key(), s.dataset.pattern(), s.dataset.num_tokens(), s.dataset.shards().size(),
                                s.weight, 100 * s.weight / total_weight,
                                static_cast<double>(taken) / s.sampler.num_sequences(), iters));
  }
  return lines;
}

void check_same_token_counts(const MpiRuntime& mpi, const std::vector<std::string>& keys,
                             const std::vector<int64_t>& tokens) {
  if (mpi.world_size() == 1) return;
  const size_t n = tokens.size();
  const std::vector<int64_t> all = mpi.all_gather(tokens);
  const int r = first_rank_unlike_rank0(all, n);
  if (r < 0) return;
  size_t k = 0;  // the first value that differs
  while (all[static_cast<size_t>(r) * n + k] == all[k]) ++k;
  throw UserError(fmt::format("{}: rank {} finds {} tokens, rank 0 {}: every rank must read the same data (a shared "
                              "file system, or identical copies on every node)",
                              keys[k], r, all[static_cast<size_t>(r) * n + k], all[k]),
                  RaisedOn::EveryRank);
}

std::optional<BpeTokenizer> open_tokenizer(const Config& cfg) {
  if (cfg.data.tokenizer.empty()) return std::nullopt;
  BpeTokenizer tokenizer = BpeTokenizer::load(cfg.data.tokenizer, "data.tokenizer");
  if (tokenizer.vocab_size() > cfg.model.vocab_size) {
    throw UserError(fmt::format("data.tokenizer: {} has {} token ids, more than model.vocab_size {}: its ids would "
                                "index past the embedding (set model.vocab_size to at least {})",
                                tokenizer.source(), tokenizer.vocab_size(), cfg.model.vocab_size,
                                tokenizer.vocab_size()));
  }
  return tokenizer;
}

void print_blend_report(const Config& cfg) {
  if (cfg.data.train.size() < 2) return;
  std::printf("# data.train blends %zu sources:\n", cfg.data.train.size());
  try {
    const TrainSequences data = open_train_sequences(cfg, cfg.model.vocab_size, cfg.model.seq_len);
    for (const std::string& line : describe_blend(data, cfg.train.iters, cfg.derived.global_batch))
      std::printf("#   %s\n", line.c_str());
  } catch (const UserError& e) {
    // The config is valid; the data is not there (yet) or not usable: say so, still exit 0.
    std::printf("#   (its shards cannot be read here: %s)\n", e.what());
  }
}

}  // namespace strata
