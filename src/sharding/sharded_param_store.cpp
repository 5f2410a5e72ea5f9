// ZeRO-3 parameter store: layer groups are all-gathered on demand (the next group of the
// pass is prefetched into the second slot, within the bounds) in the working dtype, and their
// fp32 gradients reduce-scattered into the shard accumulator as soon as backward releases them.
// Groups kept whole are gathered once per optimizer step into buffers of their own.
#include "sharding/sharded_param_store.h"

#include <algorithm>
#include <stdexcept>

namespace strata {

ShardedParamStore::ShardedParamStore(Backend& backend, Comm& dp, const std::vector<LayerGroup>& groups,
                                     const FlatPartition& partition, bool overlap, double* comm_wait_seconds,
                                     DType work_dtype, DType comm_dtype, const Stage3Bounds& bounds,
                                     const Stage3Plan& plan, const OffloadSettings& offload)
    : backend_(backend), dp_(dp), groups_(groups), units_(partition.units()), overlap_(overlap),
      comm_wait_(comm_wait_seconds), work_dtype_(work_dtype), comm_dtype_(comm_dtype), bounds_(bounds),
      shard_numel_(partition.shard_numel()), offload_(offload), whole_(units_.size()) {
  if (units_.size() != groups_.size()) throw std::logic_error("ShardedParamStore: one partition unit per layer group");
  if (offload.params && !offload.optimizer)
    throw std::logic_error("ShardedParamStore: parameters offloaded without the optimizer's master");
  const size_t shard_bytes = static_cast<size_t>(shard_numel_) * sizeof(float);
  // The shard the gathers read: on the device, or in host memory with the parameters offloaded.
  auto gathered_shard = [&](size_t bytes) {
    if (!offload.params) return backend_.allocate(bytes);
    if (!offload.params_nvme_path.empty()) return Buffer();  // in the file
    return offload.params_pinned ? backend_.allocate_host(bytes) : allocate_pageable_host(bytes);
  };
  if (offload.params && !offload.params_nvme_path.empty()) {
    file_ = std::make_unique<ParamFile>(backend_, offload.params_nvme_path, offload.params_buffer_count,
                                        offload.params_pinned, units_, work_dtype_);
  }
  if (mixed()) {
    if (!offload.optimizer) params_ = backend_.allocate(shard_bytes);
    work_params_ = gathered_shard(static_cast<size_t>(gathered_shard_bytes()));
  } else {
    params_ = gathered_shard(shard_bytes);
  }
  grads_ = backend_.allocate(shard_bytes);
  if (!folds_gradients()) recv_ = backend_.allocate(shard_bytes);
  int64_t widest_layer = 0;
  for (size_t g = 1; g < units_.size(); ++g) widest_layer = std::max(widest_layer, units_[g].padded);
  auto make_pool = [&](std::vector<Slot>& pool, int count, int64_t elements, DType dtype) {
    pool.resize(static_cast<size_t>(count));
    for (Slot& s : pool) s.buffer = backend_.allocate(static_cast<size_t>(elements) * dtype_size(dtype));
  };
  // A pipeline stage between the first and last holds no embeddings (an empty unit).
  make_pool(embed_params_, 1, std::max<int64_t>(units_[0].padded, 1), work_dtype_);
  make_pool(embed_grads_, 1, std::max<int64_t>(units_[0].padded, 1), DType::F32);
  make_pool(layer_params_, plan.layer_slots, widest_layer, work_dtype_);
  make_pool(layer_grads_, 2, widest_layer, DType::F32);
  if (comm_dtype_ != DType::F32) {
    recv_twin_ = backend_.allocate(static_cast<size_t>(shard_numel_) * dtype_size(comm_dtype_));
    for (auto* pool : {&embed_grads_, &layer_grads_}) {
      for (Slot& s : *pool) s.twin = backend_.allocate(s.buffer.bytes() / sizeof(float) * dtype_size(comm_dtype_));
    }
  }
  for (size_t g = 0; g < units_.size(); ++g) {
    if (!plan.persistent[g]) continue;
    whole_[g].kept = true;
    whole_[g].buffer = backend_.allocate(static_cast<size_t>(units_[g].padded) * dtype_size(work_dtype_));
  }
}

ShardedParamStore::~ShardedParamStore() {
  // Collectives in flight still write into our buffers: let them land before freeing.
  for (auto* pool : {&embed_params_, &layer_params_, &embed_grads_, &layer_grads_}) {
    for (Slot& s : *pool) {
      if (s.pending) s.pending->wait();
    }
  }
  for (Whole& w : whole_) {
    if (w.pending) w.pending->wait();
  }
}

int64_t ShardedParamStore::persistent_param_bytes() const {
  int64_t bytes = offload_.params ? 0 : gathered_shard_bytes();
  for (const Whole& w : whole_) bytes += static_cast<int64_t>(w.buffer.bytes());
  return bytes;
}

int64_t ShardedParamStore::host_param_bytes() const {
  if (file_) return file_->host_bytes();
  return offload_.params ? gathered_shard_bytes() : 0;
}

int64_t ShardedParamStore::workspace_bytes() const {
  int64_t bytes = static_cast<int64_t>(recv_.bytes() + recv_twin_.bytes());
  for (const auto* pool : {&embed_params_, &layer_params_, &embed_grads_, &layer_grads_}) {
    for (const Slot& s : *pool) bytes += static_cast<int64_t>(s.buffer.bytes() + s.twin.bytes());
  }
  return bytes;
}

Tensor ShardedParamStore::piece(const Buffer& shard, DType dtype, int group) const {
  const PartitionUnit& u = units_[static_cast<size_t>(group)];
  return shard.view(static_cast<size_t>(u.shard_offset) * dtype_size(dtype), dtype, {u.piece});
}

void ShardedParamStore::timed_wait(CommHandle& handle) {
  const Timer t;
  handle->wait();
  handle.reset();
  *comm_wait_ += t.seconds();
}

ShardedParamStore::Slot* ShardedParamStore::find_param_slot(int group) {
  for (Slot& s : is_embedding(group) ? embed_params_ : layer_params_) {
    if (s.group == group) return &s;
  }
  return nullptr;
}

ShardedParamStore::Slot& ShardedParamStore::free_slot(std::vector<Slot>& pool, int group) {
  for (Slot& s : pool) {
    if (!s.in_use && s.group < 0) return s;
  }
  // A prefetch nobody claimed (an interrupted pass): let it land and reuse the slot.
  for (Slot& s : pool) {
    if (!s.in_use) {
      land_gather(s.pending, s.staged);
      s.group = -1;
      return s;
    }
  }
  throw std::logic_error("ShardedParamStore: no free slot for layer group " + std::to_string(group));
}

CommHandle ShardedParamStore::gather(int group, const Buffer& out, int& staged) {
  const PartitionUnit& u = units_[static_cast<size_t>(group)];
  const Tensor whole = out.view(0, work_dtype_, {u.padded});
  if (file_) {
    const Timer waited;  // a read not done ahead is waited for here, like a transfer
    staged = file_->hold(group);
    *comm_wait_ += waited.seconds();
    return dp_.all_gather_from_host_async(file_->piece(staged), whole);
  }
  const Tensor source = mixed() ? piece(work_params_, work_dtype_, group) : piece(params_, DType::F32, group);
  return offload_.params ? dp_.all_gather_from_host_async(source, whole) : dp_.all_gather_async(source, whole);
}

void ShardedParamStore::land_gather(CommHandle& pending, int& staged) {
  if (pending) timed_wait(pending);
  if (staged >= 0) file_->release(staged);
  staged = -1;
}

void ShardedParamStore::start_gather(Slot& slot, int group) {
  slot.group = group;
  slot.pending = gather(group, slot.buffer, slot.staged);
}

int ShardedParamStore::next_in_sequence(int group, Pass pass) const {
  const int last = static_cast<int>(groups_.size()) - 1;  // ln_f
  int next = -1;
  if (pass == Pass::Forward) {
    next = group < last ? group + 1 : -1;
  } else {
    next = group == 0 ? last : (group > 1 ? group - 1 : -1);
  }
  // A pipeline stage holds some groups only: the pass ends at its chunk's edge.
  return next >= 0 && units_[static_cast<size_t>(next)].numel > 0 ? next : -1;
}

void* ShardedParamStore::acquire_whole(int group) {
  Whole& w = whole_[static_cast<size_t>(group)];
  if (!w.current) {
    w.pending = gather(group, w.buffer, w.staged);
    w.current = true;
  }
  land_gather(w.pending, w.staged);
  return w.buffer.data();
}

void ShardedParamStore::prefetch(int next) {
  if (next < 0 || kept_whole(next) || find_param_slot(next)) return;
  const int64_t ahead = units_[static_cast<size_t>(next)].numel;
  int64_t live = ahead;
  for (const auto* pool : {&embed_params_, &layer_params_}) {
    for (const Slot& s : *pool) {
      if (s.group >= 0) live += units_[static_cast<size_t>(s.group)].numel;
    }
  }
  if (ahead > bounds_.prefetch_bucket_size || live > bounds_.max_live_parameters) return;
  for (Slot& s : is_embedding(next) ? embed_params_ : layer_params_) {
    if (!s.in_use && s.group < 0) {
      start_gather(s, next);
      return;
    }
  }
}

void* ShardedParamStore::acquire_params(int group, Pass pass) {
  if (kept_whole(group)) {
    void* data = acquire_whole(group);
    prefetch(next_in_sequence(group, pass));
    return data;
  }
  Slot* slot = find_param_slot(group);
  if (!slot) {
    slot = &free_slot(is_embedding(group) ? embed_params_ : layer_params_, group);
    start_gather(*slot, group);
  }
  land_gather(slot->pending, slot->staged);
  slot->in_use = true;
  const int next = next_in_sequence(group, pass);
  prefetch(next);
  if (file_ && next >= 0) {
    // The file is read a group ahead of the gathers.
    const int after = next_in_sequence(next, pass);
    if (!kept_whole(next)) file_->read_ahead(next);
    if (after >= 0 && !kept_whole(after)) file_->read_ahead(after);
  }
  return slot->buffer.data();
}

void ShardedParamStore::release_params(int group, Pass) {
  if (kept_whole(group)) return;  // stays until the parameters change
  Slot* slot = find_param_slot(group);
  if (!slot || !slot->in_use) throw std::logic_error("ShardedParamStore: release of a group not acquired");
  // Not cached: the next use gathers again, which keeps the traffic per pass fixed.
  slot->in_use = false;
  slot->group = -1;
}

void ShardedParamStore::settle_grad_slot(Slot& slot) {
  if (slot.group < 0) return;
  if (slot.pending) timed_wait(slot.pending);
  Tensor acc = piece(grads_, DType::F32, slot.group);
  if (comm_dtype_ != DType::F32) backend_.cast(piece(recv_twin_, comm_dtype_, slot.group), piece(recv_, DType::F32, slot.group));
  backend_.add(acc, acc, piece(recv_, DType::F32, slot.group));
  slot.group = -1;
}

float* ShardedParamStore::acquire_grads(int group) {
  std::vector<Slot>& pool = is_embedding(group) ? embed_grads_ : layer_grads_;
  Slot* chosen = nullptr;
  for (Slot& s : pool) {
    if (!s.in_use && s.group < 0) {
      chosen = &s;
      break;
    }
  }
  if (!chosen) {
    // Settle the oldest reduction: with gradient accumulation the newer one may be a later
    // micro-batch's, and reductions must land in the order they were issued.
    for (Slot& s : pool) {
      if (!s.in_use && (!chosen || s.issued < chosen->issued)) chosen = &s;
    }
    if (chosen) settle_grad_slot(*chosen);
  }
  if (!chosen) throw std::logic_error("ShardedParamStore: no free gradient slot for layer group " + std::to_string(group));
  const PartitionUnit& u = units_[static_cast<size_t>(group)];
  backend_.zero(chosen->buffer.view(0, DType::F32, {u.padded}));
  chosen->group = group;
  chosen->in_use = true;
  return static_cast<float*>(chosen->buffer.data());
}

void ShardedParamStore::release_grads(int group) {
  std::vector<Slot>& pool = is_embedding(group) ? embed_grads_ : layer_grads_;
  // An earlier micro-batch's reduction of this group still owns its landing area: settle it.
  for (Slot& s : pool) {
    if (!s.in_use && s.group == group) settle_grad_slot(s);
  }
  for (Slot& s : pool) {
    if (s.in_use && s.group == group) {
      s.in_use = false;
      const PartitionUnit& u = units_[static_cast<size_t>(group)];
      if (folds_gradients()) {
        Tensor acc = piece(grads_, DType::F32, group);
        backend_.add(acc, acc, s.buffer.view(0, DType::F32, {u.piece}));
        s.group = -1;
        return;
      }
      s.issued = ++reductions_issued_;
      const Tensor grads = s.buffer.view(0, DType::F32, {u.padded});
      if (comm_dtype_ == DType::F32) {
        s.pending = dp_.reduce_scatter_async(grads, piece(recv_, DType::F32, group), ReduceOp::Sum);
      } else {
        const Tensor twin = s.twin.view(0, comm_dtype_, {u.padded});
        backend_.cast(grads, twin);
        s.pending = dp_.reduce_scatter_async(twin, piece(recv_twin_, comm_dtype_, group), ReduceOp::Sum);
      }
      if (!overlap_) settle_grad_slot(s);
      return;
    }
  }
  throw std::logic_error("ShardedParamStore: gradient release of a group not acquired");
}

void ShardedParamStore::begin_step() {
  finish_reductions();
  backend_.zero(grads());
}

void ShardedParamStore::finish_reductions() {
  for (auto* pool : {&embed_grads_, &layer_grads_}) {
    for (Slot& s : *pool) {
      if (!s.in_use) settle_grad_slot(s);
    }
  }
}

void ShardedParamStore::wait_gathers() {
  for (auto* pool : {&embed_params_, &layer_params_}) {
    for (Slot& s : *pool) land_gather(s.pending, s.staged);
  }
  for (Whole& w : whole_) land_gather(w.pending, w.staged);
}

void ShardedParamStore::invalidate_params() {
  wait_gathers();
  for (auto* pool : {&embed_params_, &layer_params_}) {
    for (Slot& s : *pool) {
      s.group = -1;
      s.in_use = false;
    }
  }
  for (Whole& w : whole_) w.current = false;
}

}  // namespace strata
