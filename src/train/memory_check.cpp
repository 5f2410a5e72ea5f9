// Out of memory is a user error with a number: before anything is allocated, the bytes a rank
// will hold (parameters, gradients, optimizer state, workspace: the sharding strategy's
// estimate; the activation arena: the model's own plan) are estimated from the config and compared with what
// the rank's device has (a GPU's free memory shared by the ranks on it; on the CPU the node's
// available memory shared by its ranks). A config that cannot fit is refused with exit 2.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <fstream>
#include <list>
#include <memory>
#include <mutex>
#include <string>

#include "train/train_internal.h"

namespace strata {
namespace {

std::string gib(int64_t bytes) { return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / (1 << 30)); }

int64_t host_available_bytes() { return meminfo_bytes("MemAvailable:"); }

}  // namespace

int64_t process_rss_bytes(bool peak) {
  const char* key = peak ? "VmHWM:" : "VmRSS:";
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(key, 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return 0;
}

namespace {

// A rank's parameter specs and layer groups for a model, TP size and chunks, the last few kept:
// `strata plan` estimates many layouts of one model, and a deep model's specs take a while.
struct RankSpecs {
  std::vector<ParamSpec> specs;
  std::vector<LayerGroup> groups;
};
std::shared_ptr<const RankSpecs> rank_specs(const GptDims& dims, int tp, const std::vector<GptChunk>& chunks) {
  static std::mutex mutex;
  static std::list<std::pair<std::string, std::shared_ptr<const RankSpecs>>> recent;
  std::string key = fmt::format("{} {} {} {} {} {} {}", dims.n_layer, dims.n_head, dims.d_model, dims.vocab_size,
                                dims.padded_vocab, dims.seq_len, tp);
  for (const GptChunk& c : chunks) key += fmt::format(" {}:{}:{}:{}", c.layer_begin, c.layer_end, c.embedding, c.head);
  std::lock_guard<std::mutex> lock(mutex);
  for (auto it = recent.begin(); it != recent.end(); ++it) {
    if (it->first != key) continue;
    recent.splice(recent.begin(), recent, it);
    return it->second;
  }
  auto made = std::make_shared<RankSpecs>();
  made->specs = gpt_rank_specs(dims, {0, tp}, chunks);
  made->groups = gpt_layer_groups(made->specs, dims.n_layer + 2);
  recent.emplace_front(key, made);
  if (recent.size() > 128) recent.pop_back();
  return made;
}

// One pipeline stage's ranks (the whole model without PP): the chunks it holds, as the engine
// lays them out, times the copies it keeps of each for the micro-batches in flight.
MemoryRecord estimate_stage_memory(const Config& cfg, const EngineSettings& settings, int stage) {
  const GptDims dims = gpt_dims_from_config(cfg);
  const int tp = cfg.derived.tp_size, dp = cfg.derived.dp_size, pp = cfg.derived.pp_size;
  PipelineStagePlan plan;
  plan.chunks = {GptChunk{}};
  if (pp > 1) plan = pipeline_stage_plan(settings.pipeline, dims.n_layer, pp, stage);
  const std::shared_ptr<const RankSpecs> rank = rank_specs(dims, tp, plan.chunks);
  ShardingSettings sharding = settings.sharding;
  sharding.pipelined = pp > 1;
  MemoryRecord e = estimate_sharding_memory(sharding, rank->specs, rank->groups, dp);
  const bool sp = cfg.parallelism.sequence_parallel && tp > 1;
  const ActivationRecompute recompute = cfg.model.recompute;
  // Each chunk's arena per micro-batch in flight, and one scratch (the largest chunk's) they share.
  if (plan.chunk_slots.empty()) plan.chunk_slots = {1};
  size_t scratch = 0;
  for (size_t c = 0; c < plan.chunks.size(); ++c) {
    const ActivationBytes bytes = gpt_activation_bytes(dims, cfg.derived.micro_batch, recompute,
                                                       settings.sharding.precision, tp, sp, nullptr, plan.chunks[c]);
    e.activations += plan.chunk_slots[c] * static_cast<int64_t>(bytes.total - bytes.scratch);
    scratch = std::max(scratch, bytes.scratch);
  }
  e.activations += static_cast<int64_t>(scratch);
  return e;
}

}  // namespace

std::vector<ChunkLayers> pipeline_partition_of(const Config& cfg) {
  return cfg.derived.pp_size > 1 ? engine_settings_from_config(cfg).pipeline.partition : std::vector<ChunkLayers>{};
}

MemoryRecord estimate_rank_memory(const Config& cfg, Device device) {
  const EngineSettings settings = engine_settings_from_config(cfg, device);
  MemoryRecord worst;
  for (int stage = 0; stage < std::max(1, cfg.derived.pp_size); ++stage) {
    const MemoryRecord e = estimate_stage_memory(cfg, settings, stage);
    if (e.total() > worst.total()) worst = e;
  }
  return worst;
}

namespace {

// Offloaded optimizer state lives in the node's memory, shared by its ranks (on a simulated
// device, beside the "device" buffers, which are host memory too). The advice follows the cause:
// buffer_count's buffers, or state that could go to a file, or neither (more ranks).
void check_host_fits(const MemoryRecord& e, const MpiRuntime& mpi, Device device, const ZeroConfig& z) {
  const int64_t node = host_available_bytes();
  if (e.host <= 0 || node <= 0) return;
  const int64_t share = node / std::max(1, mpi.local_size());
  const int64_t need = e.host + (device == Device::CUDA ? 0 : e.total());
  if (need <= share) return;
  // On the CPU the model's own state alone too large is the model not fitting (said below), not
  // the offloaded part.
  if (device != Device::CUDA && e.total() > share) return;
  const bool params_offloaded = z.offload_param.device != OffloadDevice::None;
  const bool optimizer_in_file = z.offload_optimizer.device == OffloadDevice::Nvme;
  const bool params_in_file = z.offload_param.device == OffloadDevice::Nvme;
  std::string advice;
  if (e.host_buffers > (e.host - e.host_buffers) && (optimizer_in_file || params_in_file)) {
    std::vector<std::string> keys;
    if (optimizer_in_file) {
      keys.push_back(fmt::format("offload_optimizer.buffer_count ({})", z.offload_optimizer.buffer_count));
    }
    if (params_in_file) keys.push_back(fmt::format("offload_param.buffer_count ({})", z.offload_param.buffer_count));
    advice = fmt::format("lower zero_optimization.{}, whose buffers take {}", fmt::join(keys, " or "),
                         gib(e.host_buffers));
  } else if (!optimizer_in_file || (params_offloaded && !params_in_file)) {
    advice = params_offloaded ? "offload_optimizer.device and offload_param.device nvme (the state in files)"
                              : "zero_optimization.offload_optimizer.device: nvme (the state in a file) or none";
  }
  throw UserError(fmt::format(
      "the offloaded optimizer state does not fit host memory: each rank needs about {} of host memory ({} of "
      "offloaded master weights and Adam moments{}, {} of staging and file buffers{}), but this rank has {} ({} "
      "available on {}{}). Use more nodes or ranks{}",
      gib(need), gib(e.host - e.host_buffers), params_offloaded ? " and parameters" : "", gib(e.host_buffers),
      device == Device::CUDA ? "" : fmt::format(", and {} of simulated device memory", gib(e.total())),
      gib(share), gib(node), mpi.hostname(),
      mpi.local_size() > 1 ? fmt::format(", shared by {} ranks", mpi.local_size()) : std::string(),
      advice.empty() ? std::string() : ", or " + advice));
}

}  // namespace

void check_memory_fits(const Config& cfg, const MpiRuntime& mpi, const TrainingDevice& device) {
  const MemoryRecord e = estimate_rank_memory(cfg, device.backend->device());
  check_host_fits(e, mpi, device.backend->device(), cfg.zero_optimization);
  int64_t available = 0;
  std::string where;
  if (device.backend->device() == Device::CUDA) {
    const MemoryStats stats = device.backend->memory_stats();
    const int gpus = std::max(1, cuda_device_count());
    const int sharing = (mpi.local_size() + gpus - 1) / gpus;
    available = static_cast<int64_t>(stats.device_total_bytes - stats.device_used_bytes) / sharing;
    where = fmt::format("{} free on its GPU{}", gib(available * sharing),
                        sharing > 1 ? fmt::format(", shared by {} ranks", sharing) : std::string());
  } else {
    const int64_t node = host_available_bytes();
    if (node <= 0) return;  // not known: let the allocation decide
    available = node / std::max(1, mpi.local_size());
    where = fmt::format("{} available on {}{}", gib(node), mpi.hostname(),
                        mpi.local_size() > 1 ? fmt::format(", shared by {} ranks", mpi.local_size()) : std::string());
  }
  if (available <= 0 || e.total() <= available) return;
  // ZeRO shards over data-parallel ranks: with one, stages 1-2 add buffers and save nothing.
  // On the CPU, offloading to host memory moves nothing (it is host memory); to nvme it does.
  const char* offload = device.backend->device() == Device::CUDA ? "offloading, " : "offloading to nvme, ";
  const std::string zero = cfg.derived.dp_size > 1
                               ? "a higher ZeRO stage, "
                               : fmt::format("more data-parallel ranks with a higher ZeRO stage, {}", offload);
  throw UserError(fmt::format(
      "the model does not fit: each rank needs about {} (parameters {}, gradients {}, optimizer state {}, workspace "
      "{}, activations {}), but this rank has {} ({}). Use fewer or smaller layers (model.n_layer, model.d_model), a "
      "smaller train_micro_batch_size_per_gpu or model.seq_len, model.recompute: full, {}or more ranks",
      gib(e.total()), gib(e.params), gib(e.grads), gib(e.optimizer), gib(e.workspace), gib(e.activations),
      gib(available), where, zero));
}

}  // namespace strata
