// Self-checks of the emulator (emu_attention.h): tiny kernels that each break one CUDA rule,
// launched through the same path as the attention kernels, so the tests can prove that the
// emulator enforces the rule rather than trusting that it does.
#include <cuda_runtime.h>

#include <vector>

#include "emu_attention.h"

namespace strata::emu {
namespace {

constexpr int kThreads = 128;
constexpr int kFloatsPerCopy = 4;  // one 16-byte cp.async

__global__ void skipped_barrier_kernel(int* visits) {
  if (threadIdx.x / 32 != 1) __syncthreads();  // warp 1 never arrives
  visits[threadIdx.x] = 1;
}

__global__ void neighbour_read_kernel(const float* source, int* saw_poison, bool barrier_before_read) {
  float* staged = reinterpret_cast<float*>(dynamic_shared_memory(128));
  const unsigned t = threadIdx.x;
  async_copy(staged + t * kFloatsPerCopy, source + t * kFloatsPerCopy, 16);
  async_commit();
  async_wait(0);
  if (barrier_before_read) __syncthreads();
  const float neighbour = staged[(t + 1) % kThreads * kFloatsPerCopy];
  saw_poison[t] = std::isnan(neighbour) ? 1 : 0;
}

}  // namespace

std::string probe_skipped_block_barrier() {
  std::vector<int> visits(kThreads, 0);
  return error_message_of([&] { launch(skipped_barrier_kernel, dim3(1), dim3(kThreads))(visits.data()); });
}

int probe_neighbour_reads_of_unlanded_data(bool barrier_before_read) {
  alignas(16) float source[kThreads * kFloatsPerCopy];
  for (float& v : source) v = 1.0f;
  std::vector<int> saw_poison(kThreads, 0);
  launch(neighbour_read_kernel, dim3(1), dim3(kThreads), sizeof(source))(source, saw_poison.data(),
                                                                         barrier_before_read);
  int count = 0;
  for (int s : saw_poison) count += s;
  return count;
}

}  // namespace strata::emu
