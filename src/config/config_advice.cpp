// Values that would work, for check_config's messages: a grid, batch or pipeline problem is
// told with a value that fixes it, computed from the rest of the config and the world size.
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "config/config_internal.h"
#include "pipeline/pipeline.h"

namespace strata::config_detail {
namespace {

// The divisors of n that also divide `also` (0: any), at most `most` of them, ascending.
std::vector<int64_t> common_divisors(int64_t n, int64_t also, size_t most = 8) {
  std::vector<int64_t> out;
  for (int64_t d = 1; d <= n && out.size() < most; ++d) {
    if (n % d == 0 && (also == 0 || also % d == 0)) out.push_back(d);
  }
  return out;
}

std::string listed(const std::vector<int64_t>& values) {
  std::vector<std::string> words;
  for (const int64_t v : values) words.push_back(std::to_string(v));
  return join(words);
}

}  // namespace

std::string heads_advice(int n_head, int world_size) {
  const std::vector<int64_t> fit = common_divisors(n_head, world_size);
  return fmt::format("; a tensor_model_parallel_size dividing both n_head and the world size {} would do: {}",
                     world_size, listed(fit));
}

std::string world_size_advice(int world_size, int64_t model_parallel) {
  const int64_t up = (world_size + model_parallel - 1) / model_parallel * model_parallel;
  return fmt::format("; run on a multiple of {} ranks (mpirun -np {}), or choose TP×PP among the divisors of {}: {}",
                     model_parallel, up, world_size, listed(common_divisors(world_size, 0)));
}

std::string batch_advice(int64_t batch, int64_t unit) {
  const int64_t below = batch / unit * unit, above = below + unit;
  if (below < 1) return fmt::format("; a multiple of {} would do, e.g. {}", unit, above);
  return fmt::format("; a multiple of {} would do, e.g. {} or {}", unit, below, above);
}

std::string pipeline_advice(const Config& c, PipeSetting setting, const BatchSizes& sizes, int dp_size,
                            int n_layer) {
  const int pp = c.parallelism.pipeline_model_parallel_size;
  const int64_t dp = dp_size;
  switch (setting) {
    case PipeSetting::Stages:
      return n_layer >= 1 ? fmt::format("; at most {} stages", n_layer) : "";
    case PipeSetting::VirtualStages:
      if (n_layer >= 1 && n_layer / pp >= 2) return fmt::format("; at most {} virtual stages", n_layer / pp);
      return n_layer >= 1 ? "; too few layers to interleave: use schedule 1f1b" : "";
    case PipeSetting::MicroBatches: {
      if (sizes.accum < 1) return "";
      const int64_t accum = (sizes.accum + pp - 1) / pp * pp;
      if (c.gradient_accumulation_steps) return fmt::format("; gradient_accumulation_steps {} would do", accum);
      if (c.train_micro_batch_size_per_gpu)
        return fmt::format(" (gradient_accumulation_steps derived as train_batch_size / (micro-batch × data-parallel "
                           "size)); train_batch_size {} would do",
                           sizes.micro * accum * dp);
      const int64_t per_rank = sizes.train / dp;  // the micro-batch itself, one per step
      if (per_rank % pp == 0)
        return fmt::format(" (one micro-batch of train_batch_size / data-parallel size = {} per step); "
                           "train_micro_batch_size_per_gpu {} would give {} micro-batches",
                           per_rank, per_rank / pp, pp);
      return fmt::format(" (one micro-batch per step, derived from train_batch_size); set "
                         "train_micro_batch_size_per_gpu, or a train_batch_size that is a multiple of {}",
                         dp * pp);
    }
    case PipeSetting::Schedule: return "";
  }
  return "";
}

}  // namespace strata::config_detail
