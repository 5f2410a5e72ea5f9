// Public header of the CPU emulator of the tensor-core attention kernels: the real kernel
// sources, compiled by the host compiler against mock CUDA headers, behind plain C++ entry
// points (no CUDA type appears here), plus the emulator's controls and self-check probes.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>

namespace strata::emu {

// A kernel broke a rule of the CUDA execution model that the emulator checks (barrier
// divergence, deadlock, misaligned or out-of-range ldmatrix/cp.async access, ...). The message
// names the rule and the block and thread that broke it.
class EmulationError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The message of the EmulationError `run` raises, or "" when it raises none (for probes of rules).
template <typename Run>
std::string error_message_of(Run run) {
  try {
    run();
  } catch (const EmulationError& e) {
    return e.what();
  }
  return "";
}

enum class HalfType { BF16, F16 };
// kernels/attention.cuh's AttentionBf16Operands: bf16 probabilities and dS enter the MMAs as
// hi + lo pairs (Split) or rounded once (Rounded, what training uses by default).
enum class Bf16Operands { Split, Rounded };

struct AttentionShape {
  int64_t batch = 1;
  int64_t seq = 1;
  int64_t heads = 1;
  int64_t head_dim = 64;
};

// The mma.sync kernels (kernels/attention_mma_*.cu) under the launchers' own contracts
// (kernels/attention.cuh): qkv (B, T, 3C), out (B, T, C), lse (B, NH, T) f32; the backward reads
// delta = rowsum(dout ∘ out) (B, NH, T) and overwrites dqkv (B, T, 3C). Pointers must be 16-byte
// aligned host memory. Each call runs the whole grid on the emulator before it returns; the
// result is the launcher's cudaError_t (0 = success). Throws EmulationError when a kernel breaks
// a checked rule.
int attention_forward(void* out, float* lse, const void* qkv, HalfType type, const AttentionShape& shape,
                      Bf16Operands operands = Bf16Operands::Split);
int attention_backward(void* dqkv, const void* dout, const void* qkv, const float* lse, const float* delta,
                       HalfType type, const AttentionShape& shape, Bf16Operands operands = Bf16Operands::Split);

// A forward kernel built from the same source with one planted bug, so tests can prove the
// emulator (or the comparison with the CPU) notices:
enum class Mutant {
  MmaMissingCpAsyncWait,  // mma.sync: the cp.async wait of its key-tile loop removed
  MmaWrongLaneMapping,    // mma.sync: V's ldmatrix.trans lanes pass the rows of K's mapping
};
int mutant_attention_forward(Mutant mutant, void* out, float* lse, const void* qkv, HalfType type,
                             const AttentionShape& shape);

// Seeds the scheduler (thread order within a block, block order within a grid, and when each
// cp.async copy lands). Results of a correct kernel must not depend on it.
void set_schedule_seed(uint64_t seed);

// Counters since the last reset, for tests that check what an emulation exercised.
struct EmulatorStats {
  uint64_t blocks = 0;
  uint64_t block_barriers = 0;        // __syncthreads() completions
  uint64_t warp_barriers = 0;         // __syncwarp() completions (shuffles included)
  uint64_t warp_collectives = 0;      // ldmatrix / mma.sync completions (warp_gather)
  uint64_t copies_landed_at_issue = 0;
  uint64_t copies_landed_at_wait = 0;
  uint64_t schedule_hash = 0;         // digest of the order in which threads ran
};
EmulatorStats emulator_stats();
void reset_emulator_stats();

// Small kernels that break one rule each; they run on the emulator and report what it saw.
// The first returns the EmulationError message, or "" when the emulator raised none.
std::string probe_skipped_block_barrier();  // one warp skips a __syncthreads() the others reach
// Each thread cp.async-copies its own 16 bytes, waits for them, then reads its neighbour's
// (with or without a __syncthreads() in between); returns how many reads found data that had
// not landed (the poison of fresh shared memory).
int probe_neighbour_reads_of_unlanded_data(bool barrier_before_read);

}  // namespace strata::emu
