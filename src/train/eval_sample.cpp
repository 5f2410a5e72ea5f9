// Evaluation on the validation split and samples from the model being trained.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <utility>

#include "train/train_internal.h"

namespace strata {

int64_t eval_sequences(int64_t eval_iters, int64_t global_batch) {
  // eval_iters is bounded only by int64: a count past the val split means all of it, and the
  // product must not wrap into a negative one.
  return eval_iters > std::numeric_limits<int64_t>::max() / global_batch ? std::numeric_limits<int64_t>::max()
                                                                         : eval_iters * global_batch;
}

std::optional<double> evaluate_loss(Engine& engine, const TokenDataset& data, int seq_len, int micro_batch,
                                    int64_t sequences, Topology& topology, const StopCheck& stop) {
  const int dp_rank = topology.coord().dp, dp_size = topology.shape().dp;
  // With ZeRO-3 a forward gathers the parameters over DP: every DP rank runs as many.
  const bool lockstep = engine.zero_stage() == 3;
  // A batch's loss counts from its replica's first TP rank on the last pipeline stage.
  const auto loss_rank = [&](int dp) { return grid_rank(topology.shape(), {dp, topology.shape().pp - 1, 0}); };
  // The val split is read from its start in file order, identically at every evaluation.
  const GlobalSampler sampler(data, seq_len, /*shuffle=*/false, /*seed=*/0);
  const int64_t total = std::min<int64_t>(sequences, sampler.num_sequences());
  const int64_t n_batches = (total + micro_batch - 1) / micro_batch;
  // Batch b is evaluated by DP rank b mod DP in round b / DP, by every rank of that replica
  // (its TP ranks run the same forward together).
  const int64_t rounds = (n_batches + dp_size - 1) / dp_size;
  std::vector<int32_t> tokens(static_cast<size_t>(micro_batch) * seq_len);
  std::vector<int32_t> targets(tokens.size());
  auto batch_size = [&](int64_t b) { return static_cast<int>(std::min<int64_t>(micro_batch, total - b * micro_batch)); };
  std::vector<float> mine(static_cast<size_t>(rounds), 0.0f);
  for (int64_t k = 0; k < rounds; ++k) {
    if (stop()) return std::nullopt;  // every rank asks in every round, batch or not
    const int64_t b = k * dp_size + dp_rank;
    if (b >= n_batches && !lockstep) continue;
    const int64_t run = b < n_batches ? b : 0;  // lockstep ranks without a batch repeat batch 0 and drop it
    read_sequences(data, sampler, run * micro_batch, batch_size(run), tokens.data(), targets.data());
    const float loss = engine.forward_loss(tokens.data(), targets.data(), batch_size(run), seq_len);
    if (b < n_batches) mine[static_cast<size_t>(k)] = loss;
  }
  const std::vector<float> all = all_gather_floats(topology.world(), mine);
  double loss_sum = 0;
  for (int64_t b = 0; b < n_batches; ++b) {
    const int64_t rank = loss_rank(static_cast<int>(b % dp_size));
    loss_sum += static_cast<double>(all[static_cast<size_t>(rank * rounds + b / dp_size)]) * batch_size(b);
  }
  return loss_sum / static_cast<double>(total);
}

std::optional<std::string> sample_as_text(const Config& cfg, const BpeTokenizer* tokenizer,
                                          const std::vector<int32_t>& tokens) {
  if (tokenizer != nullptr) return tokenizer->decode(tokens.data(), tokens.size());
  if (cfg.model.vocab_size <= kByteVocabSize) return byte_decode(tokens.data(), tokens.size());
  return std::nullopt;
}

std::vector<int32_t> sample_start(const Config& cfg, const BpeTokenizer* tokenizer) {
  const std::string& prompt = cfg.logging.sample_prompt;
  if (tokenizer != nullptr) {
    if (!prompt.empty()) return tokenizer->encode(prompt);
    return {tokenizer->end_of_text() >= 0 ? tokenizer->end_of_text() : cfg.model.vocab_size - 1};
  }
  if (cfg.model.vocab_size <= kByteVocabSize) return byte_encode(prompt.empty() ? "\n" : prompt);
  return {cfg.model.vocab_size - 1};
}

// At temperature 1 over every token the arithmetic is the old sampler's, so that the samples of a
// run do not depend on the rule's existence.
int32_t draw_token(const std::vector<float>& logits, const SamplingRule& rule, Rng& rng, std::vector<double>& probs) {
  const int vocab = static_cast<int>(logits.size());
  const auto most = std::max_element(logits.begin(), logits.end());
  if (rule.temperature == 0) return static_cast<int32_t>(most - logits.begin());
  const double max_logit = *most;
  // With top_k, a token is drawn from the k largest logits: those above the k-th largest value,
  // then those equal to it in id order until there are k.
  float floor = -std::numeric_limits<float>::infinity();
  int at_floor = vocab;
  if (rule.top_k > 0 && rule.top_k < vocab) {
    std::vector<float> order(logits);
    std::nth_element(order.begin(), order.begin() + (rule.top_k - 1), order.end(), std::greater<float>());
    floor = order[static_cast<size_t>(rule.top_k - 1)];
    at_floor = rule.top_k - static_cast<int>(std::count_if(logits.begin(), logits.end(), [&](float x) { return x > floor; }));
  }
  double total = 0;
  int32_t last = static_cast<int32_t>(most - logits.begin());
  for (int v = 0; v < vocab; ++v) {
    const float x = logits[static_cast<size_t>(v)];
    const bool kept = x > floor || (x == floor && at_floor-- > 0);
    probs[static_cast<size_t>(v)] = kept ? std::exp((x - max_logit) / rule.temperature) : 0.0;
    total += probs[static_cast<size_t>(v)];
    if (kept) last = v;
  }
  double u = static_cast<double>(rng.uniform()) * total;
  for (int v = 0; v < vocab; ++v) {
    u -= probs[static_cast<size_t>(v)];
    if (u < 0) return v;
  }
  return last;  // the rounding of the sum left u just short of it
}

std::optional<std::vector<int32_t>> sample_tokens(Engine& engine, std::vector<int32_t> start, int count, Rng& rng,
                                                  const StopCheck& stop, const SamplingRule& rule) {
  const GptDims& dims = engine.model().dims();
  std::vector<int32_t> tokens = std::move(start);
  const size_t prompt_length = tokens.size();  // the prompt, or the start token
  std::vector<double> probs(static_cast<size_t>(dims.vocab_size));
  for (int i = 0; i < count; ++i) {
    if (stop()) return std::nullopt;
    const size_t context = std::min<size_t>(tokens.size(), static_cast<size_t>(dims.seq_len));
    const int32_t* window = tokens.data() + (tokens.size() - context);
    // The last position's logits over the real vocabulary (gathered from the TP slices), fp32.
    tokens.push_back(draw_token(engine.last_token_logits(window, static_cast<int>(context)), rule, rng, probs));
  }
  return std::vector<int32_t>(tokens.begin() + static_cast<std::ptrdiff_t>(prompt_length), tokens.end());
}

}  // namespace strata
