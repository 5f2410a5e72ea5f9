// DeepSpeed's config keys, in the order of its config documentation, each with its meaning there
// and what strata does with it. The README's table is printed from this list (`strata config
// --deepspeed-keys`); a section's entry covers the keys inside it unless they have their own.
#include "config/deepspeed_keys.h"

#include <iterator>

namespace strata::config_detail {
namespace {

constexpr DsTreatment kImplemented = DsTreatment::Implemented;
constexpr DsTreatment kAccepted = DsTreatment::Accepted;
constexpr DsTreatment kAtDefault = DsTreatment::AcceptedAtDefault;
constexpr DsTreatment kWhenEnabled = DsTreatment::RefusedWhenEnabled;
constexpr DsTreatment kRefused = DsTreatment::Refused;

// The parameters of DeepSpeed's OneCycle and LRRangeTest schedules, which strata does not implement.
const char* const kOtherScheduleParams[] = {
    "cycle_min_lr", "cycle_max_lr", "decay_lr_rate", "cycle_first_step_size", "cycle_second_step_size",
    "cycle_first_stair_count", "cycle_second_stair_count", "decay_step_size", "cycle_momentum", "cycle_min_mom",
    "cycle_max_mom", "decay_mom_rate", "lr_range_test_min_lr", "lr_range_test_step_size",
    "lr_range_test_step_rate", "lr_range_test_staircase"};

// Paths the table builds rather than lists: the other schedules' parameters, and the keys of bf16
// under its other name bfloat16.
std::vector<std::string>& built_paths() {
  static std::vector<std::string> paths;
  return paths;
}

void add_built_entries(std::vector<DeepSpeedKey>& table) {
  std::vector<std::string>& paths = built_paths();
  paths.clear();
  for (const char* name : kOtherScheduleParams) paths.push_back(std::string("scheduler.params.") + name);
  std::vector<DeepSpeedKey> bf16_keys;
  for (const DeepSpeedKey& key : table) {
    const std::string path = key.path;
    if (path.rfind("bf16.", 0) == 0 && path != "bf16.enabled") {
      paths.push_back("bfloat16." + path.substr(5));
      bf16_keys.push_back(key);
    }
  }
  paths.shrink_to_fit();  // the entries below point into it: no reallocation after this
  size_t next = 0;
  for (size_t i = 0; i < std::size(kOtherScheduleParams); ++i, ++next) {
    table.push_back({paths[next].c_str(), kRefused, "A parameter of the OneCycle or LRRangeTest schedule.",
                     "a parameter of a schedule strata does not implement (WarmupLR, WarmupDecayLR, WarmupCosineLR "
                     "are); remove it"});
  }
  for (const DeepSpeedKey& key : bf16_keys) {
    DeepSpeedKey alias = key;
    alias.path = paths[next++].c_str();
    table.push_back(alias);
  }
}

const DeepSpeedKey kListed[] = {
    // Batch size.
    {"train_batch_size", kImplemented, "Sequences per optimizer step over all data-parallel ranks.",
     "As DeepSpeed: any two batch keys and the data-parallel size determine the third; 'auto' is filled in from "
     "the other two"},
    {"train_micro_batch_size_per_gpu", kImplemented, "Sequences per forward/backward on one rank.",
     "As DeepSpeed; 'auto' is filled in from the other batch keys"},
    {"gradient_accumulation_steps", kImplemented, "Micro-batches accumulated per optimizer step.",
     "As DeepSpeed; 'auto' is filled in from the other batch keys"},
    {"managed_gradient_accumulation", kAccepted, "Let the engine count micro-batches to the step boundary.",
     "strata's step is always gradient_accumulation_steps micro-batches"},
    // Optimizer.
    {"optimizer", kImplemented, "The optimizer: type and params.", "Adam and AdamW (type in any letter case)"},
    {"optimizer.type", kImplemented,
     "Adam, AdamW, Lamb, OneBitAdam, ZeroOneAdam, OneBitLamb, Lion, Adagrad, MuAdam, MuAdamW, MuSGD.",
     "Adam and AdamW; the others are refused with the list of supported types"},
    {"optimizer.params", kImplemented, "Arguments of the optimizer's constructor.", "Those below"},
    {"optimizer.params.lr", kImplemented, "Learning rate.",
     "As DeepSpeed; 'auto' is taken from scheduler.params.warmup_max_lr (WarmupLR, WarmupDecayLR)"},
    {"optimizer.params.betas", kImplemented, "Adam's moment decay rates.", "As DeepSpeed"},
    {"optimizer.params.eps", kImplemented, "Adam's denominator term.", "As DeepSpeed (at least fp32's smallest normal number)"},
    {"optimizer.params.weight_decay", kImplemented, "Weight decay.", "As DeepSpeed (decoupled for AdamW)"},
    {"optimizer.params.adam_w_mode", kImplemented, "Adam only: decoupled weight decay (true) or L2 (false).",
     "As DeepSpeed; false with type AdamW is refused as contradictory"},
    {"optimizer.params.bias_correction", kAtDefault, "Adam's bias correction of the moments.",
     "strata's Adam always corrects the moments' bias", "true"},
    {"optimizer.params.amsgrad", kAtDefault, "The AMSGrad variant of Adam.",
     "strata's Adam has no AMSGrad variant; it would train differently", "false"},
    {"optimizer.params.fp32_optimizer_states", kAtDefault, "Keep Adam's moments in fp32.",
     "strata keeps Adam's moments in fp32; 16-bit moments would train differently", "true"},
    {"optimizer.params.torch_adam", kAccepted, "Use torch.optim.Adam(W) instead of DeepSpeed's fused Adam.",
     "strata's AdamW is its own and computes the same update"},
    {"optimizer.params.fused", kAccepted, "torch.optim's fused implementation switch.",
     "strata's AdamW is its own fused update"},
    {"optimizer.params.set_grad_none", kAccepted, "Free gradients after the step instead of zeroing them.",
     "strata's gradients live in preallocated buffers; it changes nothing"},
    {"optimizer.params.max_grad_norm", kAccepted,
     "An argument of apex's old FusedAdam (clipping inside the optimizer), ignored by DeepSpeed's optimizers.",
     "ignored as DeepSpeed ignores it; strata clips by gradient_clipping"},
    {"optimizer.params.freeze_step", kRefused, "1-bit Adam/LAMB, 0/1 Adam: warmup steps before compression.",
     "a parameter of the compressed-communication optimizers, which strata does not implement; use type Adam or "
     "AdamW without it"},
    {"optimizer.params.cuda_aware", kRefused, "1-bit optimizers: CUDA-aware MPI for compressed communication.",
     "a parameter of the 1-bit optimizers, which strata does not implement; remove it"},
    {"optimizer.params.comm_backend_name", kRefused, "1-bit optimizers: nccl, mpi or hccl for compression.",
     "a parameter of the 1-bit optimizers, which strata does not implement; comm.backend picks strata's backend"},
    {"optimizer.params.var_freeze_step", kRefused, "0/1 Adam: variance freezing step.",
     "a parameter of 0/1 Adam, which strata does not implement; remove it"},
    {"optimizer.params.var_update_scaler", kRefused, "0/1 Adam: variance update interval scaler.",
     "a parameter of 0/1 Adam, which strata does not implement; remove it"},
    {"optimizer.params.local_step_scaler", kRefused, "0/1 Adam: local step interval scaler.",
     "a parameter of 0/1 Adam, which strata does not implement; remove it"},
    {"optimizer.params.local_step_clipper", kRefused, "0/1 Adam: largest local step interval.",
     "a parameter of 0/1 Adam, which strata does not implement; remove it"},
    {"optimizer.params.max_coeff", kRefused, "LAMB: largest trust ratio.",
     "a parameter of LAMB, which strata does not implement; remove it"},
    {"optimizer.params.min_coeff", kRefused, "LAMB: smallest trust ratio.",
     "a parameter of LAMB, which strata does not implement; remove it"},
    {"optimizer.params.coeff_beta", kRefused, "1-bit LAMB: trust-ratio momentum.",
     "a parameter of 1-bit LAMB, which strata does not implement; remove it"},
    {"optimizer.params.factor_max", kRefused, "1-bit LAMB: largest scaling factor.",
     "a parameter of 1-bit LAMB, which strata does not implement; remove it"},
    {"optimizer.params.factor_min", kRefused, "1-bit LAMB: smallest scaling factor.",
     "a parameter of 1-bit LAMB, which strata does not implement; remove it"},
    {"optimizer.params.factor_threshold", kRefused, "1-bit LAMB: scaling factor threshold.",
     "a parameter of 1-bit LAMB, which strata does not implement; remove it"},
    {"optimizer.params.momentum", kRefused, "SGD/Muon momentum.",
     "a parameter of optimizers strata does not implement (Adam's momentum is betas); remove it"},
    {"optimizer.params.muon_lr", kRefused, "Muon: learning rate of its matrices.",
     "a parameter of Muon, which strata does not implement; remove it"},
    {"optimizer.params.adam_lr", kRefused, "Muon: learning rate of the parameters it updates with Adam.",
     "a parameter of Muon, which strata does not implement; remove it"},
    {"optimizer.params.ns_method", kRefused, "Muon: Newton-Schulz iteration.",
     "a parameter of Muon, which strata does not implement; remove it"},
    {"optimizer.legacy_fusion", kAccepted, "Use DeepSpeed's old fused optimizer path.",
     "strata's AdamW is one fused update either way"},
    // Scheduler.
    {"scheduler", kImplemented, "The learning-rate schedule: type and params.",
     "WarmupLR, WarmupDecayLR and WarmupCosineLR with DeepSpeed's formulas; LRRangeTest, OneCycle and "
     "WarmupCosineLR's siblings are refused with the supported list; no section is a constant rate"},
    {"scheduler.type", kImplemented, "LRRangeTest, OneCycle, WarmupLR, WarmupDecayLR, WarmupCosineLR.",
     "WarmupLR, WarmupDecayLR, WarmupCosineLR"},
    {"scheduler.params", kImplemented, "The schedule's parameters (those of its type only).",
     "warmup_min_lr, warmup_max_lr, warmup_num_steps, warmup_type, total_num_steps, warmup_min_ratio, "
     "cos_min_ratio as DeepSpeed; 'auto' is filled in for total_num_steps (train.iters), warmup_max_lr "
     "(optimizer.params.lr) and warmup_min_lr (0)"},
    {"scheduler.params.warmup_min_lr", kImplemented, "WarmupLR, WarmupDecayLR: the rate warmup starts from.",
     "As DeepSpeed; 'auto' is 0"},
    {"scheduler.params.warmup_max_lr", kImplemented, "WarmupLR, WarmupDecayLR: the rate warmup reaches.",
     "As DeepSpeed; 'auto' is optimizer.params.lr"},
    {"scheduler.params.warmup_num_steps", kImplemented, "Warmup length in steps.", "As DeepSpeed"},
    {"scheduler.params.warmup_type", kImplemented, "log or linear warmup.", "As DeepSpeed"},
    {"scheduler.params.total_num_steps", kImplemented, "WarmupDecayLR, WarmupCosineLR: the step the decay ends.",
     "As DeepSpeed; 'auto' is train.iters"},
    {"scheduler.params.warmup_min_ratio", kImplemented, "WarmupCosineLR: start of warmup as a fraction of lr.",
     "As DeepSpeed"},
    {"scheduler.params.cos_min_ratio", kImplemented, "WarmupCosineLR: end of the decay as a fraction of lr.",
     "As DeepSpeed"},
    {"scheduler.params.last_batch_iteration", kAtDefault, "The step a schedule resumes from.",
     "strata resumes the schedule at the checkpoint's step", "-1"},
    // Communication.
    {"communication_data_type", kImplemented,
     "The dtype gradients are reduced in (fp32, fp16, bf16; default: the training dtype).",
     "As DeepSpeed at every ZeRO stage: fp16 or bf16 rounds each reduction's input into a 16-bit buffer, "
     "reduces it there (half the bytes) and widens the result into the fp32 gradient; unset is fp32 (strata's "
     "default, where DeepSpeed's is the training dtype)"},
    {"seq_parallel_communication_data_type", kAtDefault,
     "DeepSpeed-Ulysses sequence parallelism: the dtype of its all-to-all.",
     "strata's sequence parallelism is Megatron's (parallelism.sequence_parallel) and has no such all-to-all",
     "fp32"},
    {"prescale_gradients", kAccepted, "Divide gradients by the data-parallel size before the reduction.",
     "strata always divides before the reduction, at every ZeRO stage (through each token's loss weight, so that "
     "an fp16 backward holds the same values, and overflows, on every layout)"},
    {"gradient_predivide_factor", kAccepted,
     "Divide gradients by this before the reduction and by (data-parallel size / factor) after.",
     "strata divides by the whole data-parallel size before the reduction, at every ZeRO stage (through each "
     "token's loss weight, so that an fp16 backward holds the same values, and overflows, on every layout)"},
    {"gradient_allreduce_op", kAtDefault, "Average (mean) or sum gradients over data-parallel ranks.",
     "strata averages; a sum would scale the learning rate by the data-parallel size", "mean"},
    {"sparse_gradients", kAtDefault, "Reduce the embedding's gradient as a sparse tensor.",
     "strata's embedding gradient is dense; a sparse reduction is not implemented", "false"},
    {"disable_allgather", kAccepted, "Deprecated DeepSpeed switch.", "no effect in DeepSpeed either"},
    // Precision.
    {"fp16", kImplemented, "fp16 mixed precision with loss scaling.", "As DeepSpeed"},
    {"fp16.enabled", kImplemented, "Train in fp16.", "As DeepSpeed; fp16 and bf16 together are refused"},
    {"fp16.auto_cast", kAccepted, "Cast the model's floating-point inputs to fp16.",
     "a model's inputs are token ids in strata, which no cast touches"},
    {"fp16.loss_scale", kImplemented, "0 = dynamic loss scaling; another value is a fixed scale.", "As DeepSpeed"},
    {"fp16.initial_scale_power", kImplemented, "The dynamic scale starts at 2^this.", "As DeepSpeed"},
    {"fp16.loss_scale_window", kImplemented, "Overflow-free steps before the scale doubles.", "As DeepSpeed"},
    {"fp16.hysteresis", kImplemented, "Overflows tolerated before the scale halves.", "As DeepSpeed"},
    {"fp16.consecutive_hysteresis", kImplemented, "Refill the hysteresis after every good step.", "As DeepSpeed"},
    {"fp16.min_loss_scale", kImplemented, "The scale's floor.", "As DeepSpeed"},
    {"fp16.fp16_master_weights_and_grads", kAtDefault, "Keep master weights and gradients in fp16 (ZeRO-2 with offload).",
     "strata keeps fp32 master weights and gradients; fp16 ones would train differently", "false"},
    {"bf16", kImplemented, "bf16 mixed precision.", "As DeepSpeed"},
    {"bf16.enabled", kImplemented, "Train in bf16.", "As DeepSpeed"},
    {"bf16.immediate_grad_update", kAccepted,
     "Accumulate each bf16 gradient into the fp32 buffer as soon as backward produces it.",
     "strata always accumulates gradients into fp32 buffers as they are produced"},
    {"bf16.check_grad_overflow", kAccepted, "Skip bf16 steps whose gradients overflow.",
     "strata skips every step whose gradient norm is not finite, in every precision (train.max_nonfinite_steps "
     "bounds how many)"},
    {"bf16.bf16_master_weights_and_grads", kAtDefault, "Keep master weights and gradients in bf16.",
     "strata keeps fp32 master weights and gradients; bf16 ones would train differently", "false"},
    {"bf16.bf16_optimizer_states", kAtDefault, "Keep Adam's moments in bf16.",
     "strata keeps Adam's moments in fp32; bf16 ones would train differently", "false"},
    {"bfloat16", kImplemented, "DeepSpeed's older name of the bf16 section.",
     "As bf16 (giving both is refused)"},
    {"bfloat16.enabled", kImplemented, "Train in bf16.", "As bf16.enabled"},
    {"amp", kWhenEnabled, "NVIDIA apex automatic mixed precision (enabled, opt_level and apex's other arguments).",
     "apex AMP is a PyTorch extension; use bf16 or fp16"},
    {"torch_autocast", kWhenEnabled, "torch.autocast mixed precision (enabled, dtype, lower_precision_safe_modules).",
     "a PyTorch mode; use bf16 or fp16"},
    {"data_types", kImplemented, "Dtypes of internal buffers.", "grad_accum_dtype below"},
    {"data_types.grad_accum_dtype", kAtDefault, "The dtype gradients are accumulated in (fp32, fp16, bf16).",
     "strata accumulates gradients in fp32 in every precision; a 16-bit accumulation would train differently",
     "fp32|float32|float|torch.float32"},
    {"data_types.param_dtype", kAtDefault, "The dtype of the parameters (overrides fp16/bf16).",
     "strata's parameter dtype is set by fp16 or bf16", "null"},
    {"data_types.buffer_dtype", kAtDefault, "The dtype of the model's buffers.",
     "strata's GPT has no buffers apart from its parameters", "null"},
    {"gradient_clipping", kImplemented, "Clip the global gradient norm to this (0 = off).", "As DeepSpeed"},
    {"graph_harvesting", kAccepted, "Capture the step in CUDA graphs.",
     "a launch-overhead optimisation of PyTorch; changes no values"},
};

std::vector<DeepSpeedKey> build_table() {
  std::vector<DeepSpeedKey> table(std::begin(kListed), std::end(kListed));
  const std::vector<DeepSpeedKey>& more = deepspeed_zero_and_feature_keys();
  table.insert(table.end(), more.begin(), more.end());
  add_built_entries(table);
  return table;
}

}  // namespace

const std::vector<DeepSpeedKey>& deepspeed_keys() {
  static const std::vector<DeepSpeedKey> table = build_table();
  return table;
}

}  // namespace strata::config_detail
