// `strata train`, part 4: faults of the run itself. A step whose gradient is not finite is
// skipped by the engine (nothing non-finite reaches the parameters or the Adam state) and
// counted here; more than train.max_nonfinite_steps in a row stop the run without saving, with
// the step, loss, norm, the first parameter whose gradient was not finite, and advice that fits
// the config. A save first checks that the state it would write is finite.
#include <cmath>
#include <string>

#include "train/trainer.h"

namespace strata {

std::string Trainer::nonfinite_advice() const {
  std::string advice = fmt::format("lower the learning rate (optimizer.params.lr is {:g})", cfg_.optimizer.params.lr);
  if (cfg_.gradient_clipping <= 0.0) advice += " or enable gradient_clipping (e.g. 1.0)";
  if (engine_.precision() == DType::F16) {
    // What fp16 can say depends on its scale: fixed by the config, at its floor, or still above
    // it (then the loss or the state itself was not finite, whatever the scale).
    const auto& fp16 = cfg_.fp16;
    if (fp16.loss_scale > 0) {
      advice += fmt::format("; fp16.loss_scale {:g} is fixed: 0 lets the scale fall when gradients overflow",
                            fp16.loss_scale);
    } else if (engine_.loss_scale() <= fp16.min_loss_scale) {
      advice += fmt::format("; fp16 overflowed even at its lowest loss scale (fp16.min_loss_scale {:g})",
                            fp16.min_loss_scale);
    }
    advice += "; bf16.enabled: true has fp32's range";
  }
  const std::string resume = last_saved_step_ >= 0
                                 ? fmt::format(", then resume from the checkpoint of step {} (it is finite)",
                                               last_saved_step_)
                                 : "";
  return advice + resume;
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
             m.step, m.loss, m.grad_norm, nonfinite_in_a_row_, limit);
  }
  metrics_.write({{"type", "nonfinite"}, {"step", m.step}, {"loss", m.loss}, {"grad_norm", m.grad_norm},
                  {"in_a_row", nonfinite_in_a_row_}});
  if (nonfinite_in_a_row_ <= limit) return true;
  const std::string where = engine_.first_nonfinite_gradient();
  log_error("stopping at step {}: {} steps in a row had a non-finite gradient (more than train.max_nonfinite_steps "
            "{}); the last: loss {}, gradient norm {}, first parameter with a non-finite gradient: {}. Nothing was "
            "saved from them. To go on, {}",
            m.step, nonfinite_in_a_row_, limit, m.loss, m.grad_norm, where.empty() ? "none (the loss)" : where,
            nonfinite_advice());
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
