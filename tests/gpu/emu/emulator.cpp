// Scheduler of the CPU emulator (see emulator.h). Each block runs its threads as coroutines in
// rounds: every runnable thread, in a freshly shuffled order, runs until it blocks at a barrier
// or exits; then complete barriers are released and inconsistent ones reported.
#include "emulator.h"

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <numeric>
#include <random>
#include <unordered_map>
#include <vector>

namespace strata::emu {
namespace {

constexpr unsigned kWarpSize = 32;
constexpr size_t kStackBytes = 256 * 1024;
constexpr unsigned char kPoison = 0xFF;  // NaN as f32, bf16 and f16
constexpr unsigned char kCanary = 0xA5;
constexpr size_t kCanaryBytes = 256;
// The shared-memory base sits 128 bytes past a 256-byte boundary: exactly the alignment the
// kernels declare, so a kernel silently relying on more would misbehave here.
constexpr size_t kSharedAlignment = 128;
// Products a warp's lanes may drift apart by before a lane stops finding its record (then it
// computes its own: slower, never wrong).
constexpr size_t kProductRingPerWarp = 512;

enum class ThreadState { Runnable, AtBlockBarrier, AtWarpBarrier, Exited, Failed };

struct AsyncCopy {
  void* dst;
  const void* src;
  int bytes;
  bool landed;
};
using CopyGroup = std::vector<AsyncCopy>;

// A coroutine stack with an inaccessible page below it: an overflow faults at once instead of
// corrupting whatever lies next to it.
class GuardedStack {
 public:
  GuardedStack() {
    guard_ = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    void* p = mmap(nullptr, guard_ + kStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("emulator: cannot map a thread stack");
    base_ = static_cast<unsigned char*>(p);
    mprotect(base_, guard_, PROT_NONE);
  }
  ~GuardedStack() { munmap(base_, guard_ + kStackBytes); }
  GuardedStack(const GuardedStack&) = delete;
  GuardedStack& operator=(const GuardedStack&) = delete;
  void* bottom() const { return base_ + guard_; }

 private:
  unsigned char* base_ = nullptr;
  size_t guard_ = 0;
};

struct EmulatedThread {
  ucontext_t context;
  unsigned index = 0;
  ThreadState state = ThreadState::Exited;
  CopyGroup open_group;                // issued, not yet committed
  std::deque<CopyGroup> committed;     // oldest first
  uint64_t products_issued = 0;
  GuardedStack stack;
};

struct Emulator {
  std::mt19937_64 rng{0x5eedu};
  std::vector<std::unique_ptr<EmulatedThread>> threads;
  ucontext_t scheduler;
  EmulatedThread* current = nullptr;
  bool running = false;
  Dim3 grid, block, block_idx;
  std::vector<unsigned char> shared_storage;
  unsigned char* shared = nullptr;
  size_t shared_bytes = 0;
  const std::function<void()>* body = nullptr;
  std::vector<uint64_t> exchange;  // one shuffle slot per thread
  std::vector<ProductRecord> products;
  uint64_t block_serial = 0;
  std::string failure;
  std::unordered_map<uintptr_t, size_t> shared_limits;
  EmulatorStats stats;
};

Emulator& emulator() {
  static Emulator instance;
  return instance;
}

EmulatedThread& running_thread(const char* what) {
  Emulator& e = emulator();
  if (!e.current) throw EmulationError(std::string(what) + " used outside a kernel");
  return *e.current;
}

std::string block_name(const Dim3& b) {
  return "block (" + std::to_string(b.x) + ", " + std::to_string(b.y) + ", " + std::to_string(b.z) + ")";
}

void yield_to_scheduler(EmulatedThread& t) { swapcontext(&t.context, &emulator().scheduler); }

void mix_into_hash(uint64_t& hash, uint64_t value) {
  hash = (hash ^ value) * 0x100000001b3ull;  // FNV-1a step
}

void land(AsyncCopy& copy) {
  if (copy.landed) return;
  std::memcpy(copy.dst, copy.src, static_cast<size_t>(copy.bytes));
  copy.landed = true;
  ++emulator().stats.copies_landed_at_wait;
}

void thread_entry() {
  Emulator& e = emulator();
  (*e.body)();
  EmulatedThread& t = *e.current;
  // Legal on the hardware, but in these kernels a copy nobody waits for is a lost tile.
  if (!t.open_group.empty()) fail("cp.async copies issued but never committed before the thread exited");
  for (const CopyGroup& group : t.committed)
    if (!group.empty()) fail("cp.async copies committed but never waited for before the thread exited");
  t.state = ThreadState::Exited;
}  // returning resumes uc_link, the scheduler

void prepare_block(Emulator& e, unsigned threads) {
  std::memset(e.shared, kPoison, e.shared_bytes);
  ++e.block_serial;
  for (unsigned i = 0; i < threads; ++i) {
    EmulatedThread& t = *e.threads[i];
    t.index = i;
    t.state = ThreadState::Runnable;
    t.open_group.clear();
    t.committed.clear();
    t.products_issued = 0;
    getcontext(&t.context);
    t.context.uc_stack.ss_sp = t.stack.bottom();
    t.context.uc_stack.ss_size = kStackBytes;
    t.context.uc_link = &e.scheduler;
    makecontext(&t.context, thread_entry, 0);
  }
}

// Releases whatever barrier is complete; throws when the waiting threads can never proceed.
void release_barriers(Emulator& e, unsigned threads) {
  unsigned exited = 0, at_block = 0, at_warp = 0;
  bool released = false;
  for (unsigned w = 0; w < threads / kWarpSize; ++w) {
    unsigned warp_waiting = 0, warp_exited = 0;
    for (unsigned l = 0; l < kWarpSize; ++l) {
      const ThreadState s = e.threads[w * kWarpSize + l]->state;
      warp_waiting += s == ThreadState::AtWarpBarrier;
      warp_exited += s == ThreadState::Exited;
      at_block += s == ThreadState::AtBlockBarrier;
    }
    exited += warp_exited;
    at_warp += warp_waiting;
    if (warp_waiting == kWarpSize) {
      for (unsigned l = 0; l < kWarpSize; ++l) e.threads[w * kWarpSize + l]->state = ThreadState::Runnable;
      ++e.stats.warp_barriers;
      released = true;
    } else if (warp_waiting > 0 && warp_exited > 0) {
      throw EmulationError("__syncwarp() waits for lanes that already exited (warp " + std::to_string(w) + " of " +
                           block_name(e.block_idx) + ")");
    }
  }
  if (released) return;
  if (at_block == 0)  // a guard: partial warps with exited lanes were reported above
    throw EmulationError("no thread of " + block_name(e.block_idx) + " can make progress");
  if (exited > 0)
    throw EmulationError("__syncthreads() reached after " + std::to_string(exited) + " threads of " +
                         block_name(e.block_idx) + " exited");
  if (at_block != threads)
    throw EmulationError("threads of " + block_name(e.block_idx) + " wait at different barriers: " +
                         std::to_string(at_block) + " at __syncthreads(), " + std::to_string(at_warp) +
                         " at __syncwarp() (a barrier inside divergent code)");
  for (unsigned i = 0; i < threads; ++i) e.threads[i]->state = ThreadState::Runnable;
  ++e.stats.block_barriers;
}

void run_block(Emulator& e, unsigned threads) {
  prepare_block(e, threads);
  std::vector<unsigned> order(threads);
  std::iota(order.begin(), order.end(), 0u);
  for (;;) {
    std::shuffle(order.begin(), order.end(), e.rng);
    for (unsigned i : order) {
      EmulatedThread& t = *e.threads[i];
      if (t.state != ThreadState::Runnable) continue;
      mix_into_hash(e.stats.schedule_hash, i);
      e.current = &t;
      swapcontext(&e.scheduler, &t.context);
      e.current = nullptr;
      if (t.state == ThreadState::Failed) throw EmulationError(e.failure);
    }
    const bool all_exited = std::all_of(e.threads.begin(), e.threads.begin() + threads,
                                        [](const auto& t) { return t->state == ThreadState::Exited; });
    if (all_exited) break;
    release_barriers(e, threads);
  }
  const unsigned char* before = e.shared - kCanaryBytes;
  const unsigned char* after = e.shared + e.shared_bytes;
  for (size_t i = 0; i < kCanaryBytes; ++i)
    if (before[i] != kCanary || after[i] != kCanary)
      throw EmulationError("a thread of " + block_name(e.block_idx) + " wrote outside its dynamic shared memory");
  ++e.stats.blocks;
}

}  // namespace

Dim3 thread_index() { return Dim3(running_thread("threadIdx").index, 0, 0); }
const Dim3& block_index() { return emulator().block_idx; }
const Dim3& block_dim() { return emulator().block; }
const Dim3& grid_dim() { return emulator().grid; }
unsigned lane_index() { return running_thread("lane index").index % kWarpSize; }

void block_barrier() {
  EmulatedThread& t = running_thread("__syncthreads()");
  t.state = ThreadState::AtBlockBarrier;
  yield_to_scheduler(t);
}

void warp_barrier() {
  EmulatedThread& t = running_thread("__syncwarp()");
  t.state = ThreadState::AtWarpBarrier;
  yield_to_scheduler(t);
}

uint64_t warp_exchange_xor(uint64_t bits, int lane_xor) {
  Emulator& e = emulator();
  const EmulatedThread& t = running_thread("__shfl_xor_sync()");
  if (lane_xor < 0 || lane_xor >= static_cast<int>(kWarpSize)) fail("__shfl_xor_sync() lane mask outside 0..31");
  const unsigned warp_base = t.index - t.index % kWarpSize;
  e.exchange[t.index] = bits;
  warp_barrier();  // every lane has posted
  const uint64_t received = e.exchange[warp_base + ((t.index % kWarpSize) ^ static_cast<unsigned>(lane_xor))];
  warp_barrier();  // every lane has read before the slots are reused
  return received;
}

void async_copy(void* dst, const void* src, int bytes) {
  Emulator& e = emulator();
  EmulatedThread& t = running_thread("cp.async");
  if (bytes != 4 && bytes != 8 && bytes != 16) fail("cp.async of " + std::to_string(bytes) + " bytes (4, 8 or 16)");
  if (!in_shared_memory(dst, static_cast<size_t>(bytes))) fail("cp.async destination outside dynamic shared memory");
  if (in_shared_memory(src, 1)) fail("cp.async source in shared memory (must be global)");
  if (reinterpret_cast<uintptr_t>(dst) % static_cast<uintptr_t>(bytes) != 0 ||
      reinterpret_cast<uintptr_t>(src) % static_cast<uintptr_t>(bytes) != 0)
    fail("cp.async of " + std::to_string(bytes) + " bytes between addresses not aligned to its size");
  // The hardware may land a copy any time between issue and wait: landing some at once
  // exposes writes into buffers still being read, deferring the others exposes early reads.
  AsyncCopy copy{dst, src, bytes, false};
  if (e.rng() & 1u) {
    std::memcpy(dst, src, static_cast<size_t>(bytes));
    copy.landed = true;
    ++e.stats.copies_landed_at_issue;
  }
  t.open_group.push_back(copy);
}

void async_commit() {
  EmulatedThread& t = running_thread("cp.async.commit_group");
  t.committed.push_back(std::move(t.open_group));
  t.open_group.clear();
}

void async_wait(int pending_groups) {
  EmulatedThread& t = running_thread("cp.async.wait_group");
  if (pending_groups < 0) fail("cp.async.wait_group with a negative count");
  while (t.committed.size() > static_cast<size_t>(pending_groups)) {
    for (AsyncCopy& copy : t.committed.front()) land(copy);
    t.committed.pop_front();
  }
}

unsigned char* dynamic_shared_memory(size_t alignment) {
  Emulator& e = emulator();
  running_thread("extern __shared__");
  if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > kSharedAlignment)
    fail("dynamic shared memory aligned to " + std::to_string(alignment) + " bytes; the emulator provides " +
         std::to_string(kSharedAlignment));
  return e.shared;
}

bool in_shared_memory(const void* p, size_t bytes) {
  const Emulator& e = emulator();
  const uintptr_t begin = reinterpret_cast<uintptr_t>(e.shared), at = reinterpret_cast<uintptr_t>(p);
  return e.shared && at >= begin && bytes <= e.shared_bytes && at - begin <= e.shared_bytes - bytes;
}

void fail(const std::string& rule) {
  Emulator& e = emulator();
  if (!e.current) throw EmulationError(rule);
  EmulatedThread& t = *e.current;
  e.failure = rule + " (" + block_name(e.block_idx) + ", thread " + std::to_string(t.index) + ": warp " +
              std::to_string(t.index / kWarpSize) + ", lane " + std::to_string(t.index % kWarpSize) + ")";
  t.state = ThreadState::Failed;
  yield_to_scheduler(t);
  std::abort();  // a failed thread is never resumed
}

ProductRecord& next_product_record(uint64_t* key) {
  Emulator& e = emulator();
  EmulatedThread& t = running_thread("wmma::mma_sync");
  const uint64_t sequence = t.products_issued++;
  *key = (e.block_serial << 32) | sequence;
  return e.products[(t.index / kWarpSize) * kProductRingPerWarp + sequence % kProductRingPerWarp];
}

void set_dynamic_shared_limit(uintptr_t kernel_id, size_t bytes) { emulator().shared_limits[kernel_id] = bytes; }

size_t dynamic_shared_limit(uintptr_t kernel_id) {
  const Emulator& e = emulator();
  const auto it = e.shared_limits.find(kernel_id);
  return it == e.shared_limits.end() ? kDefaultDynamicSharedBytes : it->second;
}

void run_grid(Dim3 grid, Dim3 block, size_t shared_bytes, const std::function<void()>& kernel_body) {
  Emulator& e = emulator();
  if (e.running) throw EmulationError("kernel launched from inside a kernel (not emulated)");
  if (block.y != 1 || block.z != 1 || block.x == 0 || block.x > 1024 || block.x % kWarpSize != 0)
    throw EmulationError("block of (" + std::to_string(block.x) + ", " + std::to_string(block.y) + ", " +
                         std::to_string(block.z) + ") threads: the emulator runs 1-D blocks of whole warps");
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) throw EmulationError("launch with an empty grid");
  if (shared_bytes > kMaxDynamicSharedBytes)
    throw EmulationError(std::to_string(shared_bytes) + " bytes of dynamic shared memory exceed the device's " +
                         std::to_string(kMaxDynamicSharedBytes));

  const unsigned threads = block.x;
  while (e.threads.size() < threads) e.threads.push_back(std::make_unique<EmulatedThread>());
  e.exchange.assign(threads, 0);
  if (e.products.size() < threads / kWarpSize * kProductRingPerWarp)
    e.products.resize(threads / kWarpSize * kProductRingPerWarp);
  e.shared_storage.assign(shared_bytes + 2 * kCanaryBytes + 2 * 256, kCanary);
  const uintptr_t start = reinterpret_cast<uintptr_t>(e.shared_storage.data()) + kCanaryBytes;
  const uintptr_t base = (start - kSharedAlignment + 255) / 256 * 256 + kSharedAlignment;  // ≥ start
  e.shared = e.shared_storage.data() + (base - reinterpret_cast<uintptr_t>(e.shared_storage.data()));
  e.shared_bytes = shared_bytes;
  e.grid = grid;
  e.block = block;
  e.body = &kernel_body;

  struct RunningFlag {
    Emulator& e;
    explicit RunningFlag(Emulator& em) : e(em) { e.running = true; }
    ~RunningFlag() {
      e.running = false;
      e.current = nullptr;
      e.shared = nullptr;
      e.shared_bytes = 0;
    }
  } running_flag(e);

  std::vector<Dim3> blocks;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) blocks.emplace_back(x, y, z);
  std::shuffle(blocks.begin(), blocks.end(), e.rng);  // blocks may run in any order
  for (const Dim3& b : blocks) {
    e.block_idx = b;
    run_block(e, threads);
  }
}

void set_schedule_seed(uint64_t seed) { emulator().rng.seed(seed); }
EmulatorStats emulator_stats() { return emulator().stats; }
void reset_emulator_stats() { emulator().stats = EmulatorStats{}; }

}  // namespace strata::emu
