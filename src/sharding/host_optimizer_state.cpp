// Offloaded optimizer state: the shard's fp32 master and Adam's moments in host memory, the
// update done there by the host AdamW piece by piece, double-buffered so that the transfers of
// the pieces before and after run while the host computes one.
#include <algorithm>

#include "sharding/strategies.h"

namespace strata {
namespace {

// The owned runs (real elements only: padding never travels), cut to at most max_piece.
std::vector<FlatRange> shard_pieces(const std::vector<OwnedRun>& runs, int64_t max_piece) {
  std::vector<FlatRange> pieces;
  for (const OwnedRun& r : runs) {
    for (int64_t at = 0; at < r.count; at += max_piece) {
      pieces.push_back({r.shard_offset + at, r.shard_offset + std::min(r.count, at + max_piece)});
    }
  }
  return pieces;
}

int64_t staging_elements(int64_t shard_numel, int64_t max_piece) {
  return std::max<int64_t>(1, std::min(shard_numel, max_piece));
}

Tensor part(const Tensor& t, const FlatRange& r) {
  return Tensor(static_cast<char*>(t.data) + static_cast<size_t>(r.begin) * dtype_size(t.dtype), t.dtype, {r.numel()},
                t.device);
}

}  // namespace

HostOptimizerState::HostOptimizerState(Backend& backend, const OffloadSettings& settings,
                                       const std::vector<OwnedRun>& runs, int64_t shard_numel, DType work)
    : backend_(backend), settings_(settings), work_(work), shard_numel_(shard_numel),
      pieces_(shard_pieces(runs, settings.max_piece)), pool_(std::make_unique<ThreadPool>(settings.threads)) {
  placement_.pinned = settings.pinned;
  placement_.simd = host_simd_best();
  placement_.pool = pool_.get();
  const size_t bytes = static_cast<size_t>(shard_numel) * sizeof(float);
  master_ = settings.pinned ? backend.allocate_host(bytes) : allocate_pageable_host(bytes);
  const size_t piece = static_cast<size_t>(staging_elements(shard_numel, settings.max_piece));
  for (int k = 0; k < 2; ++k) {
    grad_stage_[k] = backend.allocate_host(piece * sizeof(float));
    work_stage_[k] = backend.allocate_host(piece * dtype_size(work));
  }
}

std::unique_ptr<AdamW> HostOptimizerState::make_optimizer(const AdamWSettings& settings,
                                                          std::vector<ParamRange> ranges) const {
  return std::make_unique<AdamW>(backend_, settings, std::move(ranges), shard_numel_, &placement_);
}

Tensor HostOptimizerState::stage(const Buffer& buffer, DType dtype, int64_t count) const {
  return Tensor(buffer.data(), dtype, {count}, Device::CPU);
}

void HostOptimizerState::update(AdamW& optimizer, Tensor grads, Tensor working, float lr, float grad_multiplier) {
  optimizer.begin_pieces(lr, grad_multiplier);
  const size_t n = pieces_.size();
  auto down = [&](size_t k) {
    backend_.copy_async(part(grads, pieces_[k]), stage(grad_stage_[k % 2], DType::F32, pieces_[k].numel()));
  };
  auto up = [&](size_t k) {
    backend_.copy_async(stage(work_stage_[k % 2], work_, pieces_[k].numel()), part(working, pieces_[k]));
  };
  if (n > 0) down(0);
  for (size_t k = 0; k < n; ++k) {
    // Piece k's gradient has landed, and piece k - 2's parameters have left its staging buffer.
    backend_.synchronize();
    if (k > 0) up(k - 1);
    if (k + 1 < n) down(k + 1);
    const FlatRange& p = pieces_[k];
    optimizer.update_piece(p.begin, p.numel(), master() + p.begin, static_cast<const float*>(grad_stage_[k % 2].data()),
                           work_stage_[k % 2].data(), work_);
  }
  if (n > 0) up(n - 1);
  backend_.synchronize();
}

void HostOptimizerState::upload(Tensor working) {
  for (size_t k = 0; k < pieces_.size(); ++k) {
    if (k >= 2) backend_.synchronize();  // the staging buffer's last upload has left
    const FlatRange& p = pieces_[k];
    convert_elements(master() + p.begin, DType::F32, work_stage_[k % 2].data(), work_, static_cast<size_t>(p.numel()));
    backend_.copy_async(stage(work_stage_[k % 2], work_, p.numel()), part(working, p));
  }
  backend_.synchronize();
}

int64_t HostOptimizerState::host_bytes() const {
  return estimate_host_bytes(shard_numel_, settings_.max_piece, work_);
}

int64_t HostOptimizerState::estimate_host_bytes(int64_t shard_numel, int64_t max_piece, DType work) {
  return 3 * shard_numel * 4 + 2 * staging_elements(shard_numel, max_piece) * (4 + static_cast<int64_t>(dtype_size(work)));
}

}  // namespace strata
