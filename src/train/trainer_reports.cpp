// `strata train`, part 3: what the run reports besides the step line — the start-up banner
// (model, batch, data, layout, precision, device), memory per rank, the device allocator's
// peak after the first step, and each step's traffic per communicator and phase times (with the
// pipeline stages' bubbles).
#include <fmt/core.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <vector>

#include "train/flops_profile.h"
#include "train/trainer.h"

namespace strata {

void Trainer::log_banner() {
  log_info("model: {} layers, {} heads, d_model {}, vocab {} (padded {}), seq_len {}: {} parameters", dims_.n_layer,
           dims_.n_head, dims_.d_model, dims_.vocab_size, dims_.padded_vocab, dims_.seq_len, cfg_.derived.n_params);
  log_info("batch: {} sequences x {} tokens per step (micro {} x accumulation {} x DP {}); {:.3g} FLOP/token",
           cfg_.derived.global_batch, dims_.seq_len, cfg_.derived.micro_batch, cfg_.derived.grad_accum,
           cfg_.derived.dp_size, static_cast<double>(cfg_.derived.flops_per_token));
  const std::string val_text = val_data_ ? fmt::format(", {} val tokens", val_data_->num_tokens()) : std::string();
  if (!train_data_.blended()) {
    log_info("data: {} tokens in {} train shard(s){}", train_data_.num_tokens(),
             train_data_.sources()[0].dataset.shards().size(), val_text);
  } else {
    log_info("data: a blend of {} sources, {} tokens{}", train_data_.sources().size(), train_data_.num_tokens(),
             val_text);
    for (const std::string& line :
         describe_blend(train_data_, cfg_.train.iters, cfg_.derived.global_batch))
      log_info("  {}", line);
  }
  if (cfg_.flops_profiler.enabled && cfg_.flops_profiler.profile_step > cfg_.train.iters && mpi_.world_rank() == 0) {
    log_warn("flops_profiler.profile_step {} is past train.iters {}: no step will be profiled",
             cfg_.flops_profiler.profile_step, cfg_.train.iters);
  }
  if (setup_->tokenizer) {
    log_info("tokenizer: GPT-2 BPE from {}, {} ids{} (samples are decoded with it)", setup_->tokenizer->source(),
             setup_->tokenizer->vocab_size(),
             setup_->tokenizer->end_of_text() >= 0 ? fmt::format(", end of text {}", setup_->tokenizer->end_of_text())
                                                   : std::string());
  }
  log_info("layout: {} rank(s) = DP {} x TP {} x PP {} (rank = (pp*DP + dp)*TP + tp); sequence parallelism {}",
           mpi_.world_size(), cfg_.derived.dp_size, cfg_.derived.tp_size, cfg_.derived.pp_size,
           engine_.tensor_parallel().sequence_parallel() ? "on"
           : cfg_.parallelism.sequence_parallel          ? "off (it needs TP > 1)"
                                                         : "off");
  // Collective: every rank gives its host (where a lost node's ranks can be read off).
  const std::string placement = rank_placement(mpi_);
  if (mpi_.world_size() > 1) log_info("placement: {}", placement);
  if (cfg_.derived.pp_size > 1) {
    // Stage s holds model chunks s, s + PP, …: their layers, joined with '+'.
    const PipelineSettings ps = engine_settings_from_config(cfg_).pipeline;
    const int stages = cfg_.derived.pp_size;
    std::string text;
    for (int s = 0; s < stages; ++s) {
      text += s ? " " : "";
      for (int c = 0; c < ps.virtual_stages; ++c) {
        const ChunkLayers& l = ps.partition[static_cast<size_t>(c * stages + s)];
        text += fmt::format("{}[{}, {})", c ? "+" : "", l.begin, l.end);
      }
    }
    // Rank 0 is on stage 0: its slots are stage 0's micro-batches in flight.
    log_info("pipeline: {}{}, {} micro-batches, stages {}; activations kept for {} micro-batch(es) per chunk on stage 0",
             pipe_schedule_name(ps.schedule),
             ps.virtual_stages > 1 ? fmt::format(" x {}", ps.virtual_stages) : std::string(), ps.micro_batches, text,
             fmt::join(engine_.pipeline_chunk_slots(), "+"));
  }
  log_info("ZeRO stage {} over DP {}{}", cfg_.zero_optimization.stage, cfg_.derived.dp_size,
           engine_settings_from_config(cfg_).sharding.overlap_comm ? " (reductions overlap backward)" : "");
  log_offload();
  log_info("precision: {}", precision_text(engine_.precision()));
  log_info("attention: {}", backend_.attention_numerics(engine_.precision(), dims_.d_model / dims_.n_head));
  describe_devices();
}

// Where offloaded state lives, one line per offload section set.
void Trainer::log_offload() {
  const ZeroConfig& z = cfg_.zero_optimization;
  const OffloadSettings o = engine_settings_from_config(cfg_, backend_.device(), mpi_.local_size()).sharding.offload;
  // Page-locking is for copies to a device (the guarded CPU backend acts as one): the CPU
  // backend's host memory is ordinary memory.
  const bool cuda = backend_.device() != Device::CPU;
  const auto kind = [cuda](bool pinned) { return !cuda ? "ordinary" : pinned ? "page-locked" : "pageable"; };
  if (!cuda && ((z.offload_optimizer.device != OffloadDevice::None && z.offload_optimizer.pin_memory) ||
                (z.offload_param.device != OffloadDevice::None && z.offload_param.pin_memory)))
    log_info("offload: pin_memory changes nothing on the CPU backend (it page-locks host memory for copies to a GPU)");
  if (z.offload_optimizer.device != OffloadDevice::None) {
    if (!o.nvme_path.empty()) {
      log_info("offload: optimizer state (fp32 master, Adam moments) in a file in {} (O_DIRECT, {} pieces in host "
               "memory at once); host AdamW {} x {} thread(s)",
               o.nvme_path, std::max(2, o.buffer_count), host_simd_name(host_simd_best()), o.threads);
    } else if (o.optimizer) {
      log_info("offload: optimizer state (fp32 master, Adam moments) in {} host memory; host AdamW {} x {} thread(s)",
               kind(o.pinned), host_simd_name(host_simd_best()), o.threads);
    } else {
      log_info("offload: offload_optimizer cpu is a no-op on the CPU backend (the optimizer state is host memory "
               "already)");
    }
  }
  if (z.offload_param.device != OffloadDevice::None) {
    const DType p = engine_.precision();
    const char* dtype = p == DType::BF16 ? "bf16" : p == DType::F16 ? "fp16" : "fp32";
    if (!o.params_nvme_path.empty()) {
      log_info("offload: parameters (the {} shard the gathers read) in a file in {} (O_DIRECT, {} layer groups' "
               "pieces in {} host memory at once, read a group ahead)",
               dtype, o.params_nvme_path, std::max(3, o.params_buffer_count), kind(o.params_pinned));
    } else if (o.params) {
      log_info("offload: parameters (the {} shard the gathers read) in {} host memory, each layer group's piece "
               "carried up as it is gathered",
               dtype, kind(o.params_pinned));
    } else {
      log_info("offload: offload_param cpu is a no-op on the CPU backend (the parameters are host memory already)");
    }
    // From pageable memory a copy to the GPU holds the host thread until the GPU has run what came
    // before it, so the uploads stop overlapping the compute.
    if (o.params && backend_.device() == Device::CUDA && !o.params_pinned && mpi_.world_rank() == 0)
      log_warn("offload_param without pin_memory: each layer group's upload waits for the compute queued before it; "
               "set zero_optimization.offload_param.pin_memory: true to overlap them");
  }
}

// Every rank's memory, gathered to all (cheap, once) and reported by rank 0.
void Trainer::report_memory() {
  const MemoryRecord mem = engine_.memory();
  const ActivationBytes& act = engine_.model().activation_breakdown();
  const std::vector<double> mine = {static_cast<double>(mem.params),    static_cast<double>(mem.grads),
                                    static_cast<double>(mem.optimizer), static_cast<double>(mem.workspace),
                                    static_cast<double>(mem.activations), static_cast<double>(act.per_layer),
                                    static_cast<double>(act.shared), static_cast<double>(mem.host),
                                    static_cast<double>(mem.nvme)};
  const std::vector<double> all = all_gather_doubles(topology_.world(), mine);
  nlohmann::json ranks = nlohmann::json::array();
  log_info("memory per rank (ZeRO stage {}, DP {}, TP {}{}, recompute {}):", cfg_.zero_optimization.stage,
           cfg_.derived.dp_size, cfg_.derived.tp_size, engine_.tensor_parallel().sequence_parallel() ? " with SP" : "",
           to_string(cfg_.model.recompute));
  log_info("  {:>4} {:>12} {:>12} {:>12} {:>12} {:>12} {:>14}", "rank", "params", "grads", "optimizer", "workspace",
           "activations", "per layer");
  for (int r = 0; r < topology_.world().size(); ++r) {
    const double* v = all.data() + static_cast<size_t>(r) * mine.size();
    const auto bytes = [&](int i) { return static_cast<int64_t>(v[i]); };
    log_info("  {:>4} {:>12} {:>12} {:>12} {:>12} {:>12} {:>14}", r, bytes_text(bytes(0)), bytes_text(bytes(1)),
             bytes_text(bytes(2)), bytes_text(bytes(3)), bytes_text(bytes(4)), bytes_text(bytes(5)));
    ranks.push_back({{"rank", r},
                     {"params", bytes(0)},
                     {"grads", bytes(1)},
                     {"optimizer", bytes(2)},
                     {"workspace", bytes(3)},
                     {"activations", bytes(4)},
                     {"activations_per_layer", bytes(5)},
                     {"activations_shared", bytes(6)},
                     {"host", bytes(7)},
                     {"nvme", bytes(8)}});
    if (bytes(7) > 0)
      log_info("  {:>4} offloaded state: {} in host memory (with its staging){}", r, bytes_text(bytes(7)),
               bytes(8) > 0 ? fmt::format(", {} in its file", bytes_text(bytes(8))) : std::string());
  }
  // The start-up check's estimate (before allocation, the stage that needs the most), beside.
  const MemoryRecord e = estimate_rank_memory(cfg_, backend_.device());
  metrics_.write({{"type", "memory"},
                  {"estimate",
                   {{"params", e.params},
                    {"grads", e.grads},
                    {"optimizer", e.optimizer},
                    {"workspace", e.workspace},
                    {"activations", e.activations},
                    {"host", e.host},
                    {"nvme", e.nvme}}},
                  {"zero_stage", cfg_.zero_optimization.stage},
                  {"dp", cfg_.derived.dp_size},
                  {"tp", cfg_.derived.tp_size},
                  {"sequence_parallel", engine_.tensor_parallel().sequence_parallel()},
                  {"recompute", to_string(cfg_.model.recompute)},
                  {"n_params", cfg_.derived.n_params},
                  {"ranks", ranks}});
}

// flops_profiler: the profile step's report from rank 0, to the log or flops_profiler.output_file.
void Trainer::report_flops_profile(const StepMetrics& m) {
  if (mpi_.world_rank() != 0) return;
  StepMetrics timed = m;
  const EngineTimes& t = engine_.times();
  timed.forward_seconds = t.forward;
  timed.backward_seconds = t.backward;
  timed.optimizer_seconds = t.optimizer;
  const std::string report = flops_profile({&cfg_, &dims_, &timed});
  const std::optional<std::string>& path = cfg_.flops_profiler.output_file;
  if (!path || path->empty()) {
    log_info("flops profile:\n{}", report);
    return;
  }
  std::ofstream out(*path, std::ios::app);
  out << report;
  if (!out) {
    log_error("flops_profiler.output_file: cannot write '{}'; the report follows here", *path);
    log_info("flops profile:\n{}", report);
    return;
  }
  log_info("flops profile of step {} written to {}", m.step, *path);
}

void Trainer::describe_devices() {
  const char* comm = device_.comm == CommBackendKind::Nccl ? "nccl"
                     : device_.access                      ? "mpi (device buffers staged through host memory)"
                                                            : "mpi";
  log_info("device: {} | communication: {}", device_.description, comm);
}

// The allocator's figures after the first step (every buffer and the largest transient
// scratch exist by then): the most any rank allocated, and rank 0's view of its device.
void Trainer::report_device_memory() {
  // The host's figures first, on every backend: what offloading to files keeps out of memory
  // (resident now, after the first step), and the most any rank held so far (loading a
  // checkpoint or the initial weights into offloaded state passes through host copies).
  const std::vector<double> rss = all_gather_doubles(
      topology_.world(), {static_cast<double>(process_rss_bytes(false)), static_cast<double>(process_rss_bytes(true))});
  double rss_now = 0, rss_peak = 0;
  for (size_t i = 0; i + 1 < rss.size(); i += 2) {
    rss_now = std::max(rss_now, rss[i]);
    rss_peak = std::max(rss_peak, rss[i + 1]);
  }
  metrics_.write({{"type", "host_memory"},
                  {"rss_max", static_cast<int64_t>(rss_now)},
                  {"rss_peak_max", static_cast<int64_t>(rss_peak)}});
  if (backend_.device() == Device::CPU) return;
  const MemoryStats mine = backend_.memory_stats();
  const std::vector<double> all = all_gather_doubles(
      topology_.world(), {static_cast<double>(mine.allocated_bytes), static_cast<double>(mine.peak_allocated_bytes)});
  double peak = 0;
  for (size_t i = 1; i < all.size(); i += 2) peak = std::max(peak, all[i]);
  const auto mib = [](double bytes) { return bytes / (1 << 20); };
  log_info("device memory after the first step: peak allocated {:.0f} MiB (largest rank); rank 0: {:.0f} MiB "
           "allocated, {:.0f} of {:.0f} MiB in use on its device",
           mib(peak), mib(static_cast<double>(mine.allocated_bytes)), mib(static_cast<double>(mine.device_used_bytes)),
           mib(static_cast<double>(mine.device_total_bytes)));
  metrics_.write({{"type", "device_memory"}, {"peak_allocated_max", static_cast<int64_t>(peak)},
                  {"allocated", static_cast<int64_t>(mine.allocated_bytes)},
                  {"device_used", static_cast<int64_t>(mine.device_used_bytes)},
                  {"device_total", static_cast<int64_t>(mine.device_total_bytes)}});
}

void Trainer::reset_traffic() {
  for (Comm* c : topology_.all_comms()) c->counters().reset();
}

void Trainer::traffic(StepMetrics& m) {
  m.comm = m.comm_calls = nlohmann::json::object();
  for (Comm* c : topology_.all_comms()) {
    for (const auto& [op, stats] : c->counters().by_op) {
      m.comm[c->name() + "." + op] = stats.payload_bytes;
      m.comm_calls[c->name() + "." + op] = stats.calls;
    }
  }
}

void Trainer::phase_times(StepMetrics& m) {
  const EngineTimes& t = engine_.times();
  m.forward_seconds = t.forward;
  m.backward_seconds = t.backward;
  m.comm_wait_seconds = t.comm_wait;
  if (cfg_.derived.tp_size > 1) m.tp_wait_seconds = t.tp_wait;
  m.optimizer_seconds = t.optimizer;
  if (engine_.pipeline_stages() == 1) return;
  // Every stage's figures, from the ranks of this pipeline (rank 0's: DP 0, TP 0). The stages
  // start the schedule together (the previous step ended in collectives over all of them), so
  // the longest run is the pipeline's span; a stage's bubble is the share of the span it was
  // not computing: waiting on a neighbour, or done before the others (as theory counts it).
  const std::vector<double> all =
      all_gather_doubles(topology_.pp(), {t.forward, t.backward, t.pipe_wait, t.optimizer, t.pipeline});
  double span = 0;
  for (size_t s = 4; s < all.size(); s += 5) span = std::max(span, all[s]);
  for (size_t s = 0; s + 4 < all.size(); s += 5) {
    const double busy = all[s + 4] - all[s + 2];
    m.stages.push_back({all[s], all[s + 1], all[s + 2], all[s + 3], span > 0 ? 1 - busy / span : 0.0});
  }
  m.bubble_theory = pipe_bubble_theory(engine_.pipeline_shape());
}

}  // namespace strata
