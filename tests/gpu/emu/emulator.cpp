// Scheduler of the CPU emulator (see emulator.h). Each block runs its threads as coroutines in
// rounds: every runnable thread, in a freshly shuffled order, runs until it blocks at a barrier
// or exits; then complete barriers are released and inconsistent ones reported.
#include "emulator.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <numeric>
#include <random>
#include <unordered_map>
#include <vector>

#include "coroutine.h"

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

enum class ThreadState { Runnable, AtBlockBarrier, AtWarpBarrier, AtWarpCollective, Exited, Failed };

struct AsyncCopy {
  void* dst;
  const void* src;
  int bytes;
  int src_bytes;  // read from src; the rest of `bytes` lands as zeros
  bool landed;
};

// One lane's posting to a warp-collective instruction.
struct WarpPost {
  unsigned char data[kMaxWarpPostBytes];
};
// What a warp's last collective read from memory, captured by its first lane to resume.
struct WarpSnapshot {
  uint64_t collective = ~uint64_t{0};  // the lanes' collectives_issued after it
  unsigned char data[kWarpSnapshotBytes];
};
using CopyGroup = std::vector<AsyncCopy>;

struct EmulatedThread {
  Context context;
  unsigned index = 0;  // linear: x + y·Dx + z·Dx·Dy
  Dim3 position;       // threadIdx
  ThreadState state = ThreadState::Exited;
  CopyGroup open_group;                // issued, not yet committed
  std::deque<CopyGroup> committed;     // oldest first
  const char* collective = nullptr;  // the warp-collective instruction it waits in
  uint64_t collectives_issued = 0;
  GuardedStack stack{kStackBytes};
};

// One shared-memory region (dynamic or static) between two canary zones.
struct SharedRegion {
  std::vector<unsigned char> storage;
  unsigned char* base = nullptr;
  size_t bytes = 0;

  void allocate(size_t size) {
    storage.assign(size + 2 * kCanaryBytes + 2 * 256, kCanary);
    const uintptr_t start = reinterpret_cast<uintptr_t>(storage.data()) + kCanaryBytes;
    const uintptr_t aligned = (start - kSharedAlignment + 255) / 256 * 256 + kSharedAlignment;  // ≥ start
    base = storage.data() + (aligned - reinterpret_cast<uintptr_t>(storage.data()));
    bytes = size;
  }
  bool contains(const void* p, size_t size) const {
    const uintptr_t begin = reinterpret_cast<uintptr_t>(base), at = reinterpret_cast<uintptr_t>(p);
    return base && at >= begin && size <= bytes && at - begin <= bytes - size;
  }
  bool canaries_intact() const {
    for (size_t i = 0; i < kCanaryBytes; ++i)
      if (base[-1 - static_cast<std::ptrdiff_t>(i)] != kCanary || base[bytes + i] != kCanary) return false;
    return true;
  }
};

struct StaticVariable {
  const void* key;
  size_t offset, bytes;
};

struct Emulator {
  std::mt19937_64 rng{0x5eedu};
  std::vector<std::unique_ptr<EmulatedThread>> thread_pool;
  Context scheduler;
  EmulatedThread* current = nullptr;
  bool running = false;
  Dim3 grid, block, block_idx;
  unsigned threads = 0;
  SharedRegion dynamic_shared;
  SharedRegion static_shared;
  std::vector<StaticVariable> static_variables;  // of the running block
  size_t static_used = 0, static_poisoned = 0;
  const std::function<void()>* body = nullptr;
  std::vector<uint64_t> exchange;  // one shuffle slot per thread
  // Two warp_gather slots per thread, used alternately: a lane can only post to a slot again two
  // collectives later, when every lane of its warp has finished reading the previous contents.
  std::vector<WarpPost> postings;
  std::vector<WarpSnapshot> snapshots;  // one per warp
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

void yield_to_scheduler(EmulatedThread& t) { switch_context(t.context, emulator().scheduler); }

unsigned warp_count(unsigned threads) { return (threads + kWarpSize - 1) / kWarpSize; }
unsigned warp_size(unsigned threads, unsigned warp) { return std::min(kWarpSize, threads - warp * kWarpSize); }

void mix_into_hash(uint64_t& hash, uint64_t value) {
  hash = (hash ^ value) * 0x100000001b3ull;  // FNV-1a step
}

void copy_bytes(const AsyncCopy& copy) {
  if (copy.src_bytes > 0) std::memcpy(copy.dst, copy.src, static_cast<size_t>(copy.src_bytes));
  std::memset(static_cast<unsigned char*>(copy.dst) + copy.src_bytes, 0,
              static_cast<size_t>(copy.bytes - copy.src_bytes));
}

void land(AsyncCopy& copy) {
  if (copy.landed) return;
  copy_bytes(copy);
  copy.landed = true;
  ++emulator().stats.copies_landed_at_wait;
}

// Runs the kernel body on the thread's own stack; never returns (the scheduler does not resume
// an exited or failed thread).
void thread_entry() {
  Emulator& e = emulator();
  try {
    (*e.body)();
  } catch (const std::exception& error) {  // e.g. a kernel launched from a kernel
    fail(error.what());
  }
  EmulatedThread& t = *e.current;
  // Legal on the hardware, but in these kernels a copy nobody waits for is a lost tile.
  if (!t.open_group.empty()) fail("cp.async copies issued but never committed before the thread exited");
  for (const CopyGroup& group : t.committed)
    if (!group.empty()) fail("cp.async copies committed but never waited for before the thread exited");
  t.state = ThreadState::Exited;
  yield_to_scheduler(t);
  std::abort();
}

void prepare_block(Emulator& e) {
  std::memset(e.dynamic_shared.base, kPoison, e.dynamic_shared.bytes);
  for (WarpSnapshot& s : e.snapshots) s.collective = ~uint64_t{0};
  // Static variables are placed as threads reach them; what the previous block used is poisoned.
  std::memset(e.static_shared.base, kPoison, e.static_poisoned);
  e.static_variables.clear();
  e.static_used = 0;
  for (unsigned i = 0; i < e.threads; ++i) {
    EmulatedThread& t = *e.thread_pool[i];
    t.index = i;
    t.position = Dim3(i % e.block.x, i / e.block.x % e.block.y, i / (e.block.x * e.block.y));
    t.state = ThreadState::Runnable;
    t.open_group.clear();
    t.committed.clear();
    t.collective = nullptr;
    t.collectives_issued = 0;
    prepare_context(t.context, t.stack, thread_entry);
  }
}

std::string warp_name(const Emulator& e, unsigned warp) {
  return "warp " + std::to_string(warp) + " of " + block_name(e.block_idx);
}

// A warp some of whose lanes wait in a warp-collective instruction: releases it when every lane
// waits in the same one (.sync.aligned); throws when they never can. With `stuck` (nothing else
// was released), lanes elsewhere (at a barrier: the instruction in divergent code) never come.
bool release_warp_collective(Emulator& e, unsigned warp, unsigned exited, bool stuck) {
  const unsigned count = warp_size(e.threads, warp);
  const auto lane = [&](unsigned l) -> EmulatedThread& { return *e.thread_pool[warp * kWarpSize + l]; };
  const char* first = nullptr;
  unsigned waiting = 0;
  for (unsigned l = 0; l < count; ++l) {
    if (lane(l).state != ThreadState::AtWarpCollective) continue;
    ++waiting;
    if (!first) first = lane(l).collective;
  }
  if (waiting == 0) return false;
  if (exited > 0)
    throw EmulationError(std::string(first) + " (.sync.aligned) waits for " + std::to_string(exited) + " lanes of " +
                         warp_name(e, warp) + " that already exited");
  if (waiting < count && stuck)
    throw EmulationError(std::string(first) + " (.sync.aligned) reached by " + std::to_string(waiting) + " of the " +
                         std::to_string(count) + " lanes of " + warp_name(e, warp) +
                         "; the others wait at a barrier (a warp-collective instruction inside divergent code)");
  if (waiting < count) return false;  // the others may still arrive
  for (unsigned l = 0; l < count; ++l)
    if (std::strcmp(lane(l).collective, first) != 0)
      throw EmulationError("lanes of " + warp_name(e, warp) + " execute different warp-collective instructions: " +
                           first + " and, in lane " + std::to_string(l) + ", " + lane(l).collective +
                           " (.aligned: every lane must execute the same one)");
  for (unsigned l = 0; l < count; ++l) lane(l).state = ThreadState::Runnable;
  ++e.stats.warp_collectives;
  return true;
}

// Releases whatever barrier is complete; throws when the waiting threads can never proceed.
// Lanes past the end of a partial last warp do not exist and are not waited for.
void release_barriers(Emulator& e) {
  const unsigned threads = e.threads;
  unsigned exited = 0, at_block = 0, at_warp = 0;
  bool released = false;
  for (unsigned w = 0; w < warp_count(threads); ++w) {
    const unsigned lanes = warp_size(threads, w);
    unsigned warp_waiting = 0, warp_exited = 0, warp_collective = 0;
    for (unsigned l = 0; l < lanes; ++l) {
      const ThreadState s = e.thread_pool[w * kWarpSize + l]->state;
      warp_waiting += s == ThreadState::AtWarpBarrier;
      warp_exited += s == ThreadState::Exited;
      warp_collective += s == ThreadState::AtWarpCollective;
      at_block += s == ThreadState::AtBlockBarrier;
    }
    exited += warp_exited;
    at_warp += warp_waiting;
    if (warp_collective > 0) {
      released |= release_warp_collective(e, w, warp_exited, false);
      continue;
    }
    if (warp_waiting == lanes) {
      for (unsigned l = 0; l < lanes; ++l) e.thread_pool[w * kWarpSize + l]->state = ThreadState::Runnable;
      ++e.stats.warp_barriers;
      released = true;
    } else if (warp_waiting > 0 && warp_exited > 0) {
      throw EmulationError("__syncwarp() waits for lanes that already exited (warp " + std::to_string(w) + " of " +
                           block_name(e.block_idx) + ")");
    }
  }
  if (released) return;
  for (unsigned w = 0; w < warp_count(threads); ++w) release_warp_collective(e, w, 0, true);
  if (at_block == 0)  // a guard: partial warps with exited lanes were reported above
    throw EmulationError("no thread of " + block_name(e.block_idx) + " can make progress");
  if (exited > 0)
    throw EmulationError("__syncthreads() reached after " + std::to_string(exited) + " threads of " +
                         block_name(e.block_idx) + " exited");
  if (at_block != threads)
    throw EmulationError("threads of " + block_name(e.block_idx) + " wait at different barriers: " +
                         std::to_string(at_block) + " at __syncthreads(), " + std::to_string(at_warp) +
                         " at __syncwarp() (a barrier inside divergent code)");
  for (unsigned i = 0; i < threads; ++i) e.thread_pool[i]->state = ThreadState::Runnable;
  ++e.stats.block_barriers;
}

void run_block(Emulator& e) {
  prepare_block(e);
  std::vector<unsigned> order(e.threads);
  std::iota(order.begin(), order.end(), 0u);
  for (;;) {
    std::shuffle(order.begin(), order.end(), e.rng);
    for (unsigned i : order) {
      EmulatedThread& t = *e.thread_pool[i];
      if (t.state != ThreadState::Runnable) continue;
      mix_into_hash(e.stats.schedule_hash, i);
      e.current = &t;
      switch_context(e.scheduler, t.context);
      e.current = nullptr;
      if (t.state == ThreadState::Failed) throw EmulationError(e.failure);
    }
    const bool all_exited = std::all_of(e.thread_pool.begin(), e.thread_pool.begin() + e.threads,
                                        [](const auto& t) { return t->state == ThreadState::Exited; });
    if (all_exited) break;
    release_barriers(e);
  }
  if (!e.dynamic_shared.canaries_intact())
    throw EmulationError("a thread of " + block_name(e.block_idx) + " wrote outside its dynamic shared memory");
  if (!e.static_shared.canaries_intact())
    throw EmulationError("a thread of " + block_name(e.block_idx) + " wrote outside its static shared memory");
  if (e.static_used + e.dynamic_shared.bytes > kMaxDynamicSharedBytes)
    throw EmulationError(std::to_string(e.static_used) + " bytes of static and " +
                         std::to_string(e.dynamic_shared.bytes) + " of dynamic shared memory exceed the device's " +
                         std::to_string(kMaxDynamicSharedBytes) + " per block");
  ++e.stats.blocks;
}

std::string dims(const Dim3& d) {
  return "(" + std::to_string(d.x) + ", " + std::to_string(d.y) + ", " + std::to_string(d.z) + ")";
}

}  // namespace

const Dim3& thread_index() { return running_thread("threadIdx").position; }
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
  const unsigned source = warp_base + ((t.index % kWarpSize) ^ static_cast<unsigned>(lane_xor));
  if (source >= e.threads) fail("__shfl_xor_sync() reads a lane past the end of a partial warp");
  e.exchange[t.index] = bits;
  warp_barrier();  // every lane has posted
  const uint64_t received = e.exchange[source];
  warp_barrier();  // every lane has read before the slots are reused
  return received;
}

void warp_gather(const char* instruction, const void* post, size_t bytes, void* postings) {
  Emulator& e = emulator();
  EmulatedThread& t = running_thread(instruction);
  if (bytes > kMaxWarpPostBytes) fail(std::string(instruction) + ": warp_gather posting larger than kMaxWarpPostBytes");
  const unsigned warp = t.index / kWarpSize, base = warp * kWarpSize;
  if (warp_size(e.threads, warp) != kWarpSize)
    fail(std::string(instruction) + " in a warp of " + std::to_string(warp_size(e.threads, warp)) +
         " lanes (.sync.aligned: all 32 lanes must execute it; the block has " + std::to_string(e.threads) +
         " threads)");
  const size_t parity = (t.collectives_issued & 1u) * e.threads;
  std::memcpy(e.postings[parity + t.index].data, post, bytes);
  t.collective = instruction;
  t.state = ThreadState::AtWarpCollective;
  yield_to_scheduler(t);  // released once all 32 lanes posted the same instruction
  t.collective = nullptr;
  ++t.collectives_issued;
  if (postings) {
    unsigned char* out = static_cast<unsigned char*>(postings);
    for (unsigned l = 0; l < kWarpSize; ++l) std::memcpy(out + l * bytes, e.postings[parity + base + l].data, bytes);
  }
}

void warp_postings(void* postings, size_t bytes) {
  Emulator& e = emulator();
  const EmulatedThread& t = running_thread("warp_postings");
  if (t.collectives_issued == 0 || bytes > kMaxWarpPostBytes) fail("warp_postings without a warp_gather before it");
  const size_t parity = ((t.collectives_issued - 1) & 1u) * e.threads;
  const unsigned base = t.index / kWarpSize * kWarpSize;
  unsigned char* out = static_cast<unsigned char*>(postings);
  for (unsigned l = 0; l < kWarpSize; ++l) std::memcpy(out + l * bytes, e.postings[parity + base + l].data, bytes);
}

unsigned char* warp_snapshot(bool* capture) {
  Emulator& e = emulator();
  const EmulatedThread& t = running_thread("warp_snapshot");
  WarpSnapshot& snapshot = e.snapshots[t.index / kWarpSize];
  // No lane of the warp runs on before the first one to resume has captured it; the next
  // collective cannot complete before every lane is done with this one, so one buffer suffices.
  *capture = snapshot.collective != t.collectives_issued;
  snapshot.collective = t.collectives_issued;
  return snapshot.data;
}

void async_copy(void* dst, const void* src, int bytes, int src_bytes) {
  Emulator& e = emulator();
  EmulatedThread& t = running_thread("cp.async");
  if (bytes != 4 && bytes != 8 && bytes != 16) fail("cp.async of " + std::to_string(bytes) + " bytes (4, 8 or 16)");
  if (src_bytes < 0) src_bytes = bytes;
  if (src_bytes > bytes)
    fail("cp.async src-size " + std::to_string(src_bytes) + " exceeds its copy size " + std::to_string(bytes));
  if (!in_shared_memory(dst, static_cast<size_t>(bytes))) fail("cp.async destination outside shared memory");
  // A zero src-size reads nothing: the source need not be a valid address.
  if (src_bytes > 0 && in_shared_memory(src, 1)) fail("cp.async source in shared memory (must be global)");
  if (reinterpret_cast<uintptr_t>(dst) % static_cast<uintptr_t>(bytes) != 0 ||
      (src_bytes > 0 && reinterpret_cast<uintptr_t>(src) % static_cast<uintptr_t>(bytes) != 0))
    fail("cp.async of " + std::to_string(bytes) + " bytes between addresses not aligned to its size");
  // The hardware may land a copy any time between issue and wait: landing some at once
  // exposes writes into buffers still being read, deferring the others exposes early reads.
  AsyncCopy copy{dst, src, bytes, src_bytes, false};
  if (e.rng() & 1u) {
    copy_bytes(copy);
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
  return e.dynamic_shared.base;
}

unsigned char* static_shared_memory(const void* key, size_t bytes, size_t alignment) {
  Emulator& e = emulator();
  running_thread("__shared__");
  for (const StaticVariable& v : e.static_variables) {
    if (v.key != key) continue;
    if (v.bytes != bytes) fail("one __shared__ declaration asked for two sizes in one block");
    return e.static_shared.base + v.offset;
  }
  if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > kSharedAlignment)
    fail("__shared__ variable aligned to " + std::to_string(alignment) + " bytes (at most " +
         std::to_string(kSharedAlignment) + " emulated)");
  const size_t offset = (e.static_used + alignment - 1) / alignment * alignment;
  if (offset + bytes > kMaxStaticSharedBytes)
    fail("static __shared__ variables exceed " + std::to_string(kMaxStaticSharedBytes) + " bytes per block");
  e.static_variables.push_back({key, offset, bytes});
  e.static_used = offset + bytes;
  e.static_poisoned = std::max(e.static_poisoned, e.static_used);
  return e.static_shared.base + offset;
}

bool in_shared_memory(const void* p, size_t bytes) {
  const Emulator& e = emulator();
  return e.dynamic_shared.contains(p, bytes) || e.static_shared.contains(p, bytes);
}

void fail(const std::string& rule) {
  Emulator& e = emulator();
  if (!e.current) throw EmulationError(rule);
  EmulatedThread& t = *e.current;
  e.failure = rule + " (" + block_name(e.block_idx) + ", thread " + std::to_string(t.index) + " " +
              dims(t.position) + ": warp " + std::to_string(t.index / kWarpSize) + ", lane " +
              std::to_string(t.index % kWarpSize) + ")";
  t.state = ThreadState::Failed;
  yield_to_scheduler(t);
  std::abort();  // a failed thread is never resumed
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
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  if (threads == 0 || threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64)
    throw EmulationError("block of " + dims(block) + " threads: CUDA allows at most (1024, 1024, 64) and 1024 in all");
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) throw EmulationError("launch with an empty grid " + dims(grid));
  if (grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535)
    throw EmulationError("grid of " + dims(grid) + " blocks: CUDA allows at most (2³¹ − 1, 65535, 65535)");
  if (shared_bytes > kMaxDynamicSharedBytes)
    throw EmulationError(std::to_string(shared_bytes) + " bytes of dynamic shared memory exceed the device's " +
                         std::to_string(kMaxDynamicSharedBytes));

  e.threads = static_cast<unsigned>(threads);
  while (e.thread_pool.size() < e.threads) e.thread_pool.push_back(std::make_unique<EmulatedThread>());
  e.exchange.assign(e.threads, 0);
  e.postings.assign(2 * size_t{e.threads}, WarpPost{});
  e.snapshots.assign(warp_count(e.threads), WarpSnapshot{});
  e.dynamic_shared.allocate(shared_bytes);
  if (!e.static_shared.base) e.static_shared.allocate(kMaxStaticSharedBytes);
  e.grid = grid;
  e.block = block;
  e.body = &kernel_body;

  struct RunningFlag {
    Emulator& e;
    explicit RunningFlag(Emulator& em) : e(em) { e.running = true; }
    ~RunningFlag() {
      e.running = false;
      e.current = nullptr;
      e.dynamic_shared = SharedRegion{};
    }
  } running_flag(e);

  std::vector<Dim3> blocks;
  blocks.reserve(static_cast<size_t>(grid.x) * grid.y * grid.z);
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) blocks.emplace_back(x, y, z);
  std::shuffle(blocks.begin(), blocks.end(), e.rng);  // blocks may run in any order
  for (const Dim3& b : blocks) {
    e.block_idx = b;
    run_block(e);
  }
}

void set_schedule_seed(uint64_t seed) { emulator().rng.seed(seed); }
EmulatorStats emulator_stats() { return emulator().stats; }
void reset_emulator_stats() { emulator().stats = EmulatorStats{}; }

}  // namespace strata::emu
