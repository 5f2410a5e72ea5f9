// Internal pieces of src/plan shared between its files: the shapes the time model reads (taken
// from a resolved config by predict.cpp) and the costs it gives back.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "plan/plan.h"

namespace strata {

// What one rank computes, per micro-batch.
struct ModelShape {
  int d_model = 0, n_head = 0, seq_len = 0, padded_vocab = 0;
  int micro_batch = 1, grad_accum = 1;
  int tp = 1, pp = 1, virtual_stages = 1;
  bool sp = false;
  PipeSchedule schedule = PipeSchedule::OneFOneB;
  ActivationRecompute recompute = ActivationRecompute::None;
  double elem_bytes = 2;            // the working dtype's
  double peak_tflops = 0;           // this rank's (its share of a CPU node's)
  double memory_bandwidth_gbs = 0;  // this rank's
  bool tp_across_nodes = false, pp_across_nodes = false;
  int tp_ranks_per_node = 1;        // of a TP group spanning nodes: its ranks on each node
  int layer_groups = 1;             // ZeRO 3's gather units on a rank
};

// A model chunk: its layers and whether it holds the embeddings or the head.
struct ChunkShape {
  int layers = 0;
  bool embedding = false, head = false;
};
struct StageShape {
  std::vector<ChunkShape> chunks;
  double params = 0;  // parameters a rank of this stage holds (its TP slice)
};

// The data-parallel side of a layout.
struct DpShape {
  int ranks = 1;
  int zero_stage = 0;
  bool overlap_comm = false;
  bool across_nodes = false;
  int ranks_per_node = 1;  // of a DP group spanning nodes: its ranks on each node
  double comm_bytes = 4;  // per gradient element in the reductions
  double bucket_elements = 5e8;
  bool offload_optimizer = false, offload_param = false;
};

// Seconds per micro-batch of one chunk on one rank.
struct ChunkCost {
  double forward = 0, backward = 0;  // compute (backward with its recompute)
  double tp_forward = 0, tp_backward = 0;
};

// Seconds of `count` matrix products (rows × inner)·(inner × cols) at `rate` FLOP/s. cuBLAS
// computes the output in tiles, one per multiprocessor at a time, its largest and most efficient
// 256 × 128 either way round (NVIDIA, Matrix Multiplication Background User's Guide, "Typical Tile
// Dimensions in cuBLAS" and "Dimension Quantization Effects"): a partly filled edge tile costs a
// whole one, and a last wave of fewer tiles than multiprocessors costs a whole wave. A weight's
// gradient (`split_inner`: its inner dimension is the micro-batch's thousands of tokens, its output
// as small as a weight) is split along that dimension when its tiles are too few (split-K), so no
// wave is left part empty. The rate is a best shape's (the profile's), where nothing is lost.
double matrix_product_s(double rows, double cols, double inner, double count, const HardwareProfile& hw, double rate,
                        bool split_inner = false);
ChunkCost chunk_cost(const ModelShape& m, const HardwareProfile& hw, const ChunkShape& c);
// A value the config file (or a --set) gives at a dotted path, as written; nullopt when neither
// gives it.
std::optional<std::string> given_config_value(const PlanOptions& options, const std::string& path);
// The config resolved for `gpus` ranks; when its grid or batch split does not fit them (and not
// --explain), resolved for what planning needs: the model and the global batch, and `refused`
// (when given) gets why the config's own layout does not run on them ("" when it does).
Config load_plan_config(const PlanOptions& options, int gpus, std::string* refused = nullptr);

// `strata plan --calibrate` (calibrate.cpp).
int run_calibration(const MpiRuntime* mpi, const PlanOptions& options);

// The makespan of the schedule tables for a forward cost of 1 per micro-batch over a stage's chunks
// and the given backward cost, a multiple of 1/1000 (simulated once per shape and cost ratio:
// times scale linearly with the costs); −1 if the tables do not complete. A step of more than
// simulated_rounds × p micro-batches is extrapolated from the simulated ones along their last p:
// the schedules' steady phase repeats every p micro-batches (a unit test holds the two equal).
double pipeline_makespan(const PipeShape& shape, double backward_over_forward, int simulated_rounds = 8);

StepTime step_time(const ModelShape& m, const HardwareProfile& hw, const std::vector<StageShape>& stages,
                   const DpShape& dp);

}  // namespace strata
