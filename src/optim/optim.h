// Public header of src/optim: DeepSpeed-exact learning-rate schedules, the global
// gradient-norm clip coefficient, DeepSpeed's fp16 loss scaler, and AdamW over a flat
// parameter buffer whose ranges carry their own weight-decay flag, its state on the device or
// (offloaded) in host memory with a SIMD host update.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/core.h"

namespace strata {

// ---- learning-rate schedules -------------------------------------------------------
enum class LrScheduleType { Constant, WarmupLR, WarmupDecayLR, WarmupCosineLR };

struct LrScheduleSettings {
  LrScheduleType type = LrScheduleType::Constant;
  double lr = 1e-3;              // optimizer lr: Constant's value and WarmupCosineLR's scale
  double warmup_min_lr = 0.0;    // WarmupLR / WarmupDecayLR
  double warmup_max_lr = 1e-3;   // WarmupLR / WarmupDecayLR
  int64_t warmup_num_steps = 1000;
  bool warmup_log = true;        // warmup_type: log (true) or linear (false)
  int64_t total_num_steps = 0;   // WarmupDecayLR / WarmupCosineLR
  double warmup_min_ratio = 0.0; // WarmupCosineLR
  double cos_min_ratio = 1e-4;   // WarmupCosineLR
};

// DeepSpeed semantics: the scheduler's iteration `it` starts at -1 and advances after
// every optimizer step that was not skipped, so optimizer step k runs with lr_at(k - 2).
class LrSchedule {
 public:
  explicit LrSchedule(const LrScheduleSettings& s) : s_(s) {}
  double lr_at(int64_t it) const;
  double current_lr() const { return lr_at(iteration_); }
  void advance() { ++iteration_; }
  int64_t iteration() const { return iteration_; }
  void set_iteration(int64_t it) { iteration_ = it; }

 private:
  LrScheduleSettings s_;
  int64_t iteration_ = -1;
};

// ---- clipping ----------------------------------------------------------------------
// Multiplier applied to gradients so that their global L2 norm is at most max_norm
// (torch.nn.utils.clip_grad_norm_: max_norm / (norm + 1e-6), capped at 1; max_norm 0 = off).
float clip_coefficient(double grad_norm, double max_norm);

// ---- fp16 loss scaling ----------------------------------------------------------------
// DeepSpeed's `fp16` keys (deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler).
struct LossScalerSettings {
  double static_scale = 0.0;  // fp16.loss_scale: > 0 fixes the scale; 0 = dynamic
  int initial_scale_power = 16;
  int64_t scale_window = 1000;
  int hysteresis = 2;
  bool consecutive_hysteresis = false;
  double min_scale = 1.0;
};

// Everything needed to resume the scaler exactly.
struct LossScalerState {
  double scale = 1.0;
  int hysteresis_left = 2;               // DeepSpeed's cur_hysteresis
  int64_t iteration = 0;                 // cur_iter: advances on every step, skipped or not
  int64_t last_overflow_iteration = -1;  // last_overflow_iter
};

// The dynamic scaler follows DeepSpeed exactly: on overflow, if hysteresis is 1 (or the
// budget is down to 1) the scale halves (never below min_scale), else the budget shrinks by
// one; the overflow's iteration is remembered. Without overflow the budget is refilled
// (every step with consecutive_hysteresis, else at each doubling) and the scale doubles
// whenever (iteration − last overflow iteration) is a multiple of the window. A static scaler
// never changes. Either way an overflowing step is the caller's to skip.
class LossScaler {
 public:
  explicit LossScaler(const LossScalerSettings& settings);
  double scale() const { return state_.scale; }
  bool dynamic() const { return settings_.static_scale <= 0.0; }
  // An overflow now could not lower the scale any further (a static scale, or the minimum).
  bool at_minimum() const { return !dynamic() || state_.scale <= settings_.min_scale; }
  // Records the outcome of one step (call once per step, after the overflow check).
  void update(bool overflow);
  const LossScalerState& state() const { return state_; }
  void set_state(const LossScalerState& state) { state_ = state; }

 private:
  LossScalerSettings settings_;
  LossScalerState state_;
};

// ---- AdamW -------------------------------------------------------------------------
struct AdamWSettings {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
  bool decoupled = true;  // AdamW; false = Adam with L2 added to the gradient
};

// A contiguous range of the flat buffers with one weight-decay policy.
struct ParamRange {
  int64_t offset = 0;
  int64_t numel = 0;
  bool weight_decay = true;
};

// Merges adjacent ranges with the same decay flag (fewer, longer optimizer calls).
std::vector<ParamRange> merge_param_ranges(std::vector<ParamRange> ranges);

// ---- AdamW over host memory (offloaded optimizer state) ------------------------------
// The instruction sets host_adamw_update has lanes for; host_simd_best() is the widest this CPU
// runs (checked at run time, so one binary serves every x86-64 host).
enum class HostSimd { Scalar, Avx2, Avx512 };
HostSimd host_simd_best();
const char* host_simd_name(HostSimd simd);

// n elements of host memory: param, exp_avg and exp_avg_sq are updated in place from grad;
// param_copy (optional) receives the updated param rounded to copy_dtype (F32, BF16, F16) as
// Backend::cast rounds.
struct HostAdamWData {
  float* param = nullptr;
  const float* grad = nullptr;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  void* param_copy = nullptr;
  DType copy_dtype = DType::F32;
  int64_t n = 0;
};
// One step of Backend::adamw_update's arithmetic, bit for bit (elements are independent, so the
// lanes and the split over `pool`'s threads change nothing), with `simd` at most
// host_simd_best(); pool optional.
void host_adamw_update(const HostAdamWData& data, const AdamWArgs& args, HostSimd simd, ThreadPool* pool);

// Where AdamW keeps its moments when they are offloaded: host memory (page-locked when pinned),
// updated by host_adamw_update with `simd` over `pool`.
// state_elsewhere: the moments live with their owner's pieces (offloaded to files), AdamW holds
// none and update_piece is given them.
struct HostPlacement {
  bool pinned = false;
  HostSimd simd = HostSimd::Scalar;
  ThreadPool* pool = nullptr;
  bool state_elsewhere = false;
};

class AdamW {
 public:
  // Moments on the backend's device, updated by its adamw_update; with `host`, in host memory
  // (offloaded) and updated there.
  AdamW(Backend& backend, const AdamWSettings& settings, std::vector<ParamRange> ranges, int64_t numel,
        const HostPlacement* host = nullptr);
  // One update of params from grads (both flat fp32 of `numel` elements); grads are
  // multiplied by grad_scale first (the clip coefficient). params_copy (optional, laid out
  // like params, any float dtype) receives the updated parameters of every range, rounded,
  // in the same pass: the working copy of mixed precision.
  void step(Tensor params, Tensor grads, float lr, float grad_scale, Tensor params_copy = Tensor());
  // Host placement: one step in pieces, so that copies of the next piece's gradient can overlap
  // this piece's update. begin_pieces counts the step; then update_piece for pieces that cover
  // [0, numel) once, each given host pointers to element `begin` of its params, grads and
  // (optional) copy, which is rounded to copy_dtype.
  void begin_pieces(float lr, float grad_scale);
  void update_piece(int64_t begin, int64_t count, float* params, const float* grads, void* copy, DType copy_dtype);
  // The same with the piece's moments given (state_elsewhere), at element `begin` too.
  void update_piece(int64_t begin, int64_t count, float* params, const float* grads, float* exp_avg,
                    float* exp_avg_sq, void* copy, DType copy_dtype);
  bool on_host() const { return host_.has_value(); }
  int64_t steps_taken() const { return steps_; }
  void set_steps_taken(int64_t steps) { steps_ = steps; }
  // The moments, fp32 on the backend's device, laid out like the parameters.
  Tensor exp_avg() const { return exp_avg_.view(0, DType::F32, {numel_}); }
  Tensor exp_avg_sq() const { return exp_avg_sq_.view(0, DType::F32, {numel_}); }
  size_t state_bytes() const { return exp_avg_.bytes() + exp_avg_sq_.bytes(); }

 private:
  AdamWArgs args_for(float lr, float grad_scale, double weight_decay) const;
  Backend& backend_;
  std::optional<HostPlacement> host_;
  AdamWArgs piece_args_;  // host placement: the step begin_pieces opened
  AdamWSettings settings_;
  std::vector<ParamRange> ranges_;
  int64_t numel_;
  int64_t steps_ = 0;
  Buffer exp_avg_, exp_avg_sq_;
};

}  // namespace strata
