// LR schedules against DeepSpeed's formulas computed by hand, and the clip coefficient.
#include "catch_compat.h"

#include <cmath>

#include "optim/optim.h"

using namespace strata;

TEST_CASE("constant schedule returns the optimizer lr at every iteration") {
  LrScheduleSettings s;
  s.lr = 3e-4;
  LrSchedule sched(s);
  CHECK(sched.current_lr() == Approx(3e-4));
  sched.advance();
  CHECK(sched.lr_at(1000) == Approx(3e-4));
}

TEST_CASE("WarmupLR log and linear warmup") {
  LrScheduleSettings s;
  s.type = LrScheduleType::WarmupLR;
  s.warmup_min_lr = 0.1;
  s.warmup_max_lr = 1.1;
  s.warmup_num_steps = 10;
  LrSchedule log_sched(s);
  CHECK(log_sched.current_lr() == Approx(0.1));  // it = -1: construction value
  CHECK(log_sched.lr_at(0) == Approx(0.1));      // ln(1)/ln(10) = 0
  CHECK(log_sched.lr_at(4) == Approx(0.1 + std::log(5.0) / std::log(10.0)));
  CHECK(log_sched.lr_at(9) == Approx(1.1));
  CHECK(log_sched.lr_at(500) == Approx(1.1));
  s.warmup_log = false;
  LrSchedule lin(s);
  CHECK(lin.lr_at(3) == Approx(0.1 + 0.3));
  s.warmup_num_steps = 1;  // clamped to 2
  LrSchedule clamped(s);
  CHECK(clamped.lr_at(1) == Approx(0.1 + 0.5));
}

TEST_CASE("WarmupDecayLR decays linearly to warmup_min_lr at total_num_steps") {
  LrScheduleSettings s;
  s.type = LrScheduleType::WarmupDecayLR;
  s.warmup_min_lr = 0.0;
  s.warmup_max_lr = 1.0;
  s.warmup_num_steps = 10;
  s.total_num_steps = 110;
  s.warmup_log = false;
  LrSchedule sched(s);
  CHECK(sched.lr_at(10) == Approx(1.0));
  CHECK(sched.lr_at(60) == Approx(0.5));
  CHECK(sched.lr_at(110) == Approx(0.0));
  CHECK(sched.lr_at(200) == Approx(0.0));
}

TEST_CASE("WarmupCosineLR scales the optimizer lr by DeepSpeed's ratio") {
  LrScheduleSettings s;
  s.type = LrScheduleType::WarmupCosineLR;
  s.lr = 2.0;
  s.warmup_num_steps = 4;
  s.total_num_steps = 14;
  s.warmup_min_ratio = 0.0;
  s.cos_min_ratio = 0.1;
  s.warmup_log = false;
  LrSchedule sched(s);
  CHECK(sched.current_lr() == 0.0);
  CHECK(sched.lr_at(2) == Approx(2.0 * 0.5));
  // it = W: s = 1 of S = 10
  const double pi = 3.14159265358979323846;
  CHECK(sched.lr_at(4) == Approx(2.0 * (0.1 + 0.9 * (1 + std::cos(pi * 1 / 10)) / 2)));
  CHECK(sched.lr_at(8) == Approx(2.0 * (0.1 + 0.9 * (1 + std::cos(pi * 5 / 10)) / 2)));
  CHECK(sched.lr_at(13) == Approx(2.0 * 0.1));  // s = S: the floor
}

TEST_CASE("the scheduler iteration advances once per optimizer step") {
  LrScheduleSettings s;
  s.type = LrScheduleType::WarmupLR;
  s.warmup_max_lr = 1.0;
  s.warmup_num_steps = 100;
  s.warmup_log = false;
  LrSchedule sched(s);
  CHECK(sched.iteration() == -1);
  sched.advance();
  sched.advance();
  sched.advance();
  CHECK(sched.current_lr() == Approx(0.02));
}

TEST_CASE("clip coefficient follows torch's clip_grad_norm_") {
  CHECK(clip_coefficient(10.0, 0.0) == 1.0f);
  CHECK(clip_coefficient(0.5, 1.0) == 1.0f);
  CHECK(clip_coefficient(4.0, 1.0) == Approx(1.0 / (4.0 + 1e-6)));
}

TEST_CASE("adjacent parameter ranges with the same decay flag merge") {
  const auto merged = merge_param_ranges({{0, 10, true}, {10, 5, true}, {15, 3, false}, {18, 2, false}, {20, 4, true}});
  REQUIRE(merged.size() == 3);
  CHECK(merged[0].numel == 15);
  CHECK(merged[1].offset == 15);
  CHECK(merged[1].numel == 5);
  CHECK(merged[2].weight_decay);
}
