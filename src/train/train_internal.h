// Internal pieces of src/train shared between its files: translating the config into the
// model/optimizer settings, checkpoint state, sampling and evaluation.
#pragma once
#include <nlohmann/json.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "backend/backend.h"
#include "checkpoint/checkpoint.h"
#include "comm/comm.h"
#include "config/config.h"
#include "data/data.h"
#include "model/model.h"
#include "optim/optim.h"
#include "engine/engine.h"
#include "train/train.h"

namespace strata {

// Where this rank trains (see device_setup.cpp): the backend, the communicator kind of the
// rank groups, and for device memory how the communicators reach it (it refers to the
// backend, which must outlive them).
struct TrainingDevice {
  std::unique_ptr<Backend> backend;
  CommBackendKind comm = CommBackendKind::Mpi;
  std::optional<DeviceAccess> access;
  std::string description;
};
// device: auto picks CUDA when a GPU is visible; cuda uses GPU local_rank mod the GPU count;
// STRATA_SIMULATE_DEVICE=1 (with device cpu or auto) picks the guarded CPU backend. Throws
// UserError for an impossible combination (nccl without a GPU per rank, cuda without a GPU).
TrainingDevice make_training_device(const Config& cfg, const MpiRuntime& mpi);
// Collective over the world, after every rank made its TrainingDevice: ranks on different kinds
// of device are a UserError on every rank; under comm.backend: auto, when some ranks cannot use
// NCCL (they share a GPU), every rank switches to MPI. Returns the communicator kind.
CommBackendKind agree_on_devices(const MpiRuntime& mpi, const Config& cfg, TrainingDevice& device);

GptDims gpt_dims_from_config(const Config& cfg);
LrScheduleSettings lr_schedule_from_config(const Config& cfg);
AdamWSettings adamw_from_config(const Config& cfg);
// `device`: the backend's (offloading the optimizer state is a no-op on the CPU, where it already
// lives in host memory); ranks_on_node share the node's cores for the host AdamW.
EngineSettings engine_settings_from_config(const Config& cfg, Device device = Device::CPU, int ranks_on_node = 1);
// Limits of this build that the config alone cannot express (the world size comes from
// mpirun; --dump-grads needs the whole gradient on one rank). Throws UserError.
void check_runnable(const Config& cfg, int world_size, bool dump_grads);
// data.train's sources, each validated, in a sampler of its own: source 0 with train.seed (so a
// one-source blend reads what its plain glob reads), source i with a seed of its own.
TrainSequences open_train_sequences(const Config& cfg, int vocab_size, int seq_len);
// A val shard that is also a train shard (data.train 'dir/*.bin' matches val_000000.bin) is a user
// error: the validation loss would be measured on what the model trains on.
void check_val_apart(const TrainSequences& train, const TokenDataset& val);
// One line per source of a blend: its glob, tokens, shards, weight, share of the sequences and
// the epochs of it that `iters` steps of `global_batch` sequences read.
std::vector<std::string> describe_blend(const TrainSequences& data, int64_t iters, int64_t global_batch);

// The resident memory of this process now (VmRSS), or the most it has held (peak: VmHWM), in
// bytes; 0 where not known.
int64_t process_rss_bytes(bool peak);
// UserError naming the estimate and what the rank has, when it does not fit the rank's share of
// its GPU's free memory (or, on the CPU, of its node's available memory).
void check_memory_fits(const Config& cfg, const MpiRuntime& mpi, const TrainingDevice& device);

// Everything a checkpoint must restore besides tensors.
struct LoopState {
  int64_t step = 0;                 // optimizer steps completed
  int64_t scheduler_iteration = -1; // LrSchedule::iteration()
  int64_t optimizer_steps = 0;      // AdamW::steps_taken()
  RngState sample_rng;
  std::optional<LossScalerState> loss_scaler;  // fp16 runs only
  // Global sequence the next step's batch starts at (BatchLoader::first_sequence_of); -1 when
  // a checkpoint lacks it (then step × the global batch).
  int64_t next_sequence = -1;
  // What fixed the order of the training sequences ({"tokens", "shuffle", "seed"}), compared on
  // resume; null when a checkpoint lacks it.
  nlohmann::json data_order;
  // The run's identity (checkpoint.h, new_run_id), kept across resumes; "" in a checkpoint saved
  // before run ids.
  std::string run_id;
  // The reports due at `step` ("eval", "sample") that a stop cut short: a resumed run makes them
  // first, so that it records what an uninterrupted run does (the sample RNG is saved as it was
  // before the cut sample).
  std::vector<std::string> pending_reports;
};

nlohmann::json model_meta(const GptDims& dims);
// Collective over all ranks: each writes the state its engine owns.
std::string save_training_checkpoint(const Config& cfg, int64_t step, const LoopState& state, Engine& engine,
                                     const SaveContext& context);
// Reads parameters and optimizer state into the engine laid out as now (any DP size and ZeRO
// stage may have saved them) and, for an fp16 run, restores the loss scaler when the checkpoint
// has one; returns the loop state. Rank-local (no collective): every rank then calls
// engine.params_loaded(), which re-derives the working copy collectively. Throws UserError when
// the checkpoint is missing, damaged or of another model.
// The bytes of this rank's file in a checkpoint of the engine's state.
uint64_t checkpoint_bytes_of_rank(Engine& engine);
LoopState read_training_checkpoint(const std::string& path, const std::string& source_key, Engine& engine, int rank);
// model.init_from: the parameters this rank holds, from a HuggingFace GPT-2 folder (every
// tensor of the model present with its shape, no tensor the model lacks; wpe may hold more
// positions than seq_len, wte more rows than vocab_size: the first are read). The optimizer state
// is left as it is (fresh); call engine.params_loaded() after. UserError on any mismatch, naming
// source_key.
void read_pretrained_weights(const std::string& dir, Engine& engine, const std::string& source_key = "model.init_from");
// Writes grads with HF names (wte cut to vocab_size rows) to a safetensors file, divided by
// `divisor` (the loss scale they carry under fp16, over the multiplier still to come after the
// data-parallel reduction) so that they are the true gradients.
void dump_gradients(const std::string& path, Gpt& model, double divisor);

// Asked by every rank at the same points of a long collective task (before each evaluation
// round, each sampled token); true when the ranks agreed to stop, and the task is abandoned.
using StopCheck = std::function<bool()>;

// The sequences an evaluation reads: train.eval_iters global batches, as Megatron counts them (a
// set that does not move with the micro-batch, so the points of a sweep over it compare).
int64_t eval_sequences(int64_t eval_iters, int64_t global_batch);
// Mean loss over the split's first `sequences` sequences (all of them if it has fewer), read in
// micro-batches: the same set, and the same value, whatever the micro-batch or layout. The DP
// replicas share the batches (the TP ranks of one replica run each batch together) and gather the
// per-batch losses over the world (ordered TP fastest, then DP), summed in batch order, so the
// result is the single-rank value on every rank. With ZeRO-3 every DP rank runs the same number
// of forwards (a forward communicates over DP). Each batch runs the engine's forward (every
// pipeline stage and TP rank of a replica calls it); a batch's loss counts from the replica's
// first TP rank on the last stage. nullopt when `stop` interrupted it.
std::optional<double> evaluate_loss(Engine& engine, const TokenDataset& data, int seq_len, int micro_batch,
                                    int64_t sequences, Topology& topology, const StopCheck& stop);
// The tokens a sample continues: logging.sample_prompt encoded with data.tokenizer, or byte by
// byte in a byte-level vocabulary (256 ids). Without a prompt: the tokenizer's end of text, a
// newline byte, or the last id (GPT-2's end of text) of a larger vocabulary without a tokenizer
// (where the config refuses a text prompt).
std::vector<int32_t> sample_start(const Config& cfg, const BpeTokenizer* tokenizer);
// Sampled tokens as text: the tokenizer's decoding, or a byte-level vocabulary's bytes; nullopt
// for a larger vocabulary without a tokenizer (strata's text encoding is byte-level: ids only).
std::optional<std::string> sample_as_text(const Config& cfg, const BpeTokenizer* tokenizer,
                                          const std::vector<int32_t>& tokens);
// How the next token is drawn from the last position's logits: at `temperature` (the logits
// divided by it; 0 takes the most likely token, the lowest id among equals, and draws nothing
// from the RNG) from the `top_k` most likely tokens (0: all of them).
struct SamplingRule {
  double temperature = 1.0;
  int top_k = 0;
};
// The next token from the last position's `logits` (the real vocabulary's, fp32) under `rule`;
// `probs` is scratch of their size. At temperature 1 over every token it is the plain softmax
// draw. Logits are finite (a NaN one is never drawn).
int32_t draw_token(const std::vector<float>& logits, const SamplingRule& rule, Rng& rng, std::vector<double>& probs);
// Continues `start` by `count` tokens drawn by `rule` and returns those `count` tokens.
// Under TP every rank of the group calls it (the logits' slices are gathered) and gets the same
// tokens. nullopt when `stop` interrupted it.
std::optional<std::vector<int32_t>> sample_tokens(Engine& engine, std::vector<int32_t> start, int count, Rng& rng,
                                                  const StopCheck& stop, const SamplingRule& rule = {});
// Collective: every rank's token count of each source (keys[i]: its config key or flag) equals
// rank 0's; else a UserError on every rank naming the source. Data read on each node must be one
// corpus: the global order assigns the ranks their sequences.
void check_same_token_counts(const MpiRuntime& mpi, const std::vector<std::string>& keys,
                             const std::vector<int64_t>& tokens);
// data.tokenizer loaded and checked against the model's vocabulary; nullopt when none is set.
std::optional<BpeTokenizer> open_tokenizer(const Config& cfg);

}  // namespace strata
