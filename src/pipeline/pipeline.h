// Public header of src/pipeline: pipeline parallelism's pure parts — which layers
// each model chunk holds, and the schedules as tables of actions per pipeline rank (GPipe, 1F1B,
// interleaved 1F1B), with a simulator that runs a whole table set under blocking send/recv,
// proving that it cannot deadlock and measuring its bubble and micro-batches in flight.
// Nothing here computes or communicates: the engine's executor runs the tables.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace strata {

// ---- layers per model chunk ----------------------------------------------------------------
// The model is cut into stages × virtual model chunks; chunk k holds layers [begin, end). Pipeline
// rank s holds chunks s, s + stages, …, s + (virtual − 1)·stages (Megatron's interleaving; with one
// virtual stage, chunk s). The embeddings live with chunk 0, the final layernorm, LM head and loss
// with the last chunk.
struct ChunkLayers {
  int begin = 0;
  int end = 0;
  int count() const { return end - begin; }
};
// Layers spread as evenly as possible, the remainder to the middle chunks.
std::vector<ChunkLayers> uniform_partition(int n_layer, int chunks);
// Contiguous layer counts that minimise the largest chunk's parameter count, where a block has
// `block_params`, chunk 0 also `first_extra` (the embeddings) and the last chunk `last_extra`
// (final layernorm and the tied head's copy of the token embedding); ties go to the uniform split.
std::vector<ChunkLayers> parameter_partition(int n_layer, int chunks, int64_t block_params, int64_t first_extra,
                                             int64_t last_extra);
// An explicit list of layers per chunk; "" when it describes a partition of n_layer into
// `chunks` chunks of at least one layer each, else why not.
std::string explicit_partition_problem(const std::vector<int>& counts, int n_layer, int chunks);
std::vector<ChunkLayers> explicit_partition(const std::vector<int>& counts);

// ---- schedules -------------------------------------------------------------------------------
enum class PipeSchedule { GPipe, OneFOneB, Interleaved };
const char* pipe_schedule_name(PipeSchedule s);

// A message between pipeline ranks: the activation a model chunk feeds the next one (consumer =
// that next chunk), or the gradient it feeds the previous one (consumer = that previous chunk).
struct PipeTransfer {
  bool gradient = false;
  int micro_batch = 0;
  int consumer_chunk = 0;  // model chunk index of the receiving side
  int peer = 0;            // pipeline rank on the other side
  bool operator==(const PipeTransfer& o) const {
    return gradient == o.gradient && micro_batch == o.micro_batch && consumer_chunk == o.consumer_chunk;
  }
};

// One entry of a rank's table. Forward/Backward compute a micro-batch through one of the rank's
// chunks (`chunk` its local index, `model_chunk` the global one). Communicate posts its sends and
// receives together (one group: NCCL or MPI cannot deadlock on ranks that send at once) and
// completes when all of them did: the outputs of the compute before it and the inputs of the
// compute after it.
struct PipeAction {
  enum class Kind { Forward, Backward, Communicate };
  Kind kind = Kind::Forward;
  int micro_batch = 0;
  int chunk = 0;
  int model_chunk = 0;
  std::vector<PipeTransfer> sends, recvs;
};

struct PipeShape {
  PipeSchedule schedule = PipeSchedule::OneFOneB;
  int stages = 1;          // pipeline ranks
  int virtual_stages = 1;  // chunks per rank (interleaved only)
  int micro_batches = 1;   // per optimizer step
};
// The setting a shape problem is due to, so that the config can name its key.
enum class PipeSetting { Stages, VirtualStages, Schedule, MicroBatches };
struct PipeShapeProblem {
  PipeSetting setting = PipeSetting::Stages;
  std::string message;
};
// Every reason a pipeline of `shape` cannot run a model of n_layer layers, empty when it can:
// interleaving needs 2 or more stages and virtual stages and a micro-batch count that is a
// multiple of the stages, the other schedules one chunk per stage, and every chunk a layer.
// n_layer 0 or shape.micro_batches 0: not known yet, and not checked. The one rule set: the
// config reports these under its keys; the engine refuses a shape that has any.
std::vector<PipeShapeProblem> pipe_shape_problems(const PipeShape& shape, int n_layer);
// The table of pipeline rank `stage`: every forward and backward of its chunks for every
// micro-batch, with the communication between them.
std::vector<PipeAction> pipe_schedule(const PipeShape& shape, int stage);
// Every rank's table, rank after rank (what the simulator runs).
std::vector<std::vector<PipeAction>> pipe_schedules(const PipeShape& shape);
// Most micro-batch-chunks whose forward ran and backward did not, on `stage` (the activations it
// keeps at once): p − s for 1F1B, m for GPipe, Megatron's warmup + 1 for interleaving.
int pipe_in_flight_bound(const PipeShape& shape, int stage);
// The same per chunk of the stage (index: the chunk's place on the rank): the most micro-batches
// of that chunk whose forward ran and backward did not, from the stage's table. A chunk runs its
// forwards and its backwards in micro-batch order, so those in flight are consecutive and
// micro-batch j can keep its activations in copy j mod this count.
std::vector<int> pipe_chunk_in_flight(const PipeShape& shape, int stage);

// ---- simulation ------------------------------------------------------------------------------
// Runs every rank's table with compute times forward_cost and backward_cost per chunk and
// instantaneous transfers that complete only when both sides posted them (blocking send/recv).
struct PipeSimulation {
  bool completed = false;   // false: deadlock (every unfinished rank waits)
  std::string problem;      // deadlock or ordering violation, when there is one
  double makespan = 0.0;
  std::vector<double> busy;          // per rank
  std::vector<int> max_in_flight;    // per rank
  double bubble_fraction() const;    // idle over makespan, averaged over ranks
};
PipeSimulation simulate_pipeline(const PipeShape& shape, double forward_cost = 1.0, double backward_cost = 2.0);
// The same for given tables (one per rank), e.g. a deliberately broken one.
PipeSimulation simulate_tables(const PipeShape& shape, const std::vector<std::vector<PipeAction>>& tables,
                               double forward_cost = 1.0, double backward_cost = 2.0);
// ---- a stop part-way through a step ---------------------------------------------------------
// At the first action of its table that touches micro-batch j (a compute or a transfer of it), a
// rank posts vote j, non-blocking, and waits for the outcome of vote j − lag. When that vote was
// a stop, the rank runs the rest of its table only for micro-batches < j. Nothing before that
// cut touched micro-batch j or later, so every rank runs its table restricted to micro-batches
// < j, whose transfers pair up as the whole table's do, and the step can be abandoned. The lag
// keeps the waits from stalling a running pipeline (ranks run that many micro-batches apart at
// most); simulate_stop_vote proves both for every schedule.
int pipe_stop_vote_lag(const PipeShape& shape);
// The highest micro-batch an action computes or transfers.
int pipe_last_micro_batch(const PipeAction& action);
// Runs the tables with those votes, vote `stop_vote` (−1: none) deciding a stop; the same
// checks as simulate_tables, and `stopped_before` is the micro-batch the ranks stopped at
// (micro_batches when they did not), the same on every rank or a problem.
struct PipeStopSimulation {
  PipeSimulation run;
  int stopped_before = 0;
};
PipeStopSimulation simulate_stop_vote(const PipeShape& shape, int stop_vote, double forward_cost = 1.0,
                                      double backward_cost = 2.0);

// Theory: (p − 1)/(m + p − 1) for GPipe and 1F1B, and for interleaving with v chunks the bubble
// time divided by v: (p − 1)/(v·m + p − 1).
double pipe_bubble_theory(const PipeShape& shape);

}  // namespace strata
