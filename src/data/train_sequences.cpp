// The training stream: global sequence g read from one dataset in its sampler's order, or, for a
// blend, from the source and local index that the BlendOrder assigns to g. Each source keeps its
// own sampler, so its epochs wrap and reshuffle on their own, however the blend interleaves them.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "data/data.h"

namespace strata {

TrainSequences::TrainSequences(std::vector<Source> sources) : sources_(std::move(sources)) {
  if (sources_.empty()) throw std::invalid_argument("TrainSequences: no source");
  for (const Source& s : sources_) {
    if (s.sampler.seq_len() != seq_len())
      throw std::invalid_argument("TrainSequences: the sources' samplers differ in seq_len");
    // The sampler's sequences must lie inside its dataset (it was built from another one otherwise).
    if (s.sampler.num_sequences() * s.sampler.seq_len() + 1 > s.dataset.num_tokens())
      throw std::invalid_argument("TrainSequences: a sampler needs more tokens than " + s.dataset.key() + " holds");
  }
  if (sources_.size() > 1) {
    std::vector<double> weights;
    for (const Source& s : sources_) weights.push_back(s.weight);
    order_ = std::make_shared<const BlendOrder>(weights);
  }
}

TrainSequences::TrainSequences(const TokenDataset& dataset, const GlobalSampler& sampler)
    : TrainSequences(std::vector<Source>{{dataset, sampler, 1.0}}) {}

int64_t TrainSequences::num_tokens() const {
  int64_t total = 0;
  for (const Source& s : sources_) total += s.dataset.num_tokens();
  return total;
}

int64_t TrainSequences::count_before(int source, int64_t n) const {
  if (source < 0 || source >= static_cast<int>(sources_.size()))
    throw std::out_of_range("TrainSequences::count_before: no source " + std::to_string(source));
  return order_ ? order_->count_before(source, n) : n;
}

void TrainSequences::read(int64_t first_global_index, int count, int32_t* tokens, int32_t* targets) const {
  if (!order_) {
    read_sequences(sources_[0].dataset, sources_[0].sampler, first_global_index, count, tokens, targets);
    return;
  }
  const int64_t T = seq_len();
  for (int b = 0; b < count; ++b) {
    const BlendOrder::Position at = order_->locate(first_global_index + b);
    const Source& s = sources_[static_cast<size_t>(at.source)];
    read_sequences(s.dataset, s.sampler, at.local_index, 1, tokens + b * T, targets + b * T);
  }
}

}  // namespace strata
