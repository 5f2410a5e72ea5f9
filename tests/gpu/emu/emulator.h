// Runtime of the CPU emulator behind the mock CUDA headers: a block's threads (1-, 2- or 3-D)
// are cooperative coroutines run in a shuffled order, meeting at __syncthreads/__syncwarp
// barriers, with poisoned shared memory and cp.async copies that land at a random legal moment.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "emu_attention.h"

namespace strata::emu {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr Dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

// Largest dynamic shared memory a block may opt into (sm_90) and the default without opt-in.
constexpr size_t kMaxDynamicSharedBytes = 227 * 1024;
constexpr size_t kDefaultDynamicSharedBytes = 48 * 1024;
// Static __shared__ variables of a block, together.
constexpr size_t kMaxStaticSharedBytes = 48 * 1024;

// ---- inside a kernel: called by the emulated threads ----
const Dim3& thread_index();
const Dim3& block_index();
const Dim3& block_dim();
const Dim3& grid_dim();
unsigned lane_index();  // the linear thread index (x + y·Dx + z·Dx·Dy) modulo 32
void block_barrier();  // __syncthreads()
void warp_barrier();   // __syncwarp() over the full warp
// Each lane posts `bits` and gets the bits posted by lane ^ lane_xor (a full-warp shuffle).
uint64_t warp_exchange_xor(uint64_t bits, int lane_xor);
// A warp-collective instruction (.sync.aligned): every lane of a full warp posts `bytes` (at most
// kMaxWarpPostBytes) under the same `instruction` (a string literal naming it); once all 32 have,
// `postings` receives them in lane order (32 · bytes), unless it is null: then a lane that needs
// them reads them with warp_postings before its next collective. A lane that exits, diverges to
// another barrier or posts another instruction is reported as an EmulationError naming the
// instruction.
constexpr size_t kMaxWarpPostBytes = 32;
void warp_gather(const char* instruction, const void* post, size_t bytes, void* postings);
void warp_postings(void* postings, size_t bytes);  // the last warp_gather's postings, lane order
// Right after warp_gather: the warp's buffer for what the instruction reads from memory, with
// *capture set in the first lane of the warp to resume, which must fill it; the other lanes
// read it, so all see memory as it was when the warp completed the instruction (a lane running
// on cannot change what its warp-mates load).
constexpr size_t kWarpSnapshotBytes = 1536;  // ldmatrix: 32 rows of 16 bytes; mma.sync: A and B as floats
unsigned char* warp_snapshot(bool* capture);
// cp.async: `bytes` (4, 8 or 16) from global src to shared dst, in this thread's open group; only
// the first src_bytes (0…bytes; -1: all) are read, the rest land as zeros (the src-size form).
void async_copy(void* dst, const void* src, int bytes, int src_bytes = -1);
void async_commit();
void async_wait(int pending_groups);  // lands all but the newest `pending_groups` groups
// The block's dynamic shared memory; fails if the emulator cannot honour `alignment`.
unsigned char* dynamic_shared_memory(size_t alignment);
// A static `__shared__` variable: the same storage for every thread of the block that reaches the
// declaration identified by `key`, poisoned when the block starts.
unsigned char* static_shared_memory(const void* key, size_t bytes, size_t alignment);
bool in_shared_memory(const void* p, size_t bytes);  // dynamic or static shared memory
// Reports a broken rule: raised as EmulationError by the scheduler, naming block and thread.
[[noreturn]] void fail(const std::string& rule);

// PTX warp-matrix instructions (emu_ptx.cpp), as kernels/mma_ptx.cuh issues them.
// ldmatrix.sync.aligned.m8n8.x{matrices}{.trans}.shared.b16: `row` is this lane's row address,
// `registers` receives `matrices` 32-bit registers.
void ldmatrix(int matrices, bool trans, const void* row, uint32_t* registers);
// mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32: d[4] = a[4]·b[2] + c[4] in the
// ISA's fragment layouts (d may alias c).
enum class MmaInput { BF16, F16 };
void mma_m16n8k16(MmaInput input, float* d, const uint32_t* a, const uint32_t* b, const float* c);
// ex2.approx.ftz.f32: 2^x with subnormal inputs and results flushed to zero. Computed exactly
// rounded here; the hardware's result may differ in the last two bits (the ISA bounds its error).
float exp2_approx(float x);

// ---- host side ----
// cudaFuncSetAttribute(kernel, MaxDynamicSharedMemorySize, bytes) for the kernel at `kernel_id`.
void set_dynamic_shared_limit(uintptr_t kernel_id, size_t bytes);
size_t dynamic_shared_limit(uintptr_t kernel_id);
// Runs every block of the grid to completion (blocks one after another, in a shuffled order);
// throws EmulationError when a thread breaks a rule.
void run_grid(Dim3 grid, Dim3 block, size_t shared_bytes, const std::function<void()>& kernel_body);

}  // namespace strata::emu
