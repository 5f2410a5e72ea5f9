// `strata train`, part 4: faults of the run itself. A step whose gradient is not finite is
// skipped by the engine (nothing non-finite reaches the parameters or the Adam state) and
// counted here; more than train.max_nonfinite_steps in a row stop the run without saving, with
// the step, loss, norm, the first parameter whose gradient was not finite, and advice that fits
// the config. A save first checks that the state it would write is finite.
#include <fmt/ranges.h>

#include <cmath>
#include <string>
#include <vector>

#include "train/trainer.h"

namespace strata {

namespace {

// A NaN prints as nan, whatever its sign bit (printf's -nan reads as a value).
std::string value_text(double v) { return std::isnan(v) ? std::string("nan") : fmt::format("{}", v); }

}  // namespace

std::string Trainer::nonfinite_advice() const {
  std::vector<std::string> advice;
  // Before any update the learning rate has moved nothing: the fp16 range or the model is at fault.
  if (engine_.optimizer_steps() > 0) {
    advice.push_back(fmt::format("lower the learning rate (optimizer.params.lr is {:g}){}", cfg_.optimizer.params.lr,
                                 cfg_.gradient_clipping <= 0.0 ? " or enable gradient_clipping (e.g. 1.0)" : ""));
  }
  if (engine_.precision() == DType::F16) {
    // What fp16 can say depends on its scale: fixed by the config, at its floor, or still above
    // it (then the loss or the state itself was not finite, whatever the scale).
    const auto& fp16 = cfg_.fp16;
    if (fp16.loss_scale > 0) {
      advice.push_back(
          fmt::format("fp16.loss_scale {:g} is fixed: 0 lets the scale fall when gradients overflow", fp16.loss_scale));
    } else if (engine_.loss_scale() <= fp16.min_loss_scale) {
      advice.push_back(fmt::format("fp16 overflowed even at its lowest loss scale (fp16.min_loss_scale {}){}",
                                   fp16.min_loss_scale,
                                   fp16.min_loss_scale > 1.0 ? ": a lower min_loss_scale lets the scale fall further"
                                                             : ""));
    }
    advice.push_back("bf16.enabled: true has fp32's range");
  } else if (advice.empty()) {
    advice.push_back("check the model's initialisation (no update was applied before this step)");
  }
  const std::string resume = last_saved_step_ >= 0
                                 ? fmt::format(", then resume from the checkpoint of step {} (it is finite, but "
                                               "the updates before it may already have diverged: if the losses "
                                               "after the resume climb again, start from an earlier one)",
                                               last_saved_step_)
                                 : "";
  return fmt::format("{}", fmt::join(advice, "; ")) + resume;
}

bool Trainer::count_nonfinite(const StepMetrics& m) {
  const bool bad = m.nonfinite || !std::isfinite(m.loss);
  if (!bad) {
    if (!m.skipped) nonfinite_in_a_row_ = 0;  // an fp16 overflow the scale answers neither counts nor clears
    return true;
  }
  ++nonfinite_in_a_row_;
  const int64_t limit = cfg_.train.max_nonfinite_steps;
  if (mpi_.world_rank() == 0) {
    log_warn("step {}: the gradient is not finite (loss {}, gradient norm {}): update skipped ({} in a row; "
             "train.max_nonfinite_steps is {})",
             m.step, value_text(m.loss), value_text(m.grad_norm), nonfinite_in_a_row_, limit);
  }
  metrics_.write({{"type", "nonfinite"}, {"step", m.step}, {"loss", m.loss}, {"grad_norm", m.grad_norm},
                  {"in_a_row", nonfinite_in_a_row_}});
  if (nonfinite_in_a_row_ <= limit) return true;
  const std::string where = engine_.first_nonfinite_gradient();  // collective: every rank agrees
  if (mpi_.world_rank() == 0) {
    log_error("stopping at step {}: {} in a row had a non-finite gradient (more than train.max_nonfinite_steps "
              "{}); the last: loss {}, gradient norm {}, first parameter with a non-finite gradient: {}. Nothing "
              "was saved from {}. To go on, {}",
              m.step, nonfinite_in_a_row_ == 1 ? "1 step" : fmt::format("{} steps", nonfinite_in_a_row_), limit,
              value_text(m.loss), value_text(m.grad_norm), where.empty() ? "none (the loss)" : where,
              nonfinite_in_a_row_ == 1 ? "it" : "them", nonfinite_advice());
  }
  metrics_.write({{"type", "stop"}, {"reason", "nonfinite"}, {"step", m.step}, {"loss", m.loss},
                  {"grad_norm", m.grad_norm}, {"parameter", where}});
  return false;
}

void Trainer::check_state_finite(int64_t step) {
  const std::string bad = engine_.first_nonfinite_state();
  if (bad.empty()) return;
  metrics_.write({{"type", "stop"}, {"reason", "nonfinite_state"}, {"step", step}, {"tensor", bad}});
  throw RunFault(fmt::format("not saving the checkpoint of step {}: {} holds a non-finite value; the checkpoints "
                             "saved before are kept as they were. To go on, {}",
                             step, bad, nonfinite_advice()));
}

}  // namespace strata
