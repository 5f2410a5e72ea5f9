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

const char* const kOffloadOnly =
    "used only when offloading to cpu or nvme, which strata does not do yet (an offload device other than none "
    "is refused); with device none it changes nothing";
const char* const kNvmeOnly =
    "asynchronous I/O settings, used only when offloading to nvme, which strata does not do yet (an offload "
    "device other than none is refused)";
const char* const kChangesTokens =
    "changes which tokens or sequence lengths a step trains on; strata does not implement it, and ignoring it would "
    "train another run than the one asked for. Remove the section or set enabled: false";

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
    {"communication_data_type", kAtDefault,
     "The dtype gradients are reduced in (fp32, fp16, bf16; default: the training dtype).",
     "strata reduces gradients in fp32 only; a lower-precision reduction is not implemented yet", "fp32"},
    {"seq_parallel_communication_data_type", kAtDefault,
     "DeepSpeed-Ulysses sequence parallelism: the dtype of its all-to-all.",
     "strata's sequence parallelism is Megatron's (parallelism.sequence_parallel) and has no such all-to-all",
     "fp32"},
    {"prescale_gradients", kImplemented, "Divide gradients by the data-parallel size before the reduction.",
     "As DeepSpeed: at ZeRO 0 the gradients are divided before the all-reduce (the default sums and divides "
     "after); ZeRO 1 ignores it (noted) and divides before; ZeRO 2 and 3 refuse true"},
    {"gradient_predivide_factor", kImplemented,
     "Divide gradients by this before the reduction and by (data-parallel size / factor) after.",
     "As DeepSpeed: at ZeRO 0 without prescale, 1/factor before the all-reduce and factor/DP after; ZeRO 1 "
     "ignores it (noted); ZeRO 2 and 3 refuse a factor other than 1"},
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
     "fp32"},
    {"data_types.param_dtype", kAtDefault, "The dtype of the parameters (overrides fp16/bf16).",
     "strata's parameter dtype is set by fp16 or bf16", "null"},
    {"data_types.buffer_dtype", kAtDefault, "The dtype of the model's buffers.",
     "strata's GPT has no buffers apart from its parameters", "null"},
    {"gradient_clipping", kImplemented, "Clip the global gradient norm to this (0 = off).", "As DeepSpeed"},
    {"graph_harvesting", kAccepted, "Capture the step in CUDA graphs.",
     "a launch-overhead optimisation of PyTorch; changes no values"},
    // ZeRO.
    {"zero_optimization", kImplemented, "ZeRO: optimizer state, gradients and parameters partitioned over DP.",
     "Stages 0-3 as DeepSpeed"},
    {"zero_optimization.stage", kImplemented, "0, 1, 2 or 3.", "As DeepSpeed"},
    {"zero_optimization.allgather_partitions", kAtDefault,
     "Gather the updated parameters with all-gather (true) or a series of broadcasts (false).",
     "strata all-gathers; the broadcasts are not implemented", "true"},
    {"zero_optimization.allgather_bucket_size", kImplemented, "Elements per parameter all-gather.",
     "Equal to reduce_bucket_size (strata gathers in the reduction buckets); another value is refused"},
    {"zero_optimization.overlap_comm", kImplemented, "Overlap gradient reduction with backward.", "As DeepSpeed"},
    {"zero_optimization.reduce_scatter", kImplemented, "Reduce with reduce-scatter (true) or all-reduce.",
     "true; false is refused (strata reduce-scatters at stages 1-3)"},
    {"zero_optimization.reduce_bucket_size", kImplemented, "Elements per gradient reduction.",
     "As DeepSpeed; 'auto' is model.d_model²"},
    {"zero_optimization.contiguous_gradients", kImplemented, "Copy gradients into one contiguous buffer.",
     "true; false is refused (strata's gradients are always contiguous)"},
    {"zero_optimization.load_from_fp32_weights", kAtDefault,
     "Resume the fp32 master weights from the checkpoint's (true) or from the 16-bit weights.",
     "strata resumes the fp32 master weights exactly", "true"},
    {"zero_optimization.grad_hooks", kAtDefault, "Reduce gradients from backward hooks.",
     "strata reduces each bucket when backward completes it", "true"},
    {"zero_optimization.round_robin_gradients", kAccepted,
     "Stages 1-2: spread gradient copies over ranks in turn (a CPU-offload optimisation).",
     "a copy order that changes no values"},
    {"zero_optimization.elastic_checkpoint", kAccepted, "Stages 1-2: checkpoints that load on another DP size.",
     "strata's checkpoints load on any layout already"},
    {"zero_optimization.legacy_stage1", kAtDefault, "DeepSpeed's old stage-1 implementation.",
     "strata has one stage-1 implementation", "false"},
    {"zero_optimization.ignore_unused_parameters", kAccepted,
     "Stages 1-2: allow parameters that receive no gradient.", "every parameter of strata's GPT receives one"},
    {"zero_optimization.use_multi_rank_bucket_allreduce", kAccepted, "Stages 1-2: bucket all-reduce strategy.",
     "a communication pattern that changes no values"},
    {"zero_optimization.offload_optimizer", kImplemented,
     "ZeRO-Offload: optimizer state in host memory or on NVMe.",
     "device none; cpu and nvme are refused (offloading is not implemented yet)"},
    {"zero_optimization.offload_optimizer.device", kImplemented, "none, cpu or nvme.",
     "none; cpu and nvme are refused (not implemented yet)"},
    {"zero_optimization.offload_optimizer.pin_memory", kImplemented, "Page-locked host buffers.",
     "Read; it matters only with offloading"},
    {"zero_optimization.offload_optimizer.nvme_path", kAccepted, "Directory of the NVMe swap files.", kOffloadOnly},
    {"zero_optimization.offload_optimizer.buffer_count", kAccepted, "Buffers for optimizer-state swapping.",
     kOffloadOnly},
    {"zero_optimization.offload_optimizer.pipeline_read", kAccepted, "Overlap reading the next state with the step.",
     kOffloadOnly},
    {"zero_optimization.offload_optimizer.pipeline_write", kAccepted, "Overlap writing state with the step.",
     kOffloadOnly},
    {"zero_optimization.offload_optimizer.fast_init", kAccepted, "Fast initialisation of NVMe-offloaded state.",
     kOffloadOnly},
    {"zero_optimization.offload_optimizer.ratio", kAccepted, "Fraction of the update done on the CPU.",
     kOffloadOnly},
    {"zero_optimization.offload_optimizer.super_offload", kAccepted, "SuperOffload for superchips.", kOffloadOnly},
    {"zero_optimization.offload_optimizer.cpuadam_cores_perc", kAccepted, "Share of cores for the CPU Adam.",
     kOffloadOnly},
    {"zero_optimization.offload_param", kImplemented, "ZeRO-Infinity: stage-3 parameters in host memory or on NVMe.",
     "device none; cpu and nvme are refused (offloading is not implemented yet)"},
    {"zero_optimization.offload_param.device", kImplemented, "none, cpu or nvme.",
     "none; cpu and nvme are refused (not implemented yet)"},
    {"zero_optimization.offload_param.pin_memory", kImplemented, "Page-locked host buffers.",
     "Read; it matters only with offloading"},
    {"zero_optimization.offload_param.nvme_path", kAccepted, "Directory of the NVMe swap files.", kOffloadOnly},
    {"zero_optimization.offload_param.buffer_count", kAccepted, "Buffers for parameter swapping.", kOffloadOnly},
    {"zero_optimization.offload_param.buffer_size", kAccepted, "Size of each parameter swap buffer.", kOffloadOnly},
    {"zero_optimization.offload_param.max_in_cpu", kAccepted, "Parameters kept in host memory with NVMe offload.",
     kOffloadOnly},
    {"zero_optimization.cpu_offload", kAtDefault, "DeepSpeed's old spelling of offload_optimizer.device: cpu.",
     "offloading is not implemented yet", "false"},
    {"zero_optimization.cpu_offload_params", kAtDefault, "Old spelling of offload_param.device: cpu.",
     "offloading is not implemented yet", "false"},
    {"zero_optimization.cpu_offload_param", kAtDefault, "Old spelling of offload_param.device: cpu.",
     "offloading is not implemented yet", "false"},
    {"zero_optimization.cpu_offload_use_pin_memory", kAccepted, "Old spelling of offload_*.pin_memory.",
     kOffloadOnly},
    {"zero_optimization.sub_group_size", kAccepted,
     "Stage 3: parameters per optimizer sub-group (bounds the step's temporary buffers, mainly for offload).",
     "strata's update works in place on each rank's shard with no temporary buffers, so any bound is met"},
    {"zero_optimization.stage3_max_live_parameters", kImplemented,
     "Stage 3: most parameters kept gathered at once before releasing.",
     "The next layer group is prefetched only when the gathered groups then hold at most this many elements "
     "(a group in use is gathered whatever its size); with no prefetch possible, one slot of layer parameters "
     "instead of two"},
    {"zero_optimization.stage3_max_reuse_distance", kAccepted,
     "Stage 3: keep a gathered parameter if it is reused within this many parameters.",
     "strata releases each layer group after its use in forward and gathers it again for backward"},
    {"zero_optimization.stage3_prefetch_bucket_size", kImplemented, "Stage 3: elements fetched ahead of use.",
     "The next layer group is prefetched only when it has at most this many elements (unset: whatever its "
     "size); 'auto' is 0.9 × d_model²"},
    {"zero_optimization.stage3_param_persistence_threshold", kImplemented,
     "Stage 3: parameters smaller than this stay whole on every rank.",
     "A layer group whose every parameter is at most this size stays whole on every rank, gathered once per "
     "optimizer step (smaller parameters inside larger groups arrive with their group's one all-gather, where "
     "keeping them whole would save no collective); strata's default is 0, DeepSpeed's 1e5; 'auto' is 10 × "
     "d_model"},
    {"zero_optimization.prefetch_bucket_size", kRefused, "DeepSpeed's other name of stage3_prefetch_bucket_size.",
     "write it as stage3_prefetch_bucket_size, the documented name strata reads"},
    {"zero_optimization.param_persistence_threshold", kRefused,
     "DeepSpeed's other name of stage3_param_persistence_threshold.",
     "write it as stage3_param_persistence_threshold, the documented name strata reads"},
    {"zero_optimization.max_live_parameters", kRefused, "DeepSpeed's other name of stage3_max_live_parameters.",
     "write it as stage3_max_live_parameters, the documented name strata reads"},
    {"zero_optimization.max_reuse_distance", kAccepted, "Other name of stage3_max_reuse_distance.",
     "strata releases each layer group after its use in forward and gathers it again for backward"},
    {"zero_optimization.stage3_model_persistence_threshold", kImplemented,
     "Stage 3: cap on the total size of persistent parameters.",
     "The groups kept whole hold at most this many elements in all (unset: no cap)"},
    {"zero_optimization.model_persistence_threshold", kRefused,
     "DeepSpeed's other name of stage3_model_persistence_threshold.",
     "write it as stage3_model_persistence_threshold, the documented name strata reads"},
    {"zero_optimization.stage3_gather_16bit_weights_on_model_save", kAccepted,
     "Stage 3: gather a whole 16-bit model when saving.",
     "strata's checkpoints hold every tensor, and strata export writes the whole model from any layout"},
    {"zero_optimization.stage3_gather_fp16_weights_on_model_save", kAccepted,
     "Old name of stage3_gather_16bit_weights_on_model_save.",
     "strata export writes the whole model from any checkpoint"},
    {"zero_optimization.gather_16bit_weights_on_model_save", kAccepted,
     "Other name of stage3_gather_16bit_weights_on_model_save.",
     "strata export writes the whole model from any checkpoint"},
    {"zero_optimization.zero_hpz_partition_size", kAtDefault,
     "ZeRO++: a secondary parameter partition within a node.",
     "ZeRO++'s hierarchical partitioning is not implemented", "1"},
    {"zero_optimization.zero_quantized_weights", kAtDefault, "ZeRO++: gather parameters quantized to int8.",
     "quantized communication is not implemented; it would train differently", "false"},
    {"zero_optimization.zero_quantized_nontrainable_weights", kAtDefault,
     "ZeRO++: keep frozen weights quantized.", "strata trains every weight", "false"},
    {"zero_optimization.zero_quantized_gradients", kAtDefault, "ZeRO++: reduce gradients quantized to int4.",
     "quantized communication is not implemented; it would train differently", "false"},
    {"zero_optimization.zeropp_loco_param", kAccepted, "ZeRO++: error feedback of quantized gradients (err_beta, reset_T).",
     "used only with zero_quantized_gradients, which is refused"},
    {"zero_optimization.mics_shard_size", kAtDefault, "MiCS: partition over groups of this many ranks.",
     "MiCS is not implemented; ZeRO partitions over the whole data-parallel group", "-1"},
    {"zero_optimization.mics_hierarchical_params_gather", kAtDefault, "MiCS: gather in two hops.",
     "MiCS is not implemented", "false"},
    {"zero_optimization.memory_efficient_linear", kAccepted, "Stage 3: a linear layer that saves less for backward.",
     "a PyTorch autograd detail; strata's linear layers save only their input"},
    {"zero_optimization.pipeline_loading_checkpoint", kAccepted, "Stage 3: load the checkpoint layer by layer.",
     "strata loads each rank's boxes of each tensor directly"},
    {"zero_optimization.override_module_apply", kAccepted, "Stage 3: wrap nn.Module.apply to gather parameters.",
     "a PyTorch detail"},
    {"zero_optimization.module_granularity_threshold", kAccepted,
     "Stage 3: fetch small modules whole to save hook overhead.", "a PyTorch hook detail; strata has no hooks"},
    {"zero_optimization.stage3_module_granularity_threshold", kAccepted,
     "Other name of module_granularity_threshold.", "a PyTorch hook detail; strata has no hooks"},
    {"zero_optimization.use_all_reduce_for_fetch_params", kAccepted,
     "Stage 3: gather parameters with all-reduce instead of all-gather.", "a communication pattern; values agree"},
    {"zero_optimization.stage3_use_all_reduce_for_fetch_params", kAccepted,
     "Other name of use_all_reduce_for_fetch_params.", "a communication pattern; values agree"},
    {"zero_optimization.stage3_allgather_sequential", kAccepted, "Stage 3: gather parameters one at a time.",
     "a communication pattern; values agree"},
    {"zero_optimization.allgather_sequential", kAccepted, "Other name of stage3_allgather_sequential.",
     "a communication pattern; values agree"},
    {"zero_optimization.log_trace_cache_warnings", kAccepted, "Stage 3: log parameter trace cache misses.",
     "strata's stage 3 follows the layer order, with no trace cache"},
    {"zero_optimization.enable_sanity_checks", kAccepted, "Stage 3: extra internal consistency checks.",
     "strata's own checks always run"},
    {"zero_optimization.save_muon_momentum_buffer_in_memory", kAccepted, "Muon: keep its momentum in memory.",
     "strata does not implement Muon"},
    {"zero_optimization.leaf_module", kAccepted, "Stage 3: module classes fetched whole (MoE blocks).",
     "strata's GPT has no such modules"},
    {"zero_optimization.zenflow", kRefused, "ZenFlow: offloaded updates of unimportant gradients, applied late.",
     "ZenFlow's delayed updates are not implemented; they would train differently. Remove the section"},
    {"zero_allow_untested_optimizer", kAccepted, "Allow ZeRO with an optimizer DeepSpeed has not tested.",
     "strata's ZeRO works with its own Adam and AdamW"},
    {"allgather_size", kAccepted, "All-gather bucket of the legacy boolean form zero_optimization: true.",
     "used only with the legacy boolean zero_optimization, which strata does not read (give a section)"},
    {"zero_force_ds_cpu_optimizer", kAccepted, "Insist on DeepSpeed's CPU Adam when offloading.",
     "strata does not offload yet"},
    // Logging and monitoring.
    {"steps_per_print", kImplemented, "Print progress every this many steps.", "As DeepSpeed"},
    {"wall_clock_breakdown", kImplemented, "Time forward, backward and the step.",
     "As DeepSpeed: per-phase times in the log and the metrics file"},
    {"dump_state", kAccepted, "Print DeepSpeed's state after initialisation.",
     "strata prints its resolved config at start-up"},
    {"memory_breakdown", kAccepted, "Print memory use at points of the step.",
     "strata reports its memory record at start-up and the peak in the metrics"},
    {"log_level", kAccepted, "DeepSpeed's logging level.", "strata logs info on rank 0 and warnings on every rank"},
    {"vocabulary_size", kAccepted, "The vocabulary size some DeepSpeed features read.",
     "strata's vocabulary is model.vocab_size"},
    {"sequence_parallel_size", kAtDefault, "DeepSpeed-Ulysses sequence parallelism degree.",
     "Ulysses is not implemented; strata's sequence parallelism is parallelism.sequence_parallel, over the "
     "tensor-parallel group",
     "1"},
    {"data_parallel_size", kRefused, "The data-parallel size, set by DeepSpeed's integrations.",
     "strata's data-parallel size is what the world size leaves after tensor × pipeline parallelism; remove it"},
    {"dataloader_drop_last", kAccepted, "Drop the last incomplete batch of DeepSpeed's data loader.",
     "strata's loader draws whole sequences and batches only"},
    {"timers", kAccepted, "DeepSpeed's throughput timer (throughput.enabled, throughput.synchronized).",
     "strata logs tokens/s and MFU every steps_per_print"},
    {"tensorboard", kAccepted, "TensorBoard logs (enabled, output_path, job_name).",
     "strata writes no TensorBoard events; its metrics go to logging.metrics_file (JSONL)"},
    {"wandb", kAccepted, "Weights & Biases logging (enabled, group, team, project).",
     "strata does not log to W&B; its metrics go to logging.metrics_file (JSONL)"},
    {"comet", kAccepted, "Comet logging (enabled, project, workspace, api_key, experiment_name, mode, ...).",
     "strata does not log to Comet; its metrics go to logging.metrics_file (JSONL)"},
    {"csv_monitor", kImplemented, "CSV files of the training events, one per event.",
     "As DeepSpeed, beside logging.metrics_file"},
    {"csv_monitor.enabled", kImplemented, "Write the CSV files (rank 0).",
     "As DeepSpeed: Train_Samples_train_loss.csv, _lr, _loss_scale (fp16) and with wall_clock_breakdown the "
     "elapsed_time_ms_* phases, one row per optimizer step at the samples trained on so far"},
    {"csv_monitor.output_path", kImplemented, "Directory of the job's folder.", "As DeepSpeed (\"\": the working directory)"},
    {"csv_monitor.job_name", kImplemented, "The job's folder, inside output_path.", "As DeepSpeed (DeepSpeedJobName)"},
    {"comms_logger", kAccepted, "Log collective calls (enabled, verbose, prof_all, prof_ops, debug).",
     "strata's wall_clock_breakdown reports reduction and wait times"},
    {"flops_profiler", kImplemented, "Per-module FLOPs and latency at one step.",
     "As DeepSpeed's report: summary, top modules per depth, every module; FLOPs from the model's shapes (2 per "
     "parameter per token forward plus the attention scores, the MFU's count), latencies measured per phase with "
     "the device synchronized for that step (not per module)"},
    {"flops_profiler.enabled", kImplemented, "Profile one step.", "As DeepSpeed (rank 0 prints it)"},
    {"flops_profiler.recompute_fwd_factor", kImplemented, "Share of the forward recomputed in backward.",
     "As DeepSpeed: backward counts (2 + factor) forwards"},
    {"flops_profiler.profile_step", kImplemented, "The step profiled.", "As DeepSpeed (default 1)"},
    {"flops_profiler.module_depth", kImplemented, "Deepest module level listed (-1: all).",
     "As DeepSpeed: 0 the model, 1 embeddings, blocks, ln_f and head, 2 the blocks' parts"},
    {"flops_profiler.top_modules", kImplemented, "Modules listed per depth in the aggregated profile.", "As DeepSpeed"},
    {"flops_profiler.detailed", kImplemented, "List every module.", "As DeepSpeed"},
    {"flops_profiler.output_file", kImplemented, "Write the report to this file (null: stdout).",
     "As DeepSpeed (null or unset: the log)"},
    // Activation checkpointing.
    {"activation_checkpointing", kImplemented, "Megatron-style activation checkpointing switches.",
     "model.recompute chooses what strata recomputes; the switches below"},
    {"activation_checkpointing.partition_activations", kImplemented,
     "Partition checkpointed activations over tensor-parallel ranks.",
     "At TP 1 there is nothing to partition and true changes nothing; with TP, strata partitions activations "
     "over the TP ranks as sequence parallelism, so true needs parallelism.sequence_parallel: true and is refused "
     "without it"},
    {"activation_checkpointing.cpu_checkpointing", kImplemented, "Keep checkpointed activations in host memory.",
     "false; true is refused (not supported yet: model.recompute: full keeps the fewest activations)"},
    {"activation_checkpointing.contiguous_memory_optimization", kAccepted,
     "Copy checkpoints into one preallocated buffer against fragmentation.",
     "strata allocates its activation buffers once, before the first step"},
    {"activation_checkpointing.number_checkpoints", kAccepted, "Checkpoints per model (sizes the contiguous buffer).",
     "strata recomputes per layer as model.recompute says"},
    {"activation_checkpointing.synchronize_checkpoint_boundary", kAccepted,
     "Synchronize the device at each checkpoint.", "a device synchronize for debugging; changes no values"},
    {"activation_checkpointing.profile", kAccepted, "Time the checkpoint functions.",
     "wall_clock_breakdown reports strata's forward and backward times, recomputation included"},
    // Pipeline and checkpoints.
    {"pipeline", kAccepted,
     "Pipeline engine options (pipe_partitioned, grad_partitioned, activation_checkpoint_interval, ...).",
     "strata's pipeline is configured under parallelism.pipeline; these transfer options change no values"},
    // DeepSpeed's checkpoint options live in the section strata's own checkpoint keys share.
    {"checkpoint.tag_validation", kAccepted, "Check that every rank saves under the same tag (Warn, Ignore, Fail).",
     "strata's checkpoints are one step directory with a manifest that every rank's shards are checked against"},
    {"checkpoint.load_universal", kAccepted, "Load a universal (layout-free) checkpoint.",
     "every strata checkpoint loads on any layout"},
    {"checkpoint.use_node_local_storage", kAccepted, "Save to storage local to each node.",
     "strata saves under checkpoint.dir, which may be node-local on every node"},
    {"checkpoint.parallel_write", kAccepted, "Write pipeline stages' checkpoints in parallel (pipeline_stage).",
     "every strata rank writes its own shards in parallel"},
    {"checkpoint.writer", kAccepted, "FastPersist checkpoint writer options (type, decoupled, io_buffer_size, ...).",
     "strata writes its shards with its own writer"},
    {"checkpoint.checkpoint_serialization", kAccepted, "Use torch.save's zip serialisation.",
     "strata writes safetensors shards"},
    {"datastates_ckpt", kAccepted, "DataStates asynchronous checkpointing.", "strata writes its own checkpoints"},
    // Features strata does not implement.
    {"sparse_attention", kRefused, "Block-sparse attention (mode, block, num_local_blocks, ...).",
     "strata's attention is dense; sparse attention would train another model. Remove the section"},
    {"elasticity", kWhenEnabled,
     "Elastic training: a batch size valid for a range of GPU counts (enabled, max_train_batch_size, "
     "micro_batch_sizes, min_gpus, max_gpus, ...).",
     "strata's world size is mpirun's; a run resumes on another layout from its checkpoint instead"},
    {"autotuning", kAccepted, "DeepSpeed's autotuner (enabled, fast, arg_mappings, results_dir, tuner_type, ...).",
     "read only by DeepSpeed's launcher in autotuning mode, never by a training run"},
    {"curriculum_learning", kWhenEnabled, "Legacy curriculum learning by sequence length.", kChangesTokens},
    {"data_efficiency", kWhenEnabled, "Data sampling and routing (curriculum, random-LTD).", kChangesTokens},
    {"compression_training", kWhenEnabled,
     "Quantization, pruning and layer reduction during training.",
     "compression is not implemented; ignoring it would train another model. Remove the section or disable it"},
    {"weight_quantization", kRefused, "ZeRO-Inference weight quantization (enabled by default once given).",
     "an inference feature; strata trains in bf16, fp16 or fp32"},
    {"progressive_layer_drop", kWhenEnabled, "Skip layers stochastically during training (enabled, theta, gamma).",
     "not implemented; ignoring it would train differently"},
    {"quantize_training", kWhenEnabled, "MoQ: quantization-aware training.",
     "not implemented; ignoring it would train differently"},
    {"eigenvalue", kWhenEnabled, "Eigenvalue computation for MoQ's schedule.", "not implemented"},
    {"hybrid_engine", kWhenEnabled, "DeepSpeed-Chat's RLHF inference/training engine.", "not implemented"},
    {"nebula", kWhenEnabled, "Azure Nebula asynchronous checkpointing service.",
     "not available; strata writes its own checkpoints"},
    {"aio", kAccepted, "Asynchronous I/O (block_size, queue_depth, thread_count, single_submit, overlap_events, "
                       "use_gds).",
     kNvmeOnly},
    {"compile", kAccepted, "torch.compile settings (deepcompile, backend, kwargs).",
     "strata is compiled ahead of time; there is nothing to compile"},
    {"tensor_parallel", kRefused, "DeepSpeed's AutoTP training (autotp_size, ...).",
     "strata's tensor parallelism is set by parallelism.tensor_model_parallel_size; use that key"},
    {"use_data_before_expert_parallelism", kAccepted, "MoE: data-parallel group order for experts.",
     "strata's GPT has no experts"},
    {"expert_parallel", kWhenEnabled, "AutoEP expert parallelism for MoE models (enabled, autoep_size, ...).",
     "strata's GPT has no experts"},
};

std::vector<DeepSpeedKey> build_table() {
  std::vector<DeepSpeedKey> table(std::begin(kListed), std::end(kListed));
  add_built_entries(table);
  return table;
}

}  // namespace

const std::vector<DeepSpeedKey>& deepspeed_keys() {
  static const std::vector<DeepSpeedKey> table = build_table();
  return table;
}

}  // namespace strata::config_detail
