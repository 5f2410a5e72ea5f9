// Offloaded optimizer state on a fast disk (offload_optimizer.device nvme): the shard's master
// and moments in one file, piece by piece ([master | exp_avg | exp_avg_sq] of a piece, rounded up
// to 4 KiB), read a few pieces ahead of the update and written behind it through a ring of
// buffer_count buffers, so that host memory holds only those pieces, never the state; checkpoints
// read and write it a tensor at a time through a one-record cache.
#include <algorithm>
#include <future>
#include <stdexcept>

#include "core/direct_file.h"
#include "sharding/strategies.h"

namespace strata {

struct HostOptimizerState::Files {
  std::unique_ptr<DirectFile> file;
  std::vector<int64_t> offset;       // of each piece's record
  std::vector<AlignedBuffer> ring;   // buffer_count records
  // Saving and loading go through ring[0] as a one-record cache: the piece it holds, or -1, and
  // whether it was written to since it was read.
  int64_t cached = -1;
  bool dirty = false;
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
  files_->file = std::make_unique<DirectFile>(settings_.nvme_path, "optimizer", total,
                                               "zero_optimization.offload_optimizer.nvme_path");
  const int64_t piece = offload_staging_elements(shard_numel_, settings_.max_piece);
  for (int k = 0; k < std::max(2, settings_.buffer_count); ++k) {
    files_->ring.push_back(allocate_aligned(files_->record_bytes(piece)));
  }
}

void HostOptimizerState::update_files(AdamW& optimizer, Tensor grads, Tensor working) {
  flush_cache();
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

std::vector<FlatSpan> HostOptimizerState::file_spans(StateKind kind, const std::vector<OwnedRun>& runs) {
  std::vector<FlatSpan> spans;
  for (const OwnedRun& r : runs) {
    FlatSpan span(r.flat_begin, r.count, nullptr, true);
    const int64_t at = r.shard_offset;
    span.read = [this, kind, at](int64_t offset, int64_t count, float* out) {
      read_file_state(kind, at + offset, count, out);
    };
    span.write = [this, kind, at](int64_t offset, int64_t count, const float* in) {
      write_file_state(kind, at + offset, count, in);
    };
    spans.push_back(std::move(span));
  }
  return spans;
}

float* HostOptimizerState::cached_record(size_t k) {
  float* record = reinterpret_cast<float*>(files_->ring[0].get());
  if (files_->cached != static_cast<int64_t>(k)) {
    flush_cache();
    files_->file->read(files_->offset[k], record, files_->record_bytes(pieces_[k].numel())).get();
    files_->cached = static_cast<int64_t>(k);
  }
  return record;
}

void HostOptimizerState::flush_cache() {
  if (!files_->dirty) return;
  const size_t k = static_cast<size_t>(files_->cached);
  files_->file->write(files_->offset[k], files_->ring[0].get(), files_->record_bytes(pieces_[k].numel())).get();
  files_->dirty = false;
}

namespace {

// Calls at(k, begin, end) for each piece k holding part [begin, end) of shard range [first, first
// + count); pieces are in shard order.
template <typename At>
void for_each_piece(const std::vector<FlatRange>& pieces, int64_t first, int64_t count, At at) {
  const int64_t end = first + count;
  size_t k = static_cast<size_t>(
      std::upper_bound(pieces.begin(), pieces.end(), first, [](int64_t x, const FlatRange& p) { return x < p.end; }) -
      pieces.begin());
  for (int64_t pos = first; pos < end; ++k) {
    if (k >= pieces.size() || pieces[k].begin > pos)
      throw std::logic_error("HostOptimizerState: a span outside the offloaded pieces");
    const int64_t upto = std::min(end, pieces[k].end);
    at(k, pos, upto);
    pos = upto;
  }
}

}  // namespace

void HostOptimizerState::read_file_state(StateKind kind, int64_t shard_begin, int64_t count, float* out) {
  for_each_piece(pieces_, shard_begin, count, [&](size_t k, int64_t begin, int64_t end) {
    const FlatRange& p = pieces_[k];
    const float* from = cached_record(k) + static_cast<int64_t>(kind) * p.numel() + (begin - p.begin);
    std::copy(from, from + (end - begin), out + (begin - shard_begin));
  });
}

void HostOptimizerState::write_file_state(StateKind kind, int64_t shard_begin, int64_t count, const float* in) {
  for_each_piece(pieces_, shard_begin, count, [&](size_t k, int64_t begin, int64_t end) {
    const FlatRange& p = pieces_[k];
    float* to = cached_record(k) + static_cast<int64_t>(kind) * p.numel() + (begin - p.begin);
    std::copy(in + (begin - shard_begin), in + (end - shard_begin), to);
    files_->dirty = true;
  });
}

}  // namespace strata
