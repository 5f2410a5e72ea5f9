// The batch rule train_batch_size = micro-batch × gradient_accumulation_steps × DP: the three
// sizes from whichever of them the config gives, or the error that names what does not divide
// (with the multiples either side that would).
#include <fmt/format.h>

#include <climits>
#include <cstdint>
#include <optional>

#include "config/config_internal.h"

namespace strata::config_detail {

std::optional<ConfigError> derive_batch_sizes(const Config& c, int dp_size, BatchSizes& out) {
  const std::optional<int> train = c.train_batch_size;
  const std::optional<int> micro = c.train_micro_batch_size_per_gpu;
  const std::optional<int> accum = c.gradient_accumulation_steps;
  const int64_t dp = dp_size;
  int64_t t = 0, m = 0, g = 0;
  if (train && micro && accum) {
    t = *train, m = *micro, g = *accum;
    if (t != m * g * dp)
      return ConfigError{"train_batch_size",
                         fmt::format("{} ≠ train_micro_batch_size_per_gpu × gradient_accumulation_steps × "
                                     "data-parallel size = {} × {} × {} = {}",
                                     t, m, g, dp, m * g * dp)};
  } else if (train && micro) {
    t = *train, m = *micro;
    if (t % (m * dp) != 0)
      return ConfigError{"train_batch_size",
                         fmt::format("{} is not divisible by train_micro_batch_size_per_gpu × data-parallel size "
                                     "= {} × {} = {}, so gradient_accumulation_steps cannot be derived",
                                     t, m, dp, m * dp) +
                             batch_advice(t, m * dp)};
    g = t / (m * dp);
  } else if (train && accum) {
    t = *train, g = *accum;
    if (t % (g * dp) != 0)
      return ConfigError{"train_batch_size",
                         fmt::format("{} is not divisible by gradient_accumulation_steps × data-parallel size "
                                     "= {} × {} = {}, so train_micro_batch_size_per_gpu cannot be derived",
                                     t, g, dp, g * dp) +
                             batch_advice(t, g * dp)};
    m = t / (g * dp);
  } else if (micro && accum) {
    m = *micro, g = *accum, t = m * g * dp;
  } else if (train) {
    t = *train, g = 1;
    if (t % dp != 0)
      return ConfigError{"train_batch_size",
                         fmt::format("{} is not divisible by the data-parallel size {}, so "
                                     "train_micro_batch_size_per_gpu cannot be derived",
                                     t, dp) +
                             batch_advice(t, dp)};
    m = t / dp;
  } else if (micro) {
    m = *micro, g = 1, t = m * dp;
  } else {
    return ConfigError{"train_batch_size",
                       accum ? "set train_batch_size or train_micro_batch_size_per_gpu "
                               "(gradient_accumulation_steps alone does not determine the batch)"
                             : "set train_batch_size or train_micro_batch_size_per_gpu"};
  }
  if (t > INT_MAX)
    return ConfigError{"train_batch_size", fmt::format("the global batch of {} sequences is too large", t)};
  out = BatchSizes{static_cast<int>(t), static_cast<int>(m), static_cast<int>(g)};
  return std::nullopt;
}

}  // namespace strata::config_detail
