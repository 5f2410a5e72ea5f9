// AdamW over the flat parameter buffer: Adam state lives here (fp32 m and v of the same
// layout), the arithmetic in the backend's fused update, one call per decay range.
#include "optim/optim.h"

#include <cmath>
#include <stdexcept>

namespace strata {

std::vector<ParamRange> merge_param_ranges(std::vector<ParamRange> ranges) {
  std::vector<ParamRange> merged;
  for (const ParamRange& r : ranges) {
    if (!merged.empty() && merged.back().weight_decay == r.weight_decay &&
        merged.back().offset + merged.back().numel == r.offset) {
      merged.back().numel += r.numel;
    } else {
      merged.push_back(r);
    }
  }
  return merged;
}

AdamW::AdamW(Backend& backend, const AdamWSettings& settings, std::vector<ParamRange> ranges, int64_t numel)
    : backend_(backend), settings_(settings), ranges_(merge_param_ranges(std::move(ranges))), numel_(numel),
      exp_avg_(backend.allocate(static_cast<size_t>(numel) * sizeof(float))),
      exp_avg_sq_(backend.allocate(static_cast<size_t>(numel) * sizeof(float))) {
  for (const ParamRange& r : ranges_) {
    if (r.offset < 0 || r.offset + r.numel > numel) throw std::logic_error("AdamW: parameter range outside the buffer");
  }
}

void AdamW::step(Tensor params, Tensor grads, float lr, float grad_scale, Tensor params_copy) {
  if (params_copy.defined() && params_copy.numel() < numel_) {
    throw std::logic_error("AdamW: the parameter copy is shorter than the parameters");
  }
  ++steps_;
  AdamWArgs args;
  args.lr = lr;
  args.beta1 = settings_.beta1;
  args.beta2 = settings_.beta2;
  args.eps = settings_.eps;
  args.bias_correction1 = 1.0 - std::pow(static_cast<double>(settings_.beta1), static_cast<double>(steps_));
  args.bias_correction2 = 1.0 - std::pow(static_cast<double>(settings_.beta2), static_cast<double>(steps_));
  args.grad_scale = grad_scale;
  args.decoupled = settings_.decoupled;
  // A range of a tensor, keeping its dtype and device; an undefined tensor stays undefined.
  auto range = [](const Tensor& t, const ParamRange& r) {
    if (!t.defined()) return t;
    return Tensor(static_cast<char*>(t.data) + static_cast<size_t>(r.offset) * dtype_size(t.dtype), t.dtype,
                  {r.numel}, t.device);
  };
  const Tensor m = exp_avg(), v = exp_avg_sq();
  for (const ParamRange& r : ranges_) {
    args.weight_decay = r.weight_decay ? settings_.weight_decay : 0.0;
    backend_.adamw_update(range(params, r), range(grads, r), range(m, r), range(v, r), range(params_copy, r), args);
  }
}

}  // namespace strata
