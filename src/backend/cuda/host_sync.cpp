// Staged uploads and deferred id checks of the CUDA backend (see host_sync.h).
#ifdef STRATA_HAVE_CUDA
#include "backend/cuda/host_sync.h"

#include <cstring>
#include <stdexcept>

#include "backend/cuda/cuda_args.h"
#include "backend/cuda/device_memory.h"
#include "core/check.h"

namespace strata::cuda {

StagedUploads::StagedUploads(cudaStream_t stream) : stream_(stream) {
  CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&slots_), kSlots * kSlotBytes));
  for (cudaEvent_t& event : read_) CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
}

StagedUploads::~StagedUploads() {
  // No checks: a destructor must not abort a job unwinding from an error. The owner has
  // synchronized the stream, so no copy still reads a slot.
  for (cudaEvent_t event : read_) {
    if (event) cudaEventDestroy(event);
  }
  if (slots_) cudaFreeHost(slots_);
}

bool StagedUploads::upload(void* dst, const void* src, size_t bytes) {
  if (bytes > kSlotBytes) return false;
  const int slot = next_;
  next_ = (next_ + 1) % kSlots;
  // Returns at once unless the copy that last read this slot, kSlots uploads ago, is still queued.
  CUDA_CHECK(cudaEventSynchronize(read_[slot]));
  char* staged = slots_ + static_cast<size_t>(slot) * kSlotBytes;
  std::memcpy(staged, src, bytes);
  CUDA_CHECK(cudaMemcpyAsync(dst, staged, bytes, cudaMemcpyHostToDevice, stream_));
  CUDA_CHECK(cudaEventRecord(read_[slot], stream_));
  return true;
}

DeferredIdChecks::DeferredIdChecks(cudaStream_t stream) : stream_(stream) {
  device_ = static_cast<BadIdFlag*>(device_alloc(kFlags * sizeof(BadIdFlag)));
  CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&host_), kFlags * sizeof(BadIdFlag)));
  CUDA_CHECK(cudaMemsetAsync(device_, 0xff, kFlags * sizeof(BadIdFlag), stream_));  // kNoBadId
  pending_.reserve(kFlags);
}

DeferredIdChecks::~DeferredIdChecks() {
  device_free(device_);
  if (host_) cudaFreeHost(host_);
}

BadIdFlag* DeferredIdChecks::flag_for(Ids ids, int64_t seq, int64_t vocab) {
  if (full()) throw std::logic_error("DeferredIdChecks: every flag is in use; resolve them first");
  pending_.push_back({ids, seq, vocab});
  return device_ + (pending_.size() - 1);
}

void DeferredIdChecks::before_wait() {
  if (pending_.empty()) return;
  const size_t bytes = pending_.size() * sizeof(BadIdFlag);
  CUDA_CHECK(cudaMemcpyAsync(host_, device_, bytes, cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaMemsetAsync(device_, 0xff, bytes, stream_));
}

void DeferredIdChecks::after_wait() {
  std::vector<Pending> checked;
  checked.swap(pending_);
  pending_.reserve(kFlags);
  for (size_t i = 0; i < checked.size(); ++i) {
    const BadIdFlag flag = host_[i];
    if (flag == kNoBadId) continue;
    const Pending& p = checked[i];
    if (p.ids == Ids::Tokens) throw_token_error(bad_id_value(flag), bad_id_row(flag), p.seq, p.vocab);
    throw_target_error(bad_id_value(flag), bad_id_row(flag), p.vocab);
  }
}

}  // namespace strata::cuda
#endif  // STRATA_HAVE_CUDA
