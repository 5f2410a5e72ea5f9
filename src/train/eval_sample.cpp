// Evaluation on the validation split and text samples from the model being trained.
#include <algorithm>
#include <cmath>

#include "train/train_internal.h"

namespace strata {

double evaluate_loss(Gpt& model, const TokenDataset& data, int seq_len, int micro_batch, int64_t batches) {
  // The val split is read from its start in file order, identically at every evaluation.
  const GlobalSampler sampler(data, seq_len, /*shuffle=*/false, /*seed=*/0);
  const int64_t total = std::min<int64_t>(batches * micro_batch, sampler.num_sequences());
  std::vector<int32_t> tokens(static_cast<size_t>(micro_batch) * seq_len);
  std::vector<int32_t> targets(tokens.size());
  double loss_sum = 0;
  for (int64_t first = 0; first < total; first += micro_batch) {
    const int count = static_cast<int>(std::min<int64_t>(micro_batch, total - first));
    read_sequences(data, sampler, first, count, tokens.data(), targets.data());
    loss_sum += static_cast<double>(model.forward(tokens.data(), targets.data(), count, seq_len)) * count;
  }
  return loss_sum / static_cast<double>(total);
}

std::string sample_text(Gpt& model, const std::string& prompt, int count, Rng& rng) {
  const GptDims& dims = model.dims();
  std::vector<int32_t> tokens = byte_encode(prompt.empty() ? std::string("\n") : prompt);
  const size_t prompt_length = prompt.empty() ? 0 : tokens.size();
  std::vector<double> probs(static_cast<size_t>(dims.vocab_size));
  for (int i = 0; i < count; ++i) {
    const size_t context = std::min<size_t>(tokens.size(), static_cast<size_t>(dims.seq_len));
    const int32_t* window = tokens.data() + (tokens.size() - context);
    const Tensor logits = model.forward_logits(window, 1, static_cast<int>(context));
    const float* last = logits.f32() + (context - 1) * static_cast<size_t>(dims.padded_vocab);
    const double max_logit = *std::max_element(last, last + dims.vocab_size);
    double total = 0;
    for (int v = 0; v < dims.vocab_size; ++v) total += probs[static_cast<size_t>(v)] = std::exp(last[v] - max_logit);
    double u = static_cast<double>(rng.uniform()) * total;
    int32_t next = dims.vocab_size - 1;
    for (int v = 0; v < dims.vocab_size; ++v) {
      u -= probs[static_cast<size_t>(v)];
      if (u < 0) {
        next = v;
        break;
      }
    }
    tokens.push_back(next);
  }
  return byte_decode(tokens.data() + prompt_length, tokens.size() - prompt_length);
}

}  // namespace strata
