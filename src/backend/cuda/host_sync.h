// What lets the CUDA backend's hot path run without waiting for the device: host ids and
// tokens go up through page-locked slots (the caller's buffer is free as soon as the copy is
// queued), and the device's range checks of token and target ids leave flags that are read at
// the next wait the host makes anyway, not after every op.
#pragma once
#ifdef STRATA_HAVE_CUDA
#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernel_types.cuh"

namespace strata::cuda {

// Host → device copies of up to kSlotBytes through a ring of page-locked slots. A slot is
// reused once the copy that last read it has run (its event), so a step's few uploads never
// wait; only a ring lapped by kSlots copies still in flight would.
class StagedUploads {
 public:
  static constexpr size_t kSlotBytes = size_t{1} << 20;  // token ids of B·T ≤ 262144
  static constexpr int kSlots = 8;

  explicit StagedUploads(cudaStream_t stream);
  ~StagedUploads();
  StagedUploads(const StagedUploads&) = delete;
  StagedUploads& operator=(const StagedUploads&) = delete;

  // Queues dst (device) = src (host, `bytes`) on the stream and returns without waiting for it;
  // false (nothing done) when the copy does not fit a slot.
  bool upload(void* dst, const void* src, size_t bytes);

 private:
  cudaStream_t stream_;
  char* slots_ = nullptr;  // kSlots × kSlotBytes, page-locked
  std::array<cudaEvent_t, kSlots> read_{};
  int next_ = 0;
};

// The range checks of ids that are already in device memory: each checking op gets its own
// device flag (see BadIdFlag) and the host learns the outcome at its next wait on the stream.
class DeferredIdChecks {
 public:
  static constexpr int kFlags = 1024;  // checking ops between two waits (two per micro-batch)
  enum class Ids : uint8_t { Tokens, Targets };

  explicit DeferredIdChecks(cudaStream_t stream);
  ~DeferredIdChecks();
  DeferredIdChecks(const DeferredIdChecks&) = delete;
  DeferredIdChecks& operator=(const DeferredIdChecks&) = delete;

  bool full() const { return static_cast<int>(pending_.size()) == kFlags; }
  // The flag for one op over ids of `seq` positions per row and a vocabulary of `vocab`; the
  // caller resolves first when full().
  BadIdFlag* flag_for(Ids ids, int64_t seq, int64_t vocab);
  // Before a wait on the stream: queues the copy of the flags in use to the host and their reset.
  // No flag_for may come between it and after_wait.
  void before_wait();
  // After that wait: throws the UserError of the first op, in issue order, that met a bad id
  // (worded as the op's immediate check words it); the flags are free again either way.
  void after_wait();

 private:
  struct Pending {
    Ids ids;
    int64_t seq, vocab;
  };
  cudaStream_t stream_;
  BadIdFlag* device_ = nullptr;  // kFlags, kNoBadId when free
  BadIdFlag* host_ = nullptr;    // page-locked copy read after the wait
  std::vector<Pending> pending_;  // in issue order: pending_[i] owns device_[i]
};

}  // namespace strata::cuda
#endif  // STRATA_HAVE_CUDA
