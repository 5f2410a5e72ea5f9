// Public header of src/train: the `strata train` subcommand — the training loop with
// gradient accumulation, clipping, LR schedule, evaluation, samples, metrics, signals
// and checkpoints.
#pragma once
#include <string>
#include <vector>

#include "comm/comm.h"

namespace strata {

struct TrainOptions {
  std::string config_path;
  std::vector<std::string> overrides;  // --set a.b=c
  std::string dump_grads_path;         // --dump-grads: first step's gradients, HF names
};

// Runs a whole training job on this rank; returns the process exit code.
int run_train(const MpiRuntime& mpi, const TrainOptions& options);

}  // namespace strata
