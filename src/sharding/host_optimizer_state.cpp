// Offloaded optimizer state in host memory: the shard's fp32 master and Adam's moments there,
// the update done by the host AdamW piece by piece, double-buffered so that the transfers of the
// pieces before and after run while the host computes one. (The nvme variant, whose state lives
// in a file, is host_optimizer_files.cpp.)
#include <algorithm>
#include <functional>

#include "core/direct_file.h"
#include "sharding/strategies.h"

namespace strata {

std::vector<FlatRange> offload_pieces(const std::vector<OwnedRun>& runs, int64_t max_piece) {
  std::vector<FlatRange> pieces;
  for (const OwnedRun& r : runs) {
    for (int64_t at = 0; at < r.count; at += max_piece) {
      pieces.push_back({r.shard_offset + at, r.shard_offset + std::min(r.count, at + max_piece)});
    }
  }
  return pieces;
}

int64_t offload_staging_elements(int64_t shard_numel, int64_t max_piece) {
  return std::max<int64_t>(1, std::min(shard_numel, max_piece));
}

namespace {

// Elements r of t, keeping its dtype and device.
Tensor offload_part(const Tensor& t, const FlatRange& r) {
  return Tensor(static_cast<char*>(t.data) + static_cast<size_t>(r.begin) * dtype_size(t.dtype), t.dtype, {r.numel()},
                t.device);
}

}  // namespace

std::unique_ptr<AdamW> HostOptimizerState::make_optimizer(const AdamWSettings& settings,
                                                          std::vector<ParamRange> ranges) const {
  return std::make_unique<AdamW>(backend_, settings, std::move(ranges), shard_numel_, &placement_);
}

Tensor HostOptimizerState::stage(const Buffer& buffer, DType dtype, int64_t count) const {
  return Tensor(buffer.data(), dtype, {count}, Device::CPU);
}

void HostOptimizerState::down(Tensor grads, size_t k) {
  backend_.copy_async(offload_part(grads, pieces_[k]), stage(grad_stage_[k % 2], DType::F32, pieces_[k].numel()));
}

void HostOptimizerState::up(Tensor working, size_t k) {
  backend_.copy_async(stage(work_stage_[k % 2], work_, pieces_[k].numel()), offload_part(working, pieces_[k]));
}

void* HostOptimizerState::rounded_target(size_t k) const {
  if (sink_) return sink_->piece_target(pieces_[k].begin, pieces_[k].numel());
  if (host_working_) return host_working_ + static_cast<size_t>(pieces_[k].begin) * dtype_size(work_);
  return work_stage_[k % 2].data();
}

void HostOptimizerState::update_piece(AdamW& optimizer, size_t k, float* master, float* m, float* v) {
  const FlatRange& p = pieces_[k];
  optimizer.update_piece(p.begin, p.numel(), master, static_cast<const float*>(grad_stage_[k % 2].data()), m, v,
                         rounded_target(k), work_);
}

void HostOptimizerState::target(Tensor working, WorkingShardSink* sink) {
  sink_ = sink;
  host_working_ = !sink && working.device == Device::CPU ? static_cast<char*>(working.data) : nullptr;
}

void HostOptimizerState::update(AdamW& optimizer, Tensor grads, Tensor working, float lr, float grad_multiplier,
                                WorkingShardSink* sink) {
  optimizer.begin_pieces(lr, grad_multiplier);
  target(working, sink);
  if (files_) {
    update_files(optimizer, grads, working);
  } else {
    update_memory(optimizer, grads, working);
  }
}

void HostOptimizerState::update_memory(AdamW& optimizer, Tensor grads, Tensor working) {
  float* master = static_cast<float*>(master_.data());
  float* m = optimizer.exp_avg().f32();
  float* v = optimizer.exp_avg_sq().f32();
  transfer_pieces(grads, working, [&](size_t k) {
    const int64_t at = pieces_[k].begin;
    update_piece(optimizer, k, master + at, m + at, v + at);
  });
}

void HostOptimizerState::transfer_pieces(Tensor grads, Tensor working, const std::function<void(size_t)>& update_one) {
  const size_t n = pieces_.size();
  // A working shard in host memory (parameters offloaded too) is written in place: nothing goes up.
  const bool upload = !host_working_ && !sink_;
  if (n > 0) down(grads, 0);
  for (size_t k = 0; k < n; ++k) {
    // Piece k's gradient has landed, and piece k - 2's parameters have left its staging buffer.
    backend_.synchronize();
    if (k > 0 && upload) up(working, k - 1);
    if (k + 1 < n) down(grads, k + 1);
    update_one(k);
  }
  if (n > 0 && upload) up(working, n - 1);
  backend_.synchronize();
  if (sink_) sink_->finish();
}

std::vector<FlatSpan> HostOptimizerState::spans(StateKind kind, AdamW& optimizer, const std::vector<OwnedRun>& runs) {
  if (files_) return file_spans(kind, runs);
  float* shard = nullptr;
  switch (kind) {
    case StateKind::Params: shard = static_cast<float*>(master_.data()); break;
    case StateKind::ExpAvg: shard = optimizer.exp_avg().f32(); break;
    case StateKind::ExpAvgSq: shard = optimizer.exp_avg_sq().f32(); break;
  }
  std::vector<FlatSpan> spans;
  for (const OwnedRun& r : runs) spans.emplace_back(r.flat_begin, r.count, shard + r.shard_offset, /*host=*/true);
  return spans;
}

void HostOptimizerState::loaded(Tensor working, WorkingShardSink* sink) {
  if (files_) flush_cache();
  target(working, sink);
  // The master rounded into the working shard: in place when it is host memory, else piece by
  // piece through the staging buffers.
  const bool upload = !host_working_ && !sink_;
  for (size_t k = 0; k < pieces_.size(); ++k) {
    if (k >= 2 && upload) backend_.synchronize();  // the staging buffer's last upload has left
    const FlatRange& p = pieces_[k];
    convert_elements(master_of(k), DType::F32, rounded_target(k), work_, static_cast<size_t>(p.numel()));
    if (upload) up(working, k);
  }
  if (sink_) sink_->finish();
  backend_.synchronize();
}

const float* HostOptimizerState::master_of(size_t k) {
  if (files_) return cached_record(k);  // the record starts with the master
  return static_cast<const float*>(master_.data()) + pieces_[k].begin;
}

void HostOptimizerState::add_to(MemoryRecord& record) const { estimate(settings_, shard_numel_, work_, record); }

void HostOptimizerState::estimate(const OffloadSettings& settings, int64_t shard_numel, DType work,
                                  MemoryRecord& record) {
  const int64_t piece = offload_staging_elements(shard_numel, settings.max_piece);
  const int64_t staging = 2 * piece * (4 + static_cast<int64_t>(dtype_size(work)));  // each way
  record.host += staging;
  record.host_buffers += staging;
  if (settings.nvme_path.empty()) {
    record.host += 3 * shard_numel * 4;
    return;
  }
  record.nvme += 3 * shard_numel * 4;
  const int64_t buffers = std::max(2, settings.buffer_count) * align_up(3 * piece * 4);  // the file's
  record.host += buffers;
  record.host_buffers += buffers;
}

}  // namespace strata
