// ZeRO stages 1-2: the gradient reduce-scattered into each rank's shard (once per step at stage
// 1; after every micro-batch and accumulated at stage 2, group by group after each chunk's
// backward under a pipeline), AdamW on the owned shard, and the updated parameters all-gathered
// into every rank's flat working copy.
#include <algorithm>

#include "sharding/strategies.h"

namespace strata {
namespace {

// Elements [offset, offset + count) of a buffer holding `dtype` elements.
Tensor typed_view(const Buffer& buffer, DType dtype, int64_t offset, int64_t count) {
  return buffer.view(static_cast<size_t>(offset) * dtype_size(dtype), dtype, {count});
}

// The partition's units: the reduction buckets, or under a pipeline at stage 2 the layer groups
// (each chunk's groups are reduced after its backward).
std::vector<FlatRange> state_units(const ShardingPlace& place, const ShardingSettings& settings, bool every) {
  std::vector<FlatRange> units;
  if (every && settings.pipelined) {
    for (const LayerGroup& g : *place.groups) units.push_back({g.begin, g.end});
    return units;
  }
  const int64_t n = place.specs->back().offset + place.specs->back().numel;
  return make_buckets(n, settings.reduce_bucket_size, place.dp->size());
}

}  // namespace

ShardedState::ShardedState(const ShardingPlace& place, const ShardingSettings& settings, bool reduce_every_micro_batch)
    : FlatStrategy(place, settings, state_units(place, settings, reduce_every_micro_batch)),
      every_micro_batch_(reduce_every_micro_batch) {
  // Stage 2 under a pipeline reduces group by group inside the schedule: no buckets.
  if (!settings.pipelined || !every_micro_batch_) {
    set_buckets(make_buckets(numel(), settings.reduce_bucket_size, dp_.size()), /*unit_of_each=*/true);
  }
  const std::vector<OwnedRun> owned = partition_->owned_runs();
  norm_runs_ = tp_norm_runs(specs_, owned, place.tp_size);
  const size_t shard_bytes = static_cast<size_t>(partition_->shard_numel()) * sizeof(float);
  grad_shard_ = backend_.allocate(shard_bytes);
  if (settings.offload.optimizer) {
    host_ = std::make_unique<HostOptimizerState>(backend_, settings.offload, owned, partition_->shard_numel(),
                                                 settings.precision);
  }
  if (!host_ || !mixed()) param_shard_ = backend_.allocate(shard_bytes);
  if (mixed()) work_shard_ = backend_.allocate(static_cast<size_t>(partition_->shard_numel()) * dtype_size(settings.precision));
  if (every_micro_batch_) {
    recv_ = backend_.allocate(shard_bytes);
    if (settings.pipelined) {
      int64_t widest = 0;
      for (const PartitionUnit& u : partition_->units()) widest = std::max(widest, u.padded);
      chunk_scratch_ = backend_.allocate(static_cast<size_t>(widest) * sizeof(float));
    }
  }
  optimizer_ = host_ ? host_->make_optimizer(settings.adamw, shard_ranges(specs_, owned))
                     : std::make_unique<AdamW>(backend_, settings.adamw, shard_ranges(specs_, owned),
                                               partition_->shard_numel());
  if (narrow_comm()) shard_twin_ = backend_.allocate(static_cast<size_t>(partition_->shard_numel()) * dtype_size(settings.comm_dtype));
}

ShardedState::~ShardedState() = default;

Tensor ShardedState::working_shard() const {
  const Buffer& source = mixed() ? work_shard_ : param_shard_;
  return source.view(0, settings_.precision, {partition_->shard_numel()});
}

// The reduce-scatter output of a unit: its piece of the shard accumulator's landing area (stage
// 1: the gradient shard; 2: recv_), or of shard_twin_ under a 16-bit comm_dtype.
Tensor ShardedState::reduction_output(const PartitionUnit& u) const {
  if (narrow_comm()) return typed_view(shard_twin_, settings_.comm_dtype, u.shard_offset, u.piece);
  const Buffer& out = every_micro_batch_ ? recv_ : grad_shard_;
  return f32_view(static_cast<float*>(out.data()), u.shard_offset, u.piece, device());
}

Tensor ShardedState::shard_view(const Buffer& buffer) const {
  return buffer.view(0, DType::F32, {partition_->shard_numel()});
}

void ShardedState::begin_step() {
  // Stage 1 accumulates the micro-batches in the flat gradient; stage 2 in the shard.
  backend_.zero(every_micro_batch_ ? shard_view(grad_shard_) : store_->grads());
}

void ShardedState::before_micro_batch() {
  if (!every_micro_batch_) return;
  wait_reductions();  // the previous micro-batch's reduce-scatter reads the buffer we are about to clear
  backend_.zero(store_->grads());
}

CommHandle ShardedState::issue(const Bucket& b) {
  const PartitionUnit& u = partition_->units()[b.unit];
  if (every_micro_batch_) pending_ = true;
  widen_ = narrow_comm();
  return dp_.reduce_scatter_async(reduction_input(u.begin, u.padded), reduction_output(u), ReduceOp::Sum);
}

void ShardedState::after_reductions() {
  if (widen_) {
    backend_.cast(typed_view(shard_twin_, settings_.comm_dtype, 0, partition_->shard_numel()),
                  shard_view(every_micro_batch_ ? recv_ : grad_shard_));
    widen_ = false;
  }
  if (!pending_) return;
  const Tensor acc = shard_view(grad_shard_);
  backend_.add(acc, acc, shard_view(recv_));
  pending_ = false;
}

void ShardedState::chunk_backward_done(const GptChunk& c) {
  if (!every_micro_batch_) return;  // stage 1 reduces once, after the schedule
  std::vector<int> groups;
  if (c.embedding || c.head) groups.push_back(0);
  const int ln_f = static_cast<int>(groups_.size()) - 1;
  for (int l = c.layer_begin; l < c.layer_end; ++l) groups.push_back(l + 1);
  if (c.head) groups.push_back(ln_f);
  const Timer wait;
  for (int group : groups) {
    const PartitionUnit& u = partition_->units()[static_cast<size_t>(group)];
    // The group's gradient, zero-padded to its unit, reduce-scattered into this rank's piece.
    const Tensor padded = chunk_scratch_.view(0, DType::F32, {u.padded});
    backend_.zero(padded);
    const Tensor grads = f32_view(flat_grads(), u.begin, u.numel, device());
    backend_.copy(grads, Tensor(padded.data, DType::F32, {u.numel}, padded.device));
    const Tensor piece = f32_view(static_cast<float*>(recv_.data()), u.shard_offset, u.piece, device());
    if (narrow_comm()) {
      const Tensor twin = flat_twin(0, u.padded);
      backend_.cast(padded, twin);
      dp_.reduce_scatter(twin, reduction_output(u), ReduceOp::Sum);
      backend_.cast(reduction_output(u), piece);
    } else {
      dp_.reduce_scatter(padded, piece, ReduceOp::Sum);
    }
    const Tensor acc = f32_view(static_cast<float*>(grad_shard_.data()), u.shard_offset, u.piece, device());
    backend_.add(acc, acc, piece);
    backend_.zero(grads);  // the chunk's next micro-batch accumulates from zero
  }
  *comm_wait_ += wait.seconds();
}

void ShardedState::finish_pipeline(const std::function<void(const Tensor&)>& sum_tied) {
  if (every_micro_batch_) {
    // Both stages lay the embeddings' group out alike, so their DP ranks own the same piece.
    const PartitionUnit& u = partition_->units()[0];
    sum_tied(f32_view(static_cast<float*>(grad_shard_.data()), u.shard_offset, u.piece, device()));
    return;
  }
  sum_tied(embedding_grads());  // before the DP reduction, which then carries the sum
  issue_all_reductions();
}

void ShardedState::update(float lr, float grad_multiplier) {
  if (host_) {
    host_->update(*optimizer_, grads(), working_shard(), lr, grad_multiplier);
    refresh_working(true);
    return;
  }
  const Tensor params = shard_view(param_shard_);
  if (!mixed()) {
    // fp32: the model's flat parameters are the master; update the owned part in shard layout.
    for (const OwnedRun& run : partition_->owned_runs()) {
      backend_.copy(f32_view(flat_params(), run.flat_begin, run.count, device()),
                    f32_view(params.f32(), run.shard_offset, run.count, device()));
    }
  }
  const Tensor working = mixed() ? work_shard_.view(0, settings_.precision, {partition_->shard_numel()}) : Tensor();
  optimizer_->step(params, grads(), lr, grad_multiplier, working);
  refresh_working(mixed());
}

void ShardedState::refresh_working(bool working_current) {
  const DType work = settings_.precision;
  if (host_ && !working_current) {
    host_->loaded(working_shard());
  } else if (mixed() && !working_current) {
    backend_.cast(shard_view(param_shard_), working_shard());
  }
  // Every rank gathers the owned shards into its full copy.
  const Buffer& source = mixed() ? work_shard_ : param_shard_;
  const Tensor flat = store_->padded_params();
  std::vector<CommHandle> gathers;
  for (const PartitionUnit& u : partition_->units()) {
    const Tensor into(static_cast<char*>(flat.data) + static_cast<size_t>(u.begin) * dtype_size(work), work, {u.padded},
                      flat.device);
    gathers.push_back(dp_.all_gather_async(typed_view(source, work, u.shard_offset, u.piece), into));
  }
  const Timer wait;
  for (CommHandle& h : gathers) h->wait();
  *comm_wait_ += wait.seconds();
}

std::vector<FlatSpan> ShardedState::host_spans(StateKind kind) {
  return host_->spans(kind, *optimizer_, partition_->owned_runs());
}

std::vector<FlatSpan> ShardedState::saved_spans(StateKind kind) {
  if (host_) return host_spans(kind);
  switch (kind) {
    // fp32: the model's flat parameters are the master; mixed: the shard.
    case StateKind::Params:
      return mixed() ? owned_spans(nullptr, shard_view(param_shard_).f32()) : owned_spans(flat_params(), nullptr);
    case StateKind::ExpAvg: return owned_spans(nullptr, optimizer_->exp_avg().f32());
    case StateKind::ExpAvgSq: return owned_spans(nullptr, optimizer_->exp_avg_sq().f32());
  }
  return {};
}

std::vector<FlatSpan> ShardedState::held_spans(StateKind kind) {
  if (kind == StateKind::Params && model_holds_master()) return {{0, numel(), flat_params()}};
  if (host_) return host_spans(kind);
  return saved_spans(kind);
}

MemoryRecord ShardedState::memory() const {
  const int64_t f = sizeof(float);
  const int64_t w = static_cast<int64_t>(dtype_size(settings_.precision));
  const int64_t shard = partition_->shard_numel();
  MemoryRecord m;
  m.optimizer = host_ ? 0 : static_cast<int64_t>(optimizer_->state_bytes());
  m.params = store_->capacity() * w;
  m.grads = every_micro_batch_ ? shard * f : store_->capacity() * f;
  // Stage 1: the reduced gradient shard; stage 2: the full-size gradient scratch of one
  // micro-batch and the reduce-scatter landing area. Both: the shard the parameters are
  // gathered from (fp32: the parameters in shard layout for the update; mixed: the rounded
  // master, while the master itself is optimizer state).
  m.workspace = every_micro_batch_ ? store_->capacity() * f + shard * f : shard * f;
  if (mixed()) {
    if (!host_) m.optimizer += shard * f;
    m.workspace += shard * w;
  } else {
    m.workspace += shard * f;
  }
  if (host_) host_->add_to(m);
  m.workspace += static_cast<int64_t>(chunk_scratch_.bytes());  // stage 2 under PP: one group's reduction
  m.workspace += twin_bytes() + static_cast<int64_t>(shard_twin_.bytes());  // 16-bit comm_dtype
  return m;
}

MemoryRecord ShardedState::estimate(const ShardingSettings& settings, const LayoutSize& size, bool every) {
  const int64_t w = static_cast<int64_t>(dtype_size(settings.precision)), f = sizeof(float);
  const bool mixed = settings.precision != DType::F32;
  MemoryRecord m;
  m.params = size.padded * w;
  m.grads = every ? size.shard * f : size.padded * f;
  m.optimizer = settings.offload.optimizer ? 0 : 2 * size.shard * f + (mixed ? size.shard * f : 0);
  if (settings.offload.optimizer)
    HostOptimizerState::estimate(settings.offload, size.shard, settings.precision, m);
  m.workspace = (every ? size.padded * f + size.shard * f : size.shard * f) + size.shard * (mixed ? w : f);
  // Under a pipeline, stage 2 reduces one group at a time through a scratch of the widest.
  if (every && settings.pipelined) m.workspace += std::max(size.embedding_group, size.widest_group) * f;
  // A 16-bit comm_dtype: the flat gradient and the shard as they travel.
  if (settings.comm_dtype != DType::F32)
    m.workspace += (size.padded + size.shard) * static_cast<int64_t>(dtype_size(settings.comm_dtype));
  return m;
}

}  // namespace strata
