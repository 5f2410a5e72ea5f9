// The fp16 loss scaler against sequences worked out by hand from DeepSpeed's update rule:
// hysteresis, halving down to the floor, doubling per window since the last overflow,
// consecutive hysteresis, static scales, and an exact resume from saved state.
#include "catch_compat.h"

#include <vector>

#include "optim/optim.h"

using namespace strata;

namespace {

// Applies the outcomes in order and returns the scale after each update.
std::vector<double> scales_after(LossScaler& scaler, const std::vector<bool>& overflows) {
  std::vector<double> out;
  for (bool overflow : overflows) {
    scaler.update(overflow);
    out.push_back(scaler.scale());
  }
  return out;
}

LossScalerSettings small_window() {
  LossScalerSettings s;
  s.initial_scale_power = 4;  // 16
  s.scale_window = 3;
  s.hysteresis = 2;
  s.min_scale = 2.0;
  return s;
}

}  // namespace

TEST_CASE("loss scaler defaults start at 2^16 with the full hysteresis budget") {
  const LossScaler scaler{LossScalerSettings{}};
  CHECK(scaler.scale() == 65536.0);
  CHECK(scaler.dynamic());
  CHECK(scaler.state().hysteresis_left == 2);
  CHECK(scaler.state().iteration == 0);
  CHECK(scaler.state().last_overflow_iteration == -1);
}

TEST_CASE("dynamic loss scaler follows a hand-worked overflow sequence") {
  LossScaler scaler(small_window());
  // it 0-2 clean: the window counts from last_overflow = -1, so it 2 doubles (16 → 32).
  // it 3 overflow: hysteresis 2 → 1, scale kept. it 4 overflow: budget 1 → halve to 16.
  // it 5 clean (5 − 4 = 1, no doubling; the budget stays 1). it 6 overflow: halve to 8.
  // it 7, 8 clean; it 9: 9 − 6 = 3 → double to 16 and refill the budget to 2.
  // it 10 overflow: 2 → 1. it 11-14 overflows halve 16 → 8 → 4 → 2 → 2 (floor min_scale 2).
  // it 15 clean: 15 − 14 = 1, no change.
  const std::vector<bool> overflows = {false, false, false, true, true, false, true, false,
                                       false, false, true,  true, true, true,  true, false};
  const std::vector<double> want = {16, 16, 32, 32, 16, 16, 8, 8, 8, 16, 16, 8, 4, 2, 2, 2};
  CHECK(scales_after(scaler, overflows) == want);
  CHECK(scaler.state().iteration == 16);
  CHECK(scaler.state().last_overflow_iteration == 14);
  CHECK(scaler.state().hysteresis_left == 1);
}

TEST_CASE("dynamic loss scaler doubles every window after the last overflow") {
  LossScalerSettings s = small_window();
  s.hysteresis = 1;
  LossScaler scaler(s);
  // it 0 overflow halves at once (hysteresis 1): 8. Clean it 1-3: 3 − 0 = 3 doubles at it 3,
  // and again at it 6.
  const std::vector<double> want = {8, 8, 8, 16, 16, 16, 32};
  CHECK(scales_after(scaler, {true, false, false, false, false, false, false}) == want);
}

TEST_CASE("consecutive hysteresis refills the budget after every clean step") {
  LossScalerSettings s = small_window();
  s.scale_window = 1000;
  s.consecutive_hysteresis = true;
  LossScaler refilled(s);
  // overflow, clean (refill), overflow, overflow: only the fourth step halves.
  CHECK(scales_after(refilled, {true, false, true, true}) == std::vector<double>{16, 16, 16, 8});
  s.consecutive_hysteresis = false;
  LossScaler plain(s);
  // Without refills the budget spent at step 1 is still spent at step 3.
  CHECK(scales_after(plain, {true, false, true, true}) == std::vector<double>{16, 16, 8, 4});
}

TEST_CASE("a static loss scale never changes but the iteration still advances") {
  LossScalerSettings s;
  s.static_scale = 128.0;
  LossScaler scaler(s);
  CHECK_FALSE(scaler.dynamic());
  CHECK(scales_after(scaler, {true, false, true, true, false}) == std::vector<double>(5, 128.0));
  CHECK(scaler.state().iteration == 5);
}

TEST_CASE("a loss scaler restored from saved state continues exactly") {
  const std::vector<bool> first = {false, true, false, false, true};
  const std::vector<bool> rest = {false, false, false, true, true, false, false, false};
  LossScaler whole(small_window());
  scales_after(whole, first);
  LossScaler resumed(small_window());
  resumed.set_state(whole.state());
  CHECK(scales_after(resumed, rest) == scales_after(whole, rest));
  CHECK(resumed.state().iteration == whole.state().iteration);
  CHECK(resumed.state().hysteresis_left == whole.state().hysteresis_left);
}
