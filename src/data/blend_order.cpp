// The order of a blend of sources (BlendOrder): each source's share of the first k blocks of
// global sequences by largest remainder, in exact integer arithmetic, and the sequences of one
// block interleaved by the greedy rule; the last block laid out is cached for the next lookups.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "data/data.h"

namespace strata {
namespace {

// Shares as integers: q_s = round(share_s · 2^40) ≥ 1, so that q_s · n fits in 128 bits for any n
// below 2^62 and every rank computes the same counts.
constexpr double kShareScale = 1099511627776.0;  // 2^40
constexpr double kSmallestShare = 1e-6;           // a block then holds at most 2M sequences

}  // namespace

struct BlendOrder::BlockCache {
  std::mutex mutex;
  int64_t block = -1;
  std::vector<int> source;               // (block_size) the source of each position
  std::vector<int64_t> local_in_block;   // (block_size) its index among that source's in the block
  std::vector<int64_t> first_local;      // (sources) each source's sequences before the block
};

BlendOrder::BlendOrder(std::vector<double> weights) : cache_(std::make_shared<BlockCache>()) {
  if (weights.empty()) throw std::invalid_argument("a blend needs at least one source");
  double total = 0.0;
  for (double w : weights) {
    if (!std::isfinite(w) || !(w > 0.0)) throw std::invalid_argument("blend weights must be positive numbers");
    total += w;
  }
  double smallest = 1.0;
  for (double& w : weights) {
    w /= total;
    smallest = std::min(smallest, w);
  }
  if (smallest < kSmallestShare) {
    throw std::invalid_argument("a blend source's share is below one in a million of the sequences");
  }
  shares_ = std::move(weights);
  // B ≥ 2 / smallest share: every source gets at least one sequence per block, which makes the
  // cumulative counts grow with every block (see cumulative).
  block_size_ = std::max<int64_t>(1024, static_cast<int64_t>(std::ceil(2.0 / smallest)));
}

int64_t BlendOrder::cumulative(int source, int64_t blocks) const {
  const int sources_count = sources();
  std::vector<__int128> q(static_cast<size_t>(sources_count));
  __int128 q_total = 0;
  for (int s = 0; s < sources_count; ++s) {
    const long long scaled = std::llround(shares_[static_cast<size_t>(s)] * kShareScale);
    q[static_cast<size_t>(s)] = std::max<__int128>(1, scaled);
    q_total += q[static_cast<size_t>(s)];
  }
  const __int128 n = static_cast<__int128>(blocks) * block_size_;
  // floor(q_s · n / Q) each; the sequences left (fewer than the sources) go one each to the
  // largest remainders, ties to the lower index. floor(q_s·(n + B)/Q) ≥ floor(q_s·n/Q) + 1
  // because B·q_s ≥ Q, so a source's count never falls from one block to the next.
  __int128 assigned = 0;
  std::vector<std::pair<__int128, int>> remainders;
  remainders.reserve(q.size());
  for (int s = 0; s < sources_count; ++s) {
    const __int128 product = q[static_cast<size_t>(s)] * n;
    assigned += product / q_total;
    remainders.push_back({product % q_total, s});
  }
  const int64_t left = static_cast<int64_t>(n - assigned);
  std::stable_sort(remainders.begin(), remainders.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  int64_t extra = 0;
  for (int64_t i = 0; i < left; ++i) extra += remainders[static_cast<size_t>(i)].second == source ? 1 : 0;
  return static_cast<int64_t>(q[static_cast<size_t>(source)] * n / q_total) + extra;
}

BlendOrder::Position BlendOrder::locate(int64_t global_index) const {
  if (global_index < 0) throw std::out_of_range("BlendOrder::locate: negative index");
  const int64_t block = global_index / block_size_;
  const size_t at = static_cast<size_t>(global_index % block_size_);
  BlockCache& c = *cache_;
  std::lock_guard<std::mutex> lock(c.mutex);
  if (c.block != block) {
    const size_t sources_count = shares_.size();
    std::vector<int64_t> due(sources_count), taken(sources_count, 0);
    c.first_local.assign(sources_count, 0);
    for (size_t s = 0; s < sources_count; ++s) {
      c.first_local[s] = cumulative(static_cast<int>(s), block);
      due[s] = cumulative(static_cast<int>(s), block + 1) - c.first_local[s];
    }
    c.source.assign(static_cast<size_t>(block_size_), 0);
    c.local_in_block.assign(static_cast<size_t>(block_size_), 0);
    for (int64_t j = 0; j < block_size_; ++j) {
      // The source furthest behind due_s · (j + 1) / B, scaled by B to stay in integers.
      size_t best = sources_count;
      __int128 best_lag = 0;
      for (size_t s = 0; s < sources_count; ++s) {
        if (taken[s] == due[s]) continue;
        const __int128 lag = static_cast<__int128>(due[s]) * (j + 1) - static_cast<__int128>(taken[s]) * block_size_;
        if (best == sources_count || lag > best_lag) {
          best = s;
          best_lag = lag;
        }
      }
      c.source[static_cast<size_t>(j)] = static_cast<int>(best);
      c.local_in_block[static_cast<size_t>(j)] = taken[best]++;
    }
    c.block = block;
  }
  return {c.source[at], c.first_local[static_cast<size_t>(c.source[at])] + c.local_in_block[at]};
}

int64_t BlendOrder::count_before(int source, int64_t n) const {
  if (source < 0 || source >= sources() || n < 0) throw std::out_of_range("BlendOrder::count_before");
  const int64_t block = n / block_size_;
  int64_t count = cumulative(source, block);
  for (int64_t g = block * block_size_; g < n; ++g) count += locate(g).source == source ? 1 : 0;
  return count;
}

}  // namespace strata
