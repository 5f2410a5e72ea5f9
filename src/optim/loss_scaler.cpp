// DeepSpeed's fp16 loss scaler. The update rule has DynamicLossScaler.update_scale's exact
// semantics, so a config behaves as it does under DeepSpeed, overflow for overflow.
#include <algorithm>
#include <cmath>

#include "optim/optim.h"

namespace strata {

LossScaler::LossScaler(const LossScalerSettings& settings) : settings_(settings) {
  state_.scale = dynamic() ? std::ldexp(1.0, settings.initial_scale_power) : settings.static_scale;
  state_.hysteresis_left = settings.hysteresis;
}

void LossScaler::update(bool overflow) {
  if (dynamic()) {
    if (overflow) {
      if (settings_.hysteresis == 1 || state_.hysteresis_left == 1) {
        state_.scale = std::max(state_.scale / 2.0, settings_.min_scale);
      } else {
        --state_.hysteresis_left;
      }
      state_.last_overflow_iteration = state_.iteration;
    } else {
      if (settings_.consecutive_hysteresis) state_.hysteresis_left = settings_.hysteresis;
      if ((state_.iteration - state_.last_overflow_iteration) % settings_.scale_window == 0) {
        if (!settings_.consecutive_hysteresis) state_.hysteresis_left = settings_.hysteresis;
        state_.scale *= 2.0;
      }
    }
  }
  ++state_.iteration;
}

}  // namespace strata
