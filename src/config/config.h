// Public header of src/config: the typed run configuration (a superset of DeepSpeed's
// ds_config plus strata's own sections), its YAML/JSON loader with `--set` overrides,
// validation that reports every problem at once, and the values derived from it.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/model.h"
#include "optim/optim.h"
#include "pipeline/pipeline.h"

namespace strata {

enum class OptimizerType { AdamW, Adam };
enum class WarmupType { Log, Linear };
enum class OffloadDevice { None, Cpu, Nvme };
enum class PipelinePartition { Uniform, Parameters, Explicit };
enum class DeviceKind { Auto, Cpu, Cuda };
enum class CommBackend { Auto, Nccl, Mpi };

// The spelling each enum value has in a config file (the types the config does not declare are
// those of the modules that use them: LrScheduleType, ActivationRecompute, AttentionProbabilities,
// PipeSchedule).
const char* to_string(OptimizerType v);
const char* to_string(LrScheduleType v);
const char* to_string(WarmupType v);
const char* to_string(OffloadDevice v);
const char* to_string(ActivationRecompute v);
const char* to_string(AttentionProbabilities v);
const char* to_string(PipeSchedule v);
const char* to_string(PipelinePartition v);
const char* to_string(DeviceKind v);
const char* to_string(CommBackend v);

// `optimizer.params`: torch.optim.Adam(W) arguments, as in ds_config.
struct AdamParams {
  /// Peak learning rate (the schedule's base; WarmupLR uses its own warmup_max_lr instead).
  double lr = 1e-3;
  /// Exponential decay rates of the first and second moment estimates.
  std::array<double, 2> betas{0.9, 0.999};
  /// Added to the denominator sqrt(v̂) + eps for numerical stability.
  double eps = 1e-8;
  /// Weight decay coefficient (applied to parameters whose ParamSpec allows decay).
  double weight_decay = 0.01;
  /// Only for type Adam: true = decoupled decay (AdamW), false = L2 term added to the gradient.
  bool adam_w_mode = true;
};

// `optimizer`.
struct OptimizerConfig {
  /// `AdamW` or `Adam` (case-insensitive in the file).
  OptimizerType type = OptimizerType::AdamW;
  /// Hyper-parameters.
  AdamParams params;
};

// `scheduler.params`: the union of the parameters of DeepSpeed's three warmup schedulers;
// only those belonging to `scheduler.type` may appear in a file.
struct SchedulerParams {
  /// WarmupLR, WarmupDecayLR: learning rate at the start of warmup.
  double warmup_min_lr = 0.0;
  /// WarmupLR, WarmupDecayLR: learning rate reached at the end of warmup.
  double warmup_max_lr = 1e-3;
  /// All types: warmup length in optimizer steps (the LR code clamps it to at least 2, as DeepSpeed).
  int64_t warmup_num_steps = 1000;
  /// All types: `log` or `linear` warmup curve.
  WarmupType warmup_type = WarmupType::Log;
  /// WarmupDecayLR, WarmupCosineLR (required there): step at which the decay reaches its end.
  std::optional<int64_t> total_num_steps;
  /// WarmupCosineLR: fraction of `optimizer.params.lr` at the start of warmup.
  double warmup_min_ratio = 0.0;
  /// WarmupCosineLR: fraction of `optimizer.params.lr` at the end of the cosine decay.
  double cos_min_ratio = 1e-4;
};

// `scheduler`; no section in the file means a constant learning rate.
struct SchedulerConfig {
  /// Constant (no section), WarmupLR, WarmupDecayLR or WarmupCosineLR.
  LrScheduleType type = LrScheduleType::Constant;
  /// Parameters of the chosen type.
  SchedulerParams params;
};

// `fp16`: DeepSpeed's fp16 mode with dynamic loss scaling.
struct Fp16Config {
  /// Train with fp16 parameters/activations and fp32 master weights.
  bool enabled = false;
  /// 0 = dynamic loss scaling; any other value is a fixed scale.
  double loss_scale = 0.0;
  /// The dynamic scale starts at 2^initial_scale_power.
  int initial_scale_power = 16;
  /// Overflow-free steps after which the dynamic scale doubles.
  int loss_scale_window = 1000;
  /// Overflows tolerated before the scale is halved.
  int hysteresis = 2;
  /// Restore the hysteresis budget after every overflow-free step instead of once per window.
  bool consecutive_hysteresis = false;
  /// The dynamic scale never drops below this.
  double min_loss_scale = 1.0;
};

// `bf16`.
struct Bf16Config {
  /// Train with bf16 parameters/activations, fp32 master weights, gradient buffer and Adam state.
  bool enabled = false;
};

// `zero_optimization.offload_optimizer` / `offload_param`.
struct OffloadConfig {
  /// none, cpu or nvme.
  OffloadDevice device = OffloadDevice::None;
  /// Use page-locked host memory for the offloaded tensors.
  bool pin_memory = false;
  /// offload_optimizer only: the share of the rank's cores (the node's cores over its ranks)
  /// the host AdamW runs on, at least one thread.
  double cpuadam_cores_perc = 0.9;
  /// device nvme: the directory of the state files (a local disk).
  std::string nvme_path = "/local_nvme";
  /// device nvme: pieces of state in host memory at once (offload_param: layer groups' pieces,
  /// at least 3).
  int buffer_count = 4;
};

// `zero_optimization`: ZeRO partitioning over the data-parallel axis.
struct ZeroConfig {
  /// 0 = none, 1 = optimizer state, 2 = + gradients, 3 = + parameters.
  int stage = 0;
  /// Overlap gradient reduction with backward; unset means true for stage 3, false otherwise
  /// (resolve_config fills it in).
  std::optional<bool> overlap_comm;
  /// Copy gradients into one contiguous buffer as they are produced (strata always does;
  /// false is not supported yet).
  bool contiguous_gradients = true;
  /// Reduce gradients with reduce-scatter rather than all-reduce (stages 1-2); false is not
  /// supported yet.
  bool reduce_scatter = true;
  /// Elements per gradient-reduction bucket.
  int64_t reduce_bucket_size = 500000000;
  /// Elements per parameter all-gather bucket. strata gathers parameters in the gradient
  /// reduction buckets, so unset means reduce_bucket_size (resolve_config fills it in) and any
  /// other value is refused as not supported yet.
  std::optional<int64_t> allgather_bucket_size;
  /// Stage 3: the most elements gathered ahead of use. strata prefetches the next layer group
  /// when it fits (unset: whatever its size).
  std::optional<int64_t> stage3_prefetch_bucket_size;
  /// Stage 3: a prefetch must leave at most this many elements gathered (unset: no bound).
  std::optional<int64_t> stage3_max_live_parameters;
  /// Stage 3: a layer group whose every parameter has at most this many elements stays whole on
  /// every rank between optimizer steps (DeepSpeed keeps such parameters whole; its default is
  /// 1e5, strata's 0 keeps every group partitioned).
  int64_t stage3_param_persistence_threshold = 0;
  /// Stage 3: the groups kept whole hold at most this many elements in all (unset: no bound).
  std::optional<int64_t> stage3_model_persistence_threshold;
  /// Where optimizer state lives.
  OffloadConfig offload_optimizer;
  /// Where stage-3 parameters live.
  OffloadConfig offload_param;
};

// `csv_monitor`: DeepSpeed's CSV files of the training events.
struct CsvMonitorConfig {
  /// Write them (rank 0).
  bool enabled = false;
  /// Directory the job's folder goes in ("" = the working directory).
  std::string output_path;
  /// The job's folder, inside output_path.
  std::string job_name = "DeepSpeedJobName";
};

// `flops_profiler`: DeepSpeed's per-module FLOPs and latency report at one step.
struct FlopsProfilerConfig {
  /// Print the report (rank 0).
  bool enabled = false;
  /// The step it profiles (1 = the first).
  int64_t profile_step = 1;
  /// Deepest module level listed (-1: all; the model, its blocks, their parts).
  int module_depth = -1;
  /// Modules listed per depth in the aggregated profile.
  int top_modules = 1;
  /// Also list every module.
  bool detailed = true;
  /// Write the report to this file instead of the log (unset or null: the log).
  std::optional<std::string> output_file;
  /// Forward FLOPs recomputed in backward, as a share of the forward (backward counts 2 + this).
  double recompute_fwd_factor = 0.0;
};

// `activation_checkpointing`: the DeepSpeed switches that would change what strata does (its other
// keys change nothing in strata and are accepted as such; model.recompute chooses recomputation).
struct ActivationCheckpointingConfig {
  /// Partition checkpointed activations across tensor-parallel ranks: nothing to partition at
  /// TP 1; with TP it is what parallelism.sequence_parallel does, which it then requires.
  bool partition_activations = false;
  /// Keep checkpointed activations in host memory (not supported yet: false).
  bool cpu_checkpointing = false;
};

// `model`: the GPT-2-style network.
struct ModelConfig {
  /// gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1558m, or empty for explicit dimensions.
  std::string preset;
  /// Transformer blocks (unset = the preset's; resolve_config fills it in).
  std::optional<int> n_layer;
  /// Attention heads (unset = the preset's).
  std::optional<int> n_head;
  /// Embedding width C (unset = the preset's).
  std::optional<int> d_model;
  /// Tokens in the vocabulary before padding.
  int vocab_size = 50257;
  /// Context length T.
  int seq_len = 1024;
  /// Activation recomputation in backward: none, selective (attention core) or full (whole layer).
  ActivationRecompute recompute = ActivationRecompute::None;
  /// bf16 attention on tensor cores (CUDA, head size 64 or 128): the softmax probabilities and
  /// their gradients enter the 16-bit products rounded to bf16 once (rounded, FlashAttention's
  /// numerics) or as a bf16 hi + lo pair (split: closer to fp32, slower). No effect elsewhere.
  AttentionProbabilities attention_probabilities = AttentionProbabilities::Rounded;
  /// A HuggingFace GPT-2 folder (config.json, model.safetensors or sharded safetensors) whose
  /// weights a fresh run starts from (fine-tuning); n_layer, n_head and d_model, when neither
  /// given nor set by a preset, are taken from its config.json. Empty: random initialisation.
  std::string init_from;
};

// `parallelism.pipeline`.
struct PipelineConfig {
  /// 1f1b, gpipe or interleaved.
  PipeSchedule schedule = PipeSchedule::OneFOneB;
  /// Model chunks per pipeline rank (interleaved schedule).
  int virtual_stages = 1;
  /// How layers are assigned to stages: uniform (equal layer counts, the remainder to the middle
  /// stages), parameters (balanced parameter counts), or a list of layers per stage (per model
  /// chunk with virtual stages) that sums to model.n_layer, e.g. [3, 4, 4, 3].
  PipelinePartition partition = PipelinePartition::Uniform;
  std::vector<int> partition_layers;  // the list, when partition is Explicit
};

// `parallelism`: the TP × PP part of the rank grid; DP is world / (TP × PP).
struct ParallelismConfig {
  /// Tensor-parallel ranks (Megatron column/row split).
  int tensor_model_parallel_size = 1;
  /// Pipeline stages.
  int pipeline_model_parallel_size = 1;
  /// Split the residual stream's token rows (layernorms, residual adds) over the TP ranks
  /// between the linear layers; TP must divide micro-batch × seq_len. No effect at TP = 1.
  bool sequence_parallel = false;
  /// Pipeline schedule settings.
  PipelineConfig pipeline;
};

// One source of training data: a glob of token shards and its weight in a blend.
struct DataSource {
  std::string path;
  /// Relative share of the blend's sequences (the shares are the weights over their sum).
  double weight = 1;
  bool operator==(const DataSource& o) const { return path == o.path && weight == o.weight; }
};

// `data`: llm.c-format token shards.
struct DataConfig {
  /// The training shards: one glob (written as a string), or several sources, each
  /// {path: GLOB, weight: W}, whose sequences are blended in proportion to their weights.
  std::vector<DataSource> train;
  /// Glob pattern of the validation shards (empty = no evaluation data).
  std::string val;
  /// Shuffle the global sequence order (with train.seed, identically on every rank).
  bool shuffle = false;
  /// A GPT-2 BPE tokenizer (tokenizer.json, vocab.json + merges.txt, their folder, or a tiktoken
  /// rank file): samples are decoded, and logging.sample_prompt encoded, with it.
  std::string tokenizer;
};

// `train`: the loop.
struct TrainConfig {
  /// Optimizer steps to run.
  int64_t iters = 1000;
  /// Evaluate every this many steps (0 = never).
  int64_t eval_interval = 0;
  /// Batches per evaluation.
  int64_t eval_iters = 20;
  /// Seed of parameter initialisation and data shuffling.
  int64_t seed = 1234;
  /// Steps in a row whose gradient is not finite (inf or NaN; skipped, like an fp16 overflow)
  /// that the run tolerates; one more stops it (exit 1) without saving.
  int64_t max_nonfinite_steps = 3;
};

// `checkpoint`.
struct CheckpointConfig {
  /// Directory of step_XXXXXXXX/ folders (empty = no checkpoints).
  std::string dir;
  /// Save every this many steps (0 = only at the end and on a signal).
  int64_t save_interval = 0;
  /// Also save before the first step.
  bool save_initial = false;
  /// Keep only the newest this many checkpoints (0 = keep all).
  int keep_last = 0;
  /// auto (latest in dir if any), none (start fresh), or the path of a checkpoint.
  std::string resume = "auto";
  /// Let a run start in a dir that holds another run's checkpoints, deleting them first.
  bool overwrite = false;
};

// `logging`.
struct LoggingConfig {
  /// JSONL file of per-step metrics, evaluations and samples (empty = none).
  std::string metrics_file;
  /// Generate a text sample every this many steps (0 = never).
  int64_t sample_interval = 0;
  /// Tokens per sample.
  int sample_tokens = 200;
  /// Text the sample continues (empty = starts after a newline).
  std::string sample_prompt;
};

// `comm`.
struct CommConfig {
  /// auto (NCCL on CUDA, MPI otherwise), nccl or mpi.
  CommBackend backend = CommBackend::Auto;
};

// Values computed from the config and the world size by resolve_config.
struct Derived {
  /// Ranks in the job.
  int world_size = 0;
  /// Data-parallel ranks: world_size / (tp_size × pp_size).
  int dp_size = 0;
  /// Tensor-parallel ranks.
  int tp_size = 0;
  /// Pipeline stages.
  int pp_size = 0;
  /// Sequences per micro-batch per data-parallel rank.
  int micro_batch = 0;
  /// Micro-batches per optimizer step.
  int grad_accum = 0;
  /// Sequences per optimizer step over all DP ranks (= train_batch_size).
  int global_batch = 0;
  /// global_batch × seq_len.
  int64_t tokens_per_step = 0;
  /// vocab_size rounded up to a multiple of 128 × TP.
  int padded_vocab = 0;
  /// Parameters of the model as built (padded vocabulary, tied LM head).
  int64_t n_params = 0;
  /// The same with the unpadded vocabulary (the figure papers quote).
  int64_t n_params_unpadded = 0;
  /// Training FLOPs per token: 6·n_params + 6·n_layer·d_model·seq_len.
  int64_t flops_per_token = 0;
};

// What strata did with one DeepSpeed key of a config file.
struct DeepSpeedKeyNote {
  /// Dotted path, e.g. "zero_optimization.stage".
  std::string path;
  /// The value as written (lists and maps abbreviated).
  std::string value;
  /// implemented, auto (filled in), accepted (changes nothing) or disabled (a feature section
  /// with nothing enabled).
  std::string treatment;
  /// What strata does with it; for auto, the value it took and where from.
  std::string detail;
};

// A whole run configuration; section structs mirror the file's sections.
struct Config {
  /// Sequences per optimizer step over all DP ranks (any two batch keys determine the third).
  std::optional<int> train_batch_size;
  /// Sequences per forward/backward on one DP rank.
  std::optional<int> train_micro_batch_size_per_gpu;
  /// Micro-batches accumulated per optimizer step.
  std::optional<int> gradient_accumulation_steps;
  /// Optimizer.
  OptimizerConfig optimizer;
  /// Learning-rate schedule.
  SchedulerConfig scheduler;
  /// fp16 mixed precision.
  Fp16Config fp16;
  /// bf16 mixed precision.
  Bf16Config bf16;
  /// ZeRO.
  ZeroConfig zero_optimization;
  /// The dtype the gradients' data-parallel reductions travel in: fp32, or fp16/bf16 (half the
  /// bytes, rounded). DeepSpeed's default is the training dtype; strata's is fp32.
  DType communication_data_type = DType::F32;
  /// Clip the global gradient norm to this (0 = off).
  double gradient_clipping = 0.0;
  /// Print a log line every this many steps (0 = never).
  int64_t steps_per_print = 10;
  /// Report per-phase times (forward, backward, reduce, optimizer, wait).
  bool wall_clock_breakdown = false;
  /// DeepSpeed's CSV monitor.
  CsvMonitorConfig csv_monitor;
  /// DeepSpeed's flops profiler.
  FlopsProfilerConfig flops_profiler;
  /// DeepSpeed activation checkpointing switches.
  ActivationCheckpointingConfig activation_checkpointing;
  /// Network shape.
  ModelConfig model;
  /// Rank grid.
  ParallelismConfig parallelism;
  /// Training/validation data.
  DataConfig data;
  /// Loop lengths and seed.
  TrainConfig train;
  /// Checkpointing.
  CheckpointConfig checkpoint;
  /// Metrics and samples.
  LoggingConfig logging;
  /// auto (CUDA when this process sees a usable GPU, else the CPU), cpu or cuda.
  DeviceKind device = DeviceKind::Auto;
  /// Communication backend.
  CommConfig comm;
  /// Filled by resolve_config; not part of the file format.
  Derived derived;
  /// Filled by the loader: the file's DeepSpeed keys in file order, each with what strata did
  /// with it; not part of the file format.
  std::vector<DeepSpeedKeyNote> deepspeed_keys;
};

// Named model shapes. Every preset uses the default vocab_size (50257) and seq_len (1024),
// so those two keys need no preset values of their own.
struct ModelPreset {
  /// The `model.preset` spelling, e.g. "gpt2-124m".
  const char* name;
  /// Transformer blocks.
  int n_layer;
  /// Attention heads.
  int n_head;
  /// Embedding width.
  int d_model;
};
const std::vector<ModelPreset>& model_presets();


// Parses YAML (or JSON: a DeepSpeed ds_config JSON is valid YAML) text/file, applies `--set`
// overrides ("a.b.c=value"), validates, resolves. Throws UserErrors listing EVERY problem,
// each "key.path: message" (a YAML syntax error is reported alone, with line and column).
Config load_config_file(const std::string& path, const std::vector<std::string>& overrides, int world_size);
Config load_config_text(const std::string& yaml_text, const std::vector<std::string>& overrides,
                        int world_size, const std::string& source_name);
// Every problem of a typed config at once, "key.path: message", in a fixed order.
std::vector<std::string> validate_config(const Config& cfg, int world_size);
// Fills unset batch keys, preset dimensions and overlap_comm, and cfg.derived. Throws
// UserErrors when validate_config reports problems.
void resolve_config(Config& cfg, int world_size);
// The config in file format with every key (defaults filled); load_config_text re-parses it
// (at the same world size) into an identical Config, so checkpoints store this text.
std::string config_to_yaml(const Config& cfg);
// The `derived:` block for `strata config`.
std::string derived_to_yaml(const Config& cfg);
// The same as YAML comments ("# derived:"), so that a resolved config printed with them (by
// strata config, and in strata train's banner) loads back as the same config.
std::string derived_as_comments(const Config& cfg);
// The notes a run prints at start-up: each DeepSpeed key that was filled in (auto) or that
// changes nothing in strata (accepted, disabled), "path: what strata did".
std::vector<std::string> deepspeed_notes(const Config& cfg);
// Settings that run but most likely do not do what was meant (a schedule that ends before the
// run, or a run that ends in its warmup), each "key: what happens", for start-up warnings.
std::vector<std::string> config_warnings(const Config& cfg);
// Every DeepSpeed key of the file with its value and treatment, one aligned line each.
std::string explain_deepspeed(const Config& cfg);
// The same for a config file, also when it does not load (a ds_config without strata's model
// keys, or with a refused key): then every DeepSpeed key is listed as written, refused ones with
// their reason, and `problems` holds why the file does not load.
struct DeepSpeedExplanation {
  std::string listing;
  std::vector<std::string> problems;
};
DeepSpeedExplanation explain_deepspeed_file(const std::string& path, const std::vector<std::string>& overrides,
                                            int world_size);
// Every key of DeepSpeed's config with its meaning and what strata does, as a Markdown table
// (the README's; `strata config --deepspeed-keys` prints it).
std::string deepspeed_keys_markdown();

}  // namespace strata
