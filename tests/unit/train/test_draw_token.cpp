// The sampler's draw of one token: temperature 1 over every token is the plain softmax draw that
// runs' samples were made with; temperature 0 is the most likely token (the lowest id among equals)
// and draws nothing; top-k keeps exactly k tokens, ties at the k-th value going to the lowest ids.
#include "catch_compat.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "core/rng.h"
#include "train/train_internal.h"

namespace {

// The softmax draw as the sampler made it before it had rules: exp(logit - max), a uniform scaled
// by the sum, the first id whose running sum passes it.
int32_t plain_softmax_draw(const std::vector<float>& logits, strata::Rng& rng) {
  const double max_logit = *std::max_element(logits.begin(), logits.end());
  std::vector<double> probs(logits.size());
  double total = 0;
  for (size_t v = 0; v < logits.size(); ++v) total += probs[v] = std::exp(logits[v] - max_logit);
  double u = static_cast<double>(rng.uniform()) * total;
  for (size_t v = 0; v < logits.size(); ++v) {
    u -= probs[v];
    if (u < 0) return static_cast<int32_t>(v);
  }
  return static_cast<int32_t>(logits.size() - 1);
}

std::vector<float> some_logits(int n) {
  strata::Rng rng(7, 11);
  std::vector<float> logits(static_cast<size_t>(n));
  for (float& x : logits) x = 3 * rng.normal();
  return logits;
}

std::set<int32_t> drawn(const std::vector<float>& logits, const strata::SamplingRule& rule, int draws) {
  strata::Rng rng(1, 2);
  std::vector<double> probs(logits.size());
  std::set<int32_t> ids;
  for (int i = 0; i < draws; ++i) ids.insert(strata::draw_token(logits, rule, rng, probs));
  return ids;
}

}  // namespace

TEST_CASE("draw_token at temperature 1 over every token is the plain softmax draw") {
  const std::vector<float> logits = some_logits(300);
  strata::Rng ruled(5, 9), plain(5, 9);
  std::vector<double> probs(logits.size());
  for (int i = 0; i < 2000; ++i) REQUIRE(strata::draw_token(logits, {}, ruled, probs) == plain_softmax_draw(logits, plain));
  // A top-k of the whole vocabulary or more is every token.
  strata::Rng all(5, 9), again(5, 9);
  for (int i = 0; i < 200; ++i)
    REQUIRE(strata::draw_token(logits, {1.0, 300}, all, probs) == strata::draw_token(logits, {}, again, probs));
}

TEST_CASE("draw_token at temperature 0 takes the most likely token and draws nothing") {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f};
  strata::Rng rng(3, 4);
  const strata::RngState before = rng.state();
  std::vector<double> probs(logits.size());
  REQUIRE(strata::draw_token(logits, {0.0, 0}, rng, probs) == 1);  // the lower of the two equal maxima
  REQUIRE(rng.state().counter == before.counter);
  REQUIRE(drawn(logits, {1.0, 1}, 50) == std::set<int32_t>{1});  // top-k 1: the same token
}

TEST_CASE("draw_token with top-k draws from the k most likely tokens, ties to the lowest ids") {
  REQUIRE(drawn({1.0f, 5.0f, 4.9f, 3.0f, 4.95f}, {1.0, 2}, 400) == std::set<int32_t>{1, 4});
  // Three tokens tie at the 2nd largest value: the lowest id of them is kept.
  REQUIRE(drawn({2.0f, 1.0f, 2.0f, 3.0f, 2.0f}, {1.0, 2}, 400) == std::set<int32_t>{0, 3});
  REQUIRE(drawn({2.0f, 1.0f, 2.0f, 2.0f}, {1.0, 2}, 400) == std::set<int32_t>{0, 2});
  // A high temperature flattens the draw over the kept tokens only.
  REQUIRE(drawn(some_logits(50), {1000.0, 3}, 2000).size() == 3);
}
