// Learning-rate schedules with DeepSpeed's parameter names and exact formulas
// (deepspeed.runtime.lr_schedules: WarmupLR, WarmupDecayLR, WarmupCosineLR).
#include <algorithm>
#include <cmath>

#include "optim/optim.h"

namespace strata {
namespace {

constexpr double kPi = 3.14159265358979323846;

// Warmup progress γ in [0, 1) for it < W (W clamped to ≥ 2 as DeepSpeed does).
double warmup_gamma(const LrScheduleSettings& s, int64_t it) {
  const int64_t w = std::max<int64_t>(2, s.warmup_num_steps);
  if (s.warmup_log) return std::log(static_cast<double>(it + 1)) / std::log(static_cast<double>(w));
  return static_cast<double>(it) / static_cast<double>(w);
}

}  // namespace

double LrSchedule::lr_at(int64_t it) const {
  const int64_t w = std::max<int64_t>(2, s_.warmup_num_steps);
  switch (s_.type) {
    case LrScheduleType::Constant:
      return s_.lr;
    case LrScheduleType::WarmupLR:
    case LrScheduleType::WarmupDecayLR: {
      if (it < 0) return s_.warmup_min_lr;  // the value DeepSpeed sets at construction
      double gamma = 1.0;
      if (it < w) {
        gamma = warmup_gamma(s_, it);
      } else if (s_.type == LrScheduleType::WarmupDecayLR) {
        gamma = std::max(0.0, static_cast<double>(s_.total_num_steps - it) /
                                  static_cast<double>(std::max<int64_t>(1, s_.total_num_steps - w)));
      }
      return s_.warmup_min_lr + (s_.warmup_max_lr - s_.warmup_min_lr) * gamma;
    }
    case LrScheduleType::WarmupCosineLR: {
      if (it < 0) return 0.0;  // DeepSpeed's ratio before the first step
      double ratio;
      if (it < w) {
        ratio = s_.warmup_min_ratio + warmup_gamma(s_, it) * (1.0 - s_.warmup_min_ratio);
      } else {
        const double step = static_cast<double>(it - w + 1);
        const double span = static_cast<double>(s_.total_num_steps - w);
        ratio = std::max(0.0, s_.cos_min_ratio + (1.0 - s_.cos_min_ratio) * (1.0 + std::cos(kPi * step / span)) / 2.0);
      }
      return s_.lr * ratio;
    }
  }
  return s_.lr;
}

float clip_coefficient(double grad_norm, double max_norm) {
  if (max_norm <= 0.0) return 1.0f;
  const double coef = max_norm / (grad_norm + 1e-6);
  return coef < 1.0 ? static_cast<float>(coef) : 1.0f;
}

}  // namespace strata
