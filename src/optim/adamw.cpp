// AdamW over the flat parameter buffer: Adam state lives here (fp32 m and v of the same
// layout), the arithmetic in the backend's fused update, one call per decay range; or, with a
// host placement, m and v in host memory and the update host_adamw_update's, piece by piece.
#include "optim/optim.h"

#include <algorithm>
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

namespace {

Buffer allocate_state(Backend& backend, int64_t numel, const HostPlacement* host) {
  const size_t bytes = static_cast<size_t>(numel) * sizeof(float);
  if (!host) return backend.allocate(bytes);
  if (host->state_elsewhere) return Buffer();
  return host->pinned ? backend.allocate_host(bytes) : allocate_pageable_host(bytes);
}

}  // namespace

AdamW::AdamW(Backend& backend, const AdamWSettings& settings, std::vector<ParamRange> ranges, int64_t numel,
             const HostPlacement* host)
    : backend_(backend), settings_(settings), ranges_(merge_param_ranges(std::move(ranges))), numel_(numel),
      exp_avg_(allocate_state(backend, numel, host)), exp_avg_sq_(allocate_state(backend, numel, host)) {
  if (host) host_ = *host;
  for (const ParamRange& r : ranges_) {
    if (r.offset < 0 || r.offset + r.numel > numel) throw std::logic_error("AdamW: parameter range outside the buffer");
  }
}

AdamWArgs AdamW::args_for(float lr, float grad_scale, double weight_decay) const {
  AdamWArgs args;
  args.lr = lr;
  args.beta1 = settings_.beta1;
  args.beta2 = settings_.beta2;
  args.eps = settings_.eps;
  args.bias_correction1 = 1.0 - std::pow(static_cast<double>(settings_.beta1), static_cast<double>(steps_));
  args.bias_correction2 = 1.0 - std::pow(static_cast<double>(settings_.beta2), static_cast<double>(steps_));
  args.grad_scale = grad_scale;
  args.decoupled = settings_.decoupled;
  args.weight_decay = weight_decay;
  return args;
}

void AdamW::begin_pieces(float lr, float grad_scale) {
  if (!host_) throw std::logic_error("AdamW: pieces need the host placement");
  ++steps_;
  piece_args_ = args_for(lr, grad_scale, 0.0);
}

void AdamW::update_piece(int64_t begin, int64_t count, float* params, const float* grads, void* copy,
                         DType copy_dtype) {
  if (!exp_avg_.data()) throw std::logic_error("AdamW: the moments live elsewhere; give them");
  update_piece(begin, count, params, grads, exp_avg().f32() + begin, exp_avg_sq().f32() + begin, copy, copy_dtype);
}

void AdamW::update_piece(int64_t begin, int64_t count, float* params, const float* grads, float* exp_avg,
                         float* exp_avg_sq, void* copy, DType copy_dtype) {
  const int64_t end = begin + count;
  for (const ParamRange& r : ranges_) {
    const int64_t lo = std::max(begin, r.offset), hi = std::min(end, r.offset + r.numel);
    if (lo >= hi) continue;
    AdamWArgs args = piece_args_;
    args.weight_decay = r.weight_decay ? settings_.weight_decay : 0.0;
    HostAdamWData d;
    d.param = params + (lo - begin);
    d.grad = grads + (lo - begin);
    d.exp_avg = exp_avg + (lo - begin);
    d.exp_avg_sq = exp_avg_sq + (lo - begin);
    d.param_copy = copy ? static_cast<char*>(copy) + static_cast<size_t>(lo - begin) * dtype_size(copy_dtype) : nullptr;
    d.copy_dtype = copy_dtype;
    d.n = hi - lo;
    host_adamw_update(d, args, host_->simd, host_->pool);
  }
}

void AdamW::step(Tensor params, Tensor grads, float lr, float grad_scale, Tensor params_copy) {
  if (params_copy.defined() && params_copy.numel() < numel_) {
    throw std::logic_error("AdamW: the parameter copy is shorter than the parameters");
  }
  if (host_) {
    begin_pieces(lr, grad_scale);
    update_piece(0, numel_, params.f32(), grads.f32(), params_copy.data, params_copy.dtype);
    return;
  }
  ++steps_;
  AdamWArgs args = args_for(lr, grad_scale, 0.0);
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
