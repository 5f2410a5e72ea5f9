// Internal pieces of src/train shared between its files: translating the config into the
// model/optimizer settings, checkpoint state, sampling and evaluation.
#pragma once
#include <nlohmann/json.hpp>

#include <string>

#include "checkpoint/checkpoint.h"
#include "config/config.h"
#include "data/data.h"
#include "model/model.h"
#include "optim/optim.h"

namespace strata {

GptDims gpt_dims_from_config(const Config& cfg);
LrScheduleSettings lr_schedule_from_config(const Config& cfg);
AdamWSettings adamw_from_config(const Config& cfg);
std::vector<ParamRange> param_ranges(const Gpt& model);
// Layout-level limits of this build that the config alone cannot express (the world size
// comes from mpirun). Throws UserError.
void check_runnable(const Config& cfg, int world_size);

// Everything a checkpoint must restore besides tensors.
struct LoopState {
  int64_t step = 0;                 // optimizer steps completed
  int64_t scheduler_iteration = -1; // LrSchedule::iteration()
  int64_t optimizer_steps = 0;      // AdamW::steps_taken()
  RngState sample_rng;
};

nlohmann::json model_meta(const GptDims& dims);
std::string save_training_checkpoint(const Config& cfg, int64_t step, const LoopState& state, Gpt& model,
                                     AdamW& optimizer, const SaveContext& context);
// Loads parameters and optimizer state into the model/optimizer laid out as now; returns the
// loop state. Throws UserError when the checkpoint's model does not match.
LoopState load_training_checkpoint(const std::string& path, const std::string& source_key, Gpt& model,
                                   AdamW& optimizer, int rank);
// Writes grads with HF names (wte cut to vocab_size rows) to a safetensors file.
void dump_gradients(const std::string& path, Gpt& model);

// Mean loss over `batches` micro-batches read from the start of the split.
double evaluate_loss(Gpt& model, const TokenDataset& data, int seq_len, int micro_batch, int64_t batches);
// Continues `prompt` (byte-level text) by `count` tokens sampled at temperature 1.
std::string sample_text(Gpt& model, const std::string& prompt, int count, Rng& rng);

}  // namespace strata
