// The global sequence order: which tokens global sequence g covers, optionally shuffled per
// epoch by a permutation that depends only on (seed, epoch), plus the batch layout that maps
// (step, DP rank, micro-step) to global sequence indices.
#include <algorithm>
#include <array>
#include <cstdint>
#include <numeric>
#include <stdexcept>

#include "core/error.h"
#include "core/rng.h"
#include "data/data.h"

namespace strata {

// The two most recently used epochs' permutations: a step whose global batch straddles an
// epoch boundary, or a prefetch thread one epoch ahead of an eval reader, never thrashes.
struct GlobalSampler::PermutationCache {
  struct Entry {
    int64_t epoch = -1;
    std::vector<uint32_t> order;  // order[k] = sequence slot shown at position k of the epoch
  };
  std::mutex mutex;
  std::array<Entry, 2> entries;
  size_t last_used = 0;
};

namespace {
const uint64_t kShuffleStream = rng_stream_id("data.sampler.shuffle");

std::vector<uint32_t> epoch_permutation(uint64_t seed, int64_t epoch, int64_t n) {
  std::vector<uint32_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0u);
  Rng rng(seed, kShuffleStream + static_cast<uint64_t>(epoch));
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(rng.below(static_cast<uint64_t>(i + 1)));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}
}  // namespace

GlobalSampler::GlobalSampler(int64_t num_tokens, int seq_len, bool shuffle, uint64_t seed,
                             const std::string& source)
    : num_sequences_(0), seq_len_(seq_len), shuffle_(shuffle), seed_(seed) {
  if (seq_len <= 0) throw std::invalid_argument("GlobalSampler: seq_len must be positive");
  num_sequences_ = num_tokens > 0 ? (num_tokens - 1) / seq_len : 0;
  if (num_sequences_ == 0) {
    throw UserError(source + ": too little data: " + std::to_string(std::max<int64_t>(num_tokens, 0)) +
                    " tokens, but one sequence needs seq_len + 1 = " + std::to_string(seq_len + 1) +
                    " (add data or lower model.seq_len)");
  }
  if (shuffle && num_sequences_ > int64_t{UINT32_MAX}) {
    throw UserError(source + ": " + std::to_string(num_sequences_) +
                    " sequences are too many to shuffle (at most 4294967295; set data.shuffle "
                    "to false or raise model.seq_len)");
  }
  if (shuffle) cache_ = std::make_shared<PermutationCache>();
}

GlobalSampler::GlobalSampler(const TokenDataset& dataset, int seq_len, bool shuffle, uint64_t seed)
    : GlobalSampler(dataset.num_tokens(), seq_len, shuffle, seed, dataset.describe()) {}

int64_t GlobalSampler::sequence_start(int64_t index) const {
  if (index < 0) throw std::out_of_range("GlobalSampler: negative sequence index");
  const int64_t position = index % num_sequences_;
  if (!shuffle_) return position * seq_len_;
  const int64_t epoch = index / num_sequences_;
  PermutationCache& cache = *cache_;
  std::lock_guard<std::mutex> lock(cache.mutex);
  for (size_t e = 0; e < cache.entries.size(); ++e) {
    if (cache.entries[e].epoch == epoch) {
      cache.last_used = e;
      return int64_t{cache.entries[e].order[static_cast<size_t>(position)]} * seq_len_;
    }
  }
  const size_t victim = 1 - cache.last_used;
  cache.entries[victim].order = epoch_permutation(seed_, epoch, num_sequences_);
  cache.entries[victim].epoch = epoch;
  cache.last_used = victim;
  return int64_t{cache.entries[victim].order[static_cast<size_t>(position)]} * seq_len_;
}

void read_sequences(const TokenDataset& dataset, const GlobalSampler& sampler,
                    int64_t first_global_index, int count, int32_t* tokens, int32_t* targets) {
  const int T = sampler.seq_len();
  std::vector<int32_t> window(static_cast<size_t>(T) + 1);  // inputs and targets overlap by T-1
  for (int b = 0; b < count; ++b) {
    dataset.read(sampler.sequence_start(first_global_index + b), T + 1, window.data());
    std::copy(window.begin(), window.end() - 1, tokens + int64_t{b} * T);
    std::copy(window.begin() + 1, window.end(), targets + int64_t{b} * T);
  }
}

int64_t global_batch_sequences(const BatchLayout& layout) {
  return int64_t{layout.micro_batch} * layout.grad_accum * layout.dp_size;
}

int64_t micro_batch_first_sequence(const BatchLayout& layout, int64_t step, int micro_index) {
  const int64_t rank_slice = int64_t{layout.micro_batch} * layout.grad_accum;
  return step * global_batch_sequences(layout) + layout.dp_rank * rank_slice +
         int64_t{micro_index} * layout.micro_batch;
}

}  // namespace strata
