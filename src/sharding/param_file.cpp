// The working parameter shard in a file (offload_param nvme): a record per layer group, read into
// a small ring of aligned (and, when pinned, page-locked) buffers for the gathers, and written
// back from the same ring group by group as the host update rounds the new parameters.
#include <algorithm>
#include <cstring>
#include <future>
#include <stdexcept>

#include "core/core.h"
#include "sharding/sharded_param_store.h"

namespace strata {

struct ParamFile::Slot {
  Buffer memory;          // what was allocated; data is its first 4 KiB boundary
  char* data = nullptr;
  int group = -1;         // the record it holds (or is reading or writing); -1 none
  int holders = 0;        // gathers reading it
  int64_t last_use = 0;
  std::future<void> io;   // a read or write in flight
  void land() {
    if (io.valid()) io.get();
  }
};

int64_t ParamFile::buffer_bytes(int64_t largest_piece, DType work) {
  return align_up(std::max<int64_t>(1, largest_piece) * static_cast<int64_t>(dtype_size(work)));
}

ParamFile::ParamFile(Backend& backend, const std::string& dir, int buffer_count, bool pinned,
                     const std::vector<PartitionUnit>& units, DType work)
    : backend_(backend), units_(units), work_(work) {
  int64_t total = 0, largest = 0;
  for (const PartitionUnit& u : units_) {
    offset_.push_back(total);
    total += u.piece > 0 ? buffer_bytes(u.piece, work) : 0;
    largest = std::max(largest, u.piece);
  }
  shard_bytes_ = total;
  file_ = std::make_unique<DirectFile>(dir, "parameters", total, "zero_optimization.offload_param.nvme_path");
  const size_t bytes = static_cast<size_t>(buffer_bytes(largest, work)) + kDirectAlign;
  slots_.resize(static_cast<size_t>(std::max(3, buffer_count)));
  for (Slot& s : slots_) {
    s.memory = pinned ? backend_.allocate_host(bytes) : allocate_pageable_host(bytes);
    const auto at = reinterpret_cast<uintptr_t>(s.memory.data());
    s.data = reinterpret_cast<char*>((at + kDirectAlign - 1) / kDirectAlign * kDirectAlign);
  }
}

ParamFile::~ParamFile() {
  for (Slot& s : slots_) {
    try {
      s.land();
    } catch (...) {  // an I/O error already reported, or the run is ending anyway
    }
  }
}

int64_t ParamFile::ring_bytes(int buffer_count, int64_t largest_piece, DType work) {
  return std::max(3, buffer_count) * (buffer_bytes(largest_piece, work) + static_cast<int64_t>(kDirectAlign));
}

int64_t ParamFile::host_bytes() const {
  return static_cast<int64_t>(slots_.size()) * static_cast<int64_t>(slots_[0].memory.bytes());
}

int ParamFile::find(int group) const {
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].group == group) return static_cast<int>(i);
  }
  return -1;
}

size_t ParamFile::record_bytes(int group) const {
  return static_cast<size_t>(buffer_bytes(units_[static_cast<size_t>(group)].piece, work_));
}

ParamFile::Slot* ParamFile::pick() {
  Slot* chosen = nullptr;
  for (Slot& s : slots_) {
    if (s.holders > 0 || &s - slots_.data() == writing_) continue;
    if (!chosen || (s.group < 0 && chosen->group >= 0) ||
        ((s.group < 0) == (chosen->group < 0) && s.last_use < chosen->last_use))
      chosen = &s;
  }
  return chosen;
}

ParamFile::Slot& ParamFile::take(int group) {
  Slot* chosen = pick();
  if (!chosen) throw std::logic_error("ParamFile: every buffer is held by a gather in flight");
  chosen->land();
  chosen->group = group;
  chosen->last_use = ++uses_;
  return *chosen;
}

void ParamFile::start_read(Slot& slot) {
  slot.io = file_->read(offset_[static_cast<size_t>(slot.group)], slot.data, record_bytes(slot.group));
}

int ParamFile::hold(int group) {
  int i = find(group);
  if (i < 0) {
    Slot& s = take(group);
    start_read(s);
    i = static_cast<int>(&s - slots_.data());
    ++reads_waited_;
  }
  Slot& s = slots_[static_cast<size_t>(i)];
  s.land();
  ++s.holders;
  s.last_use = ++uses_;
  return i;
}

Tensor ParamFile::piece(int buffer) const {
  const Slot& s = slots_[static_cast<size_t>(buffer)];
  return Tensor(s.data, work_, {units_[static_cast<size_t>(s.group)].piece}, Device::CPU);
}

void ParamFile::release(int buffer) {
  Slot& s = slots_[static_cast<size_t>(buffer)];
  if (s.holders <= 0) throw std::logic_error("ParamFile: release of a buffer not held");
  --s.holders;
}

void ParamFile::read_ahead(int group) {
  if (group < 0 || units_[static_cast<size_t>(group)].piece == 0 || find(group) >= 0) return;
  // Into the buffer used longest ago that no gather holds: once every buffer keeps some group,
  // that is the group just finished with, never the one being gathered next (held).
  if (pick()) start_read(take(group));
}

void* ParamFile::piece_target(int64_t shard_begin, int64_t count) {
  size_t g = 0;
  while (g + 1 < units_.size() && shard_begin >= units_[g].shard_offset + units_[g].piece) ++g;
  const PartitionUnit& u = units_[g];
  if (shard_begin < u.shard_offset || shard_begin + count > u.shard_offset + u.piece)
    throw std::logic_error("ParamFile: a piece outside its layer group's record");
  if (writing_ < 0 || slots_[static_cast<size_t>(writing_)].group != static_cast<int>(g)) {
    flush();
    // What a buffer read before this update is stale now.
    for (Slot& s : slots_) {
      if (s.holders > 0) throw std::logic_error("ParamFile: a record rewritten while a gather reads it");
    }
    const int old = find(static_cast<int>(g));
    if (old >= 0) {
      slots_[static_cast<size_t>(old)].land();
      slots_[static_cast<size_t>(old)].group = -1;
    }
    Slot& s = take(static_cast<int>(g));
    std::memset(s.data, 0, record_bytes(s.group));  // padding stays zero
    writing_ = static_cast<int>(&s - slots_.data());
  }
  return slots_[static_cast<size_t>(writing_)].data + static_cast<size_t>(shard_begin - u.shard_offset) * dtype_size(work_);
}

void ParamFile::flush() {
  if (writing_ < 0) return;
  Slot& s = slots_[static_cast<size_t>(writing_)];
  s.io = file_->write(offset_[static_cast<size_t>(s.group)], s.data, record_bytes(s.group));
  writing_ = -1;
}

void ParamFile::finish() {
  flush();
  for (Slot& s : slots_) s.land();
}

}  // namespace strata
