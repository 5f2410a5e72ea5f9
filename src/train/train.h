// Public header of src/train: the `strata train` subcommand — the training loop with
// gradient accumulation, clipping, LR schedule, evaluation, samples, metrics, signals
// and checkpoints.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "config/config.h"
#include "sharding/sharding.h"

namespace strata {

struct TrainOptions {
  std::string config_path;
  std::vector<std::string> overrides;  // --set a.b=c
  std::string dump_grads_path;         // --dump-grads: first step's gradients, HF names
};

// Runs a whole training job on this rank; returns the process exit code.
int run_train(const MpiRuntime& mpi, const TrainOptions& options);
// `strata sample` and `strata eval` (checkpoint_use.cpp): a checkpoint's model used as it is.
// `checkpoint` is a step dir, a checkpoint folder (its latest) or a HuggingFace GPT-2 folder; the
// config is the one the checkpoint saved, laid out as DP over the job's ranks, then `overrides`.
struct SampleOptions {
  std::string checkpoint;
  std::vector<std::string> overrides;
  std::string prompt;     // continued by each sample ("" : the tokenizer's end of text, or a newline)
  std::string tokenizer;  // instead of the config's data.tokenizer
  int tokens = 200;       // generated per sample
  int count = 1;
  int64_t seed = 1234;
  double temperature = 1.0;  // 0: the most likely token
  int top_k = 0;             // 0: every token
};
struct EvalOptions {
  std::string checkpoint;
  std::vector<std::string> overrides;
  std::string data;   // token shards (a glob); "" : the config's data.val
  int64_t iters = 0;  // global batches; 0: the config's train.eval_iters
};
// Each returns the process exit code; every rank of the job calls it.
int run_sample(const MpiRuntime& mpi, const SampleOptions& options);
int run_eval(const MpiRuntime& mpi, const EvalOptions& options);

// From the start of `strata train` (before MPI starts) until its loop: a stop signal ends the
// process at once with 128 + signal, leaving the exit file launch/strata-mpirun reads.
void install_setup_signal_handlers();

// Bytes one rank will allocate, estimated from the config before anything is allocated
// (memory_check.cpp): Engine::memory's terms and the model's activation arenas, for the pipeline
// stage that needs the most. The start-up check, the memory record and `strata plan` all use it.
MemoryRecord estimate_rank_memory(const Config& cfg, Device device);
// With as many ranks on a node as cores, BLAS threads only fight each other: the node's cores are
// shared among its ranks (unless OPENBLAS_NUM_THREADS says otherwise). Training and calibration
// run their products the same way.
void limit_blas_threads(const MpiRuntime& mpi);
// The layers of each model chunk (pp × virtual stages of them) as the engine will cut them;
// empty without pipeline parallelism.
std::vector<ChunkLayers> pipeline_partition_of(const Config& cfg);

// `strata config`: for a blend of several data.train sources, comment lines with each source's
// tokens, weight, share and epochs per run (or why its shards cannot be read).
void print_blend_report(const Config& cfg);

}  // namespace strata
