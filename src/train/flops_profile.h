// Private to src/train: the flops_profiler's report (DeepSpeed's key) for the profile step.
#pragma once
#include <string>

#include "config/config.h"
#include "model/model.h"
#include "train/metrics.h"

namespace strata {

struct FlopsProfileInput {
  const Config* cfg = nullptr;
  const GptDims* dims = nullptr;
  const StepMetrics* metrics = nullptr;  // the profile step's, with its phase times
};

// The report: a summary (sizes, FLOPs, rank 0's latencies and FLOPS), the top modules of each
// depth, and (flops_profiler.detailed) every module to flops_profiler.module_depth.
std::string flops_profile(const FlopsProfileInput& in);
// The model's forward FLOPs for `tokens` tokens as the report counts them: 2·n_params + 2·L·C·T
// per token, a third of flops_per_token.
double profiled_fwd_flops(const GptDims& dims, double tokens);

}  // namespace strata
