// Per-rank micro-batch stream. Batches are pure functions of (step, micro index), so the
// prefetch thread only moves the work earlier: its output equals the synchronous path, and
// seeking just restarts the thread at the new position.
#include <stdexcept>
#include <string>
#include <utility>

#include "data/data.h"

namespace strata {

BatchLoader::BatchLoader(TrainSequences sequences, BatchLayout layout, bool prefetch)
    : sequences_(std::move(sequences)), layout_(layout), prefetch_(prefetch) {
  if (layout.micro_batch < 1 || layout.grad_accum < 1 || layout.dp_size < 1) {
    throw std::invalid_argument("BatchLoader: micro_batch, grad_accum and dp_size must be >= 1");
  }
  if (layout.dp_rank < 0 || layout.dp_rank >= layout.dp_size) {
    throw std::invalid_argument("BatchLoader: dp_rank " + std::to_string(layout.dp_rank) +
                                " outside [0, " + std::to_string(layout.dp_size) + ")");
  }
  if (layout.seq_len != sequences_.seq_len()) {
    throw std::invalid_argument("BatchLoader: layout seq_len " + std::to_string(layout.seq_len) +
                                " differs from the sampler's " + std::to_string(sequences_.seq_len()));
  }
}

BatchLoader::~BatchLoader() { stop_worker(); }

MicroBatch BatchLoader::batch_at(int64_t step, int micro_index) const {
  if (step < 0 || micro_index < 0 || micro_index >= layout_.grad_accum) {
    throw std::out_of_range("BatchLoader::batch_at: step " + std::to_string(step) +
                            ", micro-batch " + std::to_string(micro_index) + " out of range");
  }
  MicroBatch batch;
  batch.step = step;
  batch.micro_index = micro_index;
  const size_t elements = static_cast<size_t>(layout_.micro_batch) * layout_.seq_len;
  batch.tokens.resize(elements);
  batch.targets.resize(elements);
  const int64_t step_first = first_sequence_of(step);
  if (step_first < 0) {
    throw std::out_of_range("BatchLoader::batch_at: step " + std::to_string(step) + " precedes the data's start");
  }
  // Micro-batch offsets inside a step are those of step 0.
  const int64_t first = step_first + micro_batch_first_sequence(layout_, 0, micro_index);
  sequences_.read(first, layout_.micro_batch, batch.tokens.data(), batch.targets.data());
  return batch;
}

void BatchLoader::seek(int64_t step, int64_t first_sequence) {
  if (step < 0 || first_sequence < 0) throw std::out_of_range("BatchLoader::seek: negative step or sequence");
  stop_worker();
  next_step_ = step;
  next_micro_ = 0;
  origin_step_ = step;
  origin_sequence_ = first_sequence;
}

int64_t BatchLoader::first_sequence_of(int64_t step) const {
  return origin_sequence_ + (step - origin_step_) * global_batch_sequences(layout_);
}

MicroBatch BatchLoader::next() {
  MicroBatch batch;
  if (!prefetch_) {
    batch = batch_at(next_step_, next_micro_);
  } else {
    if (!worker_.joinable()) start_worker();
    QueuedBatch item;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      queue_changed_.wait(lock, [&] { return !queue_.empty(); });
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    queue_changed_.notify_all();
    if (item.error) {
      // The worker has exited; the position is unchanged, so the next call retries.
      stop_worker();
      std::rethrow_exception(item.error);
    }
    batch = std::move(item.batch);
  }
  if (++next_micro_ == layout_.grad_accum) {
    next_micro_ = 0;
    ++next_step_;
  }
  return batch;
}

void BatchLoader::start_worker() {
  stop_requested_ = false;
  worker_ = std::thread(&BatchLoader::worker_loop, this, next_step_, next_micro_);
}

void BatchLoader::stop_worker() {
  if (!worker_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_requested_ = true;
  }
  queue_changed_.notify_all();
  worker_.join();
  queue_.clear();
}

void BatchLoader::worker_loop(int64_t step, int micro_index) {
  for (;;) {
    QueuedBatch item;
    try {
      item.batch = batch_at(step, micro_index);
    } catch (...) {
      item.error = std::current_exception();
    }
    const bool failed = static_cast<bool>(item.error);
    {
      std::unique_lock<std::mutex> lock(mutex_);
      queue_changed_.wait(lock, [&] { return stop_requested_ || queue_.size() < kPrefetchDepth; });
      if (stop_requested_) return;
      queue_.push_back(std::move(item));
    }
    queue_changed_.notify_all();
    if (failed) return;
    if (++micro_index == layout_.grad_accum) {
      micro_index = 0;
      ++step;
    }
  }
}

}  // namespace strata
