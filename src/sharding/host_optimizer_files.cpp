// Offloaded optimizer state on a fast disk (offload_optimizer.device nvme): the shard's master
// and moments in one file, piece by piece ([master | exp_avg | exp_avg_sq] of a piece, rounded up
// to 4 KiB), read a few pieces ahead of the update and written behind it through a ring of
// buffer_count buffers, so that host memory holds only those pieces, never the state.
#include <algorithm>
#include <future>
#include <stdexcept>

#include "core/direct_file.h"
#include "sharding/strategies.h"

namespace strata {

struct HostOptimizerState::Files {
  std::unique_ptr<DirectFile> file;
  int64_t cached = -1;               // the piece whose record ring[0] holds (streamed saving), or -1
  std::vector<int64_t> offset;       // of each piece's record
  std::vector<AlignedBuffer> ring;   // buffer_count records
  std::vector<float> copies[3];      // checkpoint copies, per StateKind
  bool present[3] = {false, false, false};  // copies being filled for loading
  size_t record_bytes(int64_t count) const { return static_cast<size_t>(align_up(3 * count * 4)); }
};

HostOptimizerState::HostOptimizerState(Backend& backend, const OffloadSettings& settings,
                                       const std::vector<OwnedRun>& runs, int64_t shard_numel, DType work)
    : backend_(backend), settings_(settings), work_(work), shard_numel_(shard_numel),
      pieces_(offload_pieces(runs, settings.max_piece)), pool_(std::make_unique<ThreadPool>(settings.threads)) {
  placement_.pinned = settings.pinned;
  placement_.simd = host_simd_best();
  placement_.pool = pool_.get();
  placement_.state_elsewhere = !settings.nvme_path.empty();
  const size_t piece = static_cast<size_t>(offload_staging_elements(shard_numel, settings.max_piece));
  for (int k = 0; k < 2; ++k) {
    grad_stage_[k] = backend.allocate_host(piece * sizeof(float));
    work_stage_[k] = backend.allocate_host(piece * dtype_size(work));
  }
  if (placement_.state_elsewhere) {
    open_files();
  } else {
    const size_t bytes = static_cast<size_t>(shard_numel) * sizeof(float);
    master_ = settings.pinned ? backend.allocate_host(bytes) : allocate_pageable_host(bytes);
  }
}

HostOptimizerState::~HostOptimizerState() = default;

void HostOptimizerState::open_files() {
  files_ = std::make_unique<Files>();
  int64_t total = 0;
  for (const FlatRange& p : pieces_) {
    files_->offset.push_back(total);
    total += static_cast<int64_t>(files_->record_bytes(p.numel()));
  }
  files_->file = std::make_unique<DirectFile>(settings_.nvme_path, "optimizer", total);
  const int64_t piece = offload_staging_elements(shard_numel_, settings_.max_piece);
  for (int k = 0; k < std::max(2, settings_.buffer_count); ++k) {
    files_->ring.push_back(allocate_aligned(files_->record_bytes(piece)));
  }
}

void HostOptimizerState::update_files(AdamW& optimizer, Tensor grads, Tensor working) {
  files_->cached = -1;  // the ring is the update's now, and the records change
  const size_t n = pieces_.size(), ring = files_->ring.size();
  std::vector<std::future<void>> reads(n), writes(n);
  auto record = [&](size_t k) { return files_->ring[k % ring].get(); };
  auto read = [&](size_t k) {
    reads[k] = files_->file->read(files_->offset[k], record(k), files_->record_bytes(pieces_[k].numel()));
  };
  for (size_t k = 0; k + 1 < ring && k < n; ++k) read(k);
  transfer_pieces(grads, working, [&](size_t k) {
    reads[k].get();
    const int64_t count = pieces_[k].numel();
    float* r = reinterpret_cast<float*>(record(k));
    update_piece(optimizer, k, r, r + count, r + 2 * count);
    writes[k] = files_->file->write(files_->offset[k], r, files_->record_bytes(count));
    // The next read goes into the buffer piece k - 1 was written from.
    if (const size_t next = k + ring - 1; next < n) {
      if (k > 0) writes[k - 1].get();
      read(next);
    }
  });
  for (std::future<void>& w : writes) {
    if (w.valid()) w.get();
  }
}

float* HostOptimizerState::file_state(StateKind kind, bool for_loading) {
  const size_t which = static_cast<size_t>(kind);
  std::vector<float>& copy = files_->copies[which];
  if (for_loading) {
    copy.assign(static_cast<size_t>(shard_numel_), 0.0f);
    files_->present[which] = true;
    return copy.data();
  }
  if (copy.empty()) {  // saving: the whole state read once, every kind at a time
    files_->cached = -1;
    for (std::vector<float>& c : files_->copies) c.assign(static_cast<size_t>(shard_numel_), 0.0f);
    float* buffer = reinterpret_cast<float*>(files_->ring[0].get());
    for (size_t k = 0; k < pieces_.size(); ++k) {
      const FlatRange& p = pieces_[k];
      files_->file->read(files_->offset[k], buffer, files_->record_bytes(p.numel())).get();
      for (size_t j = 0; j < 3; ++j) {
        std::copy(buffer + j * p.numel(), buffer + (j + 1) * p.numel(), files_->copies[j].data() + p.begin);
      }
    }
  }
  return copy.data();
}

std::vector<FlatSpan> HostOptimizerState::file_spans(StateKind kind, const std::vector<OwnedRun>& runs) {
  std::vector<FlatSpan> spans;
  for (const OwnedRun& r : runs) {
    FlatSpan span(r.flat_begin, r.count, nullptr, true);
    const int64_t at = r.shard_offset;
    span.read = [this, kind, at](int64_t offset, int64_t count, float* out) {
      read_file_state(kind, at + offset, count, out);
    };
    spans.push_back(std::move(span));
  }
  return spans;
}

void HostOptimizerState::read_file_state(StateKind kind, int64_t shard_begin, int64_t count, float* out) {
  const int64_t end = shard_begin + count;
  // The first piece ending after shard_begin; pieces are in shard order.
  size_t k = static_cast<size_t>(std::upper_bound(pieces_.begin(), pieces_.end(), shard_begin,
                                                  [](int64_t at, const FlatRange& p) { return at < p.end; }) -
                                 pieces_.begin());
  float* record = reinterpret_cast<float*>(files_->ring[0].get());
  for (int64_t at = shard_begin; at < end; ++k) {
    if (k >= pieces_.size() || pieces_[k].begin > at)
      throw std::logic_error("HostOptimizerState: a saved span outside the offloaded pieces");
    const FlatRange& p = pieces_[k];
    if (files_->cached != static_cast<int64_t>(k)) {
      files_->file->read(files_->offset[k], record, files_->record_bytes(p.numel())).get();
      files_->cached = static_cast<int64_t>(k);
    }
    const int64_t upto = std::min(end, p.end);
    const float* from = record + static_cast<int64_t>(kind) * p.numel() + (at - p.begin);
    std::copy(from, from + (upto - at), out + (at - shard_begin));
    at = upto;
  }
}

void HostOptimizerState::commit_copies() {
  files_->cached = -1;
  if (!files_->present[static_cast<size_t>(StateKind::Params)])
    throw std::logic_error("HostOptimizerState: loading offloaded state needs its parameters");
  float* buffer = reinterpret_cast<float*>(files_->ring[0].get());
  for (size_t k = 0; k < pieces_.size(); ++k) {
    const FlatRange& p = pieces_[k];
    const size_t bytes = files_->record_bytes(p.numel());
    // Kinds not loaded (a fresh start loads only the parameters) keep the file's values.
    if (!(files_->present[0] && files_->present[1] && files_->present[2]))
      files_->file->read(files_->offset[k], buffer, bytes).get();
    for (size_t j = 0; j < 3; ++j) {
      if (!files_->present[j]) continue;
      const float* from = files_->copies[j].data() + p.begin;
      std::copy(from, from + p.numel(), buffer + j * p.numel());
    }
    files_->file->write(files_->offset[k], buffer, bytes).get();
  }
}

const float* HostOptimizerState::file_master(size_t k) const {
  return files_->copies[static_cast<size_t>(StateKind::Params)].data() + pieces_[k].begin;
}

void HostOptimizerState::release_copies() {
  if (!files_) return;
  for (size_t j = 0; j < 3; ++j) {
    files_->copies[j] = std::vector<float>();
    files_->present[j] = false;
  }
}

}  // namespace strata
