// Choosing where a rank trains: the backend for `device` (auto, cpu, cuda; one GPU per rank by
// local rank), the communicator kind for `comm.backend` (NCCL needs a GPU of its own per rank),
// and the access that lets MPI communicators carry device tensors; then the agreement of all
// ranks on both, since nodes may differ.
#include <fmt/core.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/core.h"
#include "train/train_internal.h"

namespace strata {
namespace {

bool simulate_device_requested() {
  const char* value = std::getenv("STRATA_SIMULATE_DEVICE");
  if (!value || !*value || std::strcmp(value, "0") == 0) return false;
  if (std::strcmp(value, "1") != 0) {
    throw UserError(fmt::format("environment variable STRATA_SIMULATE_DEVICE='{}': use 1 (on) or 0 (off)", value));
  }
  return true;
}

// Before any collective: a head size the CUDA attention kernels do not take is the user's to
// change (else the first forward would fail on every rank as an internal error).
void refuse_cuda_head_dim(int d_model, int n_head) {
  const int head_dim = d_model / n_head;
  if (cuda_attention_head_dim_supported(head_dim)) return;
  std::string instead;
  for (int h = 128; h >= 16 && instead.empty(); h -= 16) {
    if (d_model % h == 0) instead = fmt::format(" (n_head: {} gives heads of {})", d_model / h, h);
  }
  throw UserError(fmt::format("model: heads of {} channels (d_model {} / n_head {}), but the CUDA backend's "
                              "attention takes a multiple of 16 up to 128: choose n_head so that d_model / n_head "
                              "is one{}, or set device: cpu",
                              head_dim, d_model, n_head, instead));
}

}  // namespace

TrainingDevice make_training_device(const Config& cfg, const MpiRuntime& mpi) {
  TrainingDevice out;
  const bool simulate = simulate_device_requested();
  const int gpus = simulate ? 0 : cuda_device_count();
  DeviceKind kind = cfg.device;
  if (simulate && kind == DeviceKind::Cuda) {
    throw UserError("STRATA_SIMULATE_DEVICE=1 runs the guarded CPU backend, but the config says device: cuda; unset "
                    "the variable or set device: cpu");
  }
  if (kind == DeviceKind::Auto) kind = gpus > 0 ? DeviceKind::Cuda : DeviceKind::Cpu;

  bool own_gpu = false;
  if (kind == DeviceKind::Cuda) {
    if (gpus == 0) {
      make_cuda_backend(0);  // throws, explaining why: a build without CUDA, no driver, or no GPU
      throw UserError("device: cuda, but no GPU is visible to this process; set device: cpu or auto");
    }
    refuse_cuda_head_dim(*cfg.model.d_model, *cfg.model.n_head);
    own_gpu = mpi.local_size() <= gpus;
    const int index = mpi.local_rank() % gpus;
    out.backend = make_cuda_backend(index);
    out.description = fmt::format("{} (local rank {} of {} on {} with {} GPU(s){})", out.backend->name(),
                                  mpi.local_rank(), mpi.local_size(), mpi.hostname(), gpus,
                                  own_gpu ? "" : "; ranks share GPUs");
  } else if (simulate) {
    out.backend = make_guarded_cpu_backend();
    out.description = out.backend->name() + " (STRATA_SIMULATE_DEVICE=1)";
  } else {
    out.backend = make_cpu_backend();
    out.description = "cpu";
  }

  out.backend->set_attention_probabilities(cfg.model.attention_probabilities);
  const bool on_device = out.backend->device() != Device::CPU;
  switch (cfg.comm.backend) {
    case CommBackend::Mpi: out.comm = CommBackendKind::Mpi; break;
    case CommBackend::Nccl:
      if (kind != DeviceKind::Cuda) {
        throw UserError(cfg.device == DeviceKind::Auto
                            ? "comm.backend: nccl needs a GPU per rank, but device: auto found no GPU and trains on "
                              "the CPU; set comm.backend: mpi or auto"
                            : "comm.backend: nccl needs device: cuda (NCCL moves GPU memory); set comm.backend: mpi "
                              "or auto");
      }
      if (!own_gpu) {
        throw UserError(fmt::format(
            "comm.backend: nccl needs one GPU per rank, but {} ranks run on {} which has {} GPU(s); start at most {} "
            "ranks per node, or set comm.backend: mpi (ranks then share GPUs and communicate through host memory, "
            "which is correct but slow)",
            mpi.local_size(), mpi.hostname(), gpus, gpus));
      }
      out.comm = CommBackendKind::Nccl;
      break;
    case CommBackend::Auto:
      out.comm = kind == DeviceKind::Cuda && own_gpu && nccl_built() ? CommBackendKind::Nccl : CommBackendKind::Mpi;
      break;
  }
  if (on_device) {
    Backend* backend = out.backend.get();
    DeviceAccess access;
    access.device = backend->device();
    access.copy = [backend](const Tensor& src, const Tensor& dst) { backend->copy(src, dst); };
    access.cuda_stream = backend->cuda_stream();
    out.access = std::move(access);
  }
  return out;
}

CommBackendKind agree_on_devices(const MpiRuntime& mpi, const Config& cfg, TrainingDevice& device) {
  const int size = mpi.world_size();
  if (size == 1) return device.comm;
  const std::vector<int64_t> devices = mpi.all_gather({static_cast<int64_t>(device.backend->device())});
  const int differs = first_rank_unlike_rank0(devices, 1);
  if (differs >= 0) {
    // Every rank sees the same table, so every rank throws the same error.
    const auto device_of = [&](int r) { return device_name(static_cast<Device>(devices[static_cast<size_t>(r)])); };
    throw UserError(fmt::format(
        "device: {}: ranks would train on different devices (rank 0: {}, rank {}: {}); every rank must use the same "
        "kind: check that every node's GPUs are visible (nvidia-smi), or set device: cpu",
        to_string(cfg.device), device_of(0), differs, device_of(differs)),
        RaisedOn::EveryRank);
  }
  int64_t nccl_ranks = 0;
  for (int64_t nccl : mpi.all_gather({device.comm == CommBackendKind::Nccl ? 1 : 0})) nccl_ranks += nccl;
  if (nccl_ranks != 0 && nccl_ranks != size) {
    // Only comm.backend: auto can differ here (nccl is checked on each rank): some ranks share a
    // GPU or lack NCCL, and communicators must be of one kind, so every rank takes MPI.
    if (mpi.world_rank() == 0) {
      log_warn("comm.backend: auto: {} of {} ranks cannot use NCCL (they share a GPU); every rank communicates "
               "through MPI instead", size - nccl_ranks, size);
    }
    device.comm = CommBackendKind::Mpi;
  }
  return device.comm;
}

}  // namespace strata
