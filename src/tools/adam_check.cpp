// `strata adam-check`: the host AdamW that updates offloaded optimizer state, checked and timed
// on this node. Every instruction set the CPU runs is checked bit for bit against the scalar
// reference on a sample; then one fused step over N parameters is timed per instruction set
// and thread count, beside the node's own streaming bandwidth (a += b over the same pool),
// which bounds it once the arrays are larger than the caches: a step moves 28 bytes per
// parameter (reads p, g, m, v; writes p, m, v). With --nvme-path, the offload file's write and
// read rates there too. Lines are flushed as they come: a run cut short keeps what it measured.
#include <fmt/core.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/core.h"
#include "optim/optim.h"
#include "tools/tools.h"

namespace strata {
namespace {

constexpr double kBytesPerParam = 28.0;
constexpr int64_t kRecordBytes = int64_t{12} << 20;  // the offload file's transfers
constexpr int kRecordsInFlight = 4;

template <typename... Args>
void say(fmt::format_string<Args...> format, Args&&... args) {
  fmt::print(format, std::forward<Args>(args)...);
  std::fflush(stdout);
}

// The four arrays hold 16 bytes per parameter: a count the machine cannot hold is the user's to
// lower, said before allocating (pageable memory would otherwise fail only when touched).
void check_host_memory(int64_t params) {
  const double need = 16.0 * static_cast<double>(params);
  const double available = static_cast<double>(meminfo_bytes("MemAvailable:"));
  if (available > 0 && need > available)
    throw UserError(fmt::format("strata adam-check --params {}: its four arrays (parameters, gradients, two moments) "
                                "need {:.2f} GiB of host memory, but {:.2f} GiB is available; lower --params",
                                params, need / (1 << 30), available / (1 << 30)));
}

struct HostArrays {
  Buffer p, g, m, v;
  explicit HostArrays(int64_t n)
      : p(allocate_pageable_host(static_cast<size_t>(n) * 4)), g(allocate_pageable_host(static_cast<size_t>(n) * 4)),
        m(allocate_pageable_host(static_cast<size_t>(n) * 4)), v(allocate_pageable_host(static_cast<size_t>(n) * 4)) {}
  HostAdamWData data(int64_t n) const {
    HostAdamWData d;
    d.param = static_cast<float*>(p.data());
    d.grad = static_cast<const float*>(g.data());
    d.exp_avg = static_cast<float*>(m.data());
    d.exp_avg_sq = static_cast<float*>(v.data());
    d.n = n;
    return d;
  }
};

void fill(const HostArrays& a, int64_t n, ThreadPool& pool) {
  const int64_t piece = int64_t{1} << 20;
  pool.run((n + piece - 1) / piece, [&](int64_t t) {
    for (int64_t i = t * piece; i < std::min(n, (t + 1) * piece); ++i) {
      const uint64_t k = static_cast<uint64_t>(i);
      static_cast<float*>(a.p.data())[i] = rng_normal(1, 0, k);
      static_cast<float*>(a.g.data())[i] = rng_normal(1, 1, k) * 1e-2f;
      static_cast<float*>(a.m.data())[i] = rng_normal(1, 2, k) * 1e-3f;
      static_cast<float*>(a.v.data())[i] = std::abs(rng_normal(1, 3, k)) * 1e-5f;
    }
  });
}

AdamWArgs bench_args() {
  AdamWArgs a;
  a.lr = 1e-4;
  a.weight_decay = 0.01;
  a.bias_correction1 = 0.1;
  a.bias_correction2 = 0.001;
  return a;
}

// a += b over n elements, vectorised as wide as the AdamW lanes, so the bandwidth is measured
// and not the loop.
#if defined(__x86_64__)
__attribute__((target("avx2"))) void add_in_place(float* __restrict a, const float* __restrict b, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(a + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  for (; i < n; ++i) a[i] += b[i];
}
#else
void add_in_place(float* __restrict a, const float* __restrict b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) a[i] += b[i];
}
#endif

// Every lane against the scalar reference, with a bf16 copy, on a sample that has a tail.
bool check_bits(HostSimd simd, ThreadPool& pool) {
  const int64_t n = 200003;
  HostArrays want(n), got(n);
  fill(want, n, pool);
  fill(got, n, pool);
  std::vector<uint16_t> want_copy(static_cast<size_t>(n)), got_copy(static_cast<size_t>(n));
  HostAdamWData w = want.data(n), g = got.data(n);
  w.param_copy = want_copy.data();
  g.param_copy = got_copy.data();
  w.copy_dtype = g.copy_dtype = DType::BF16;
  host_adamw_update(w, bench_args(), HostSimd::Scalar, nullptr);
  host_adamw_update(g, bench_args(), simd, &pool);
  const size_t bytes = static_cast<size_t>(n) * 4;
  return std::memcmp(want.p.data(), got.p.data(), bytes) == 0 && std::memcmp(want.m.data(), got.m.data(), bytes) == 0 &&
         std::memcmp(want.v.data(), got.v.data(), bytes) == 0 && want_copy == got_copy;
}

// Seconds per call of fn, best of `rounds` after one warm-up.
template <typename Fn>
double best_seconds(int rounds, Fn fn) {
  fn();
  double best = 1e30;
  for (int r = 0; r < rounds; ++r) {
    const Timer t;
    fn();
    best = std::min(best, t.seconds());
  }
  return best;
}

// Whole records of the offload file --nvme-bytes asks for (at least one).
int64_t direct_io_records(int64_t bytes) { return std::max<int64_t>(1, bytes / kRecordBytes); }

// GB/s of writing, then reading, the whole of `file` the way offloaded state moves: 12 MiB
// records, up to four requests in flight.
std::pair<double, double> time_direct_io(DirectFile& file, int64_t records) {
  const int64_t record = kRecordBytes;
  std::vector<AlignedBuffer> ring;
  for (int k = 0; k < kRecordsInFlight; ++k) ring.push_back(allocate_aligned(static_cast<size_t>(record)));
  double gbs[2] = {0, 0};
  for (int writing = 1; writing >= 0; --writing) {
    std::vector<std::future<void>> flight(ring.size());
    const Timer t;
    for (int64_t r = 0; r < records; ++r) {
      std::future<void>& slot = flight[static_cast<size_t>(r) % ring.size()];
      if (slot.valid()) slot.get();
      char* buffer = ring[static_cast<size_t>(r) % ring.size()].get();
      slot = writing ? file.write(r * record, buffer, static_cast<size_t>(record))
                     : file.read(r * record, buffer, static_cast<size_t>(record));
    }
    for (std::future<void>& f : flight) {
      if (f.valid()) f.get();
    }
    gbs[writing] = static_cast<double>(records * record) / t.seconds() / 1e9;
  }
  return {gbs[1], gbs[0]};
}

}  // namespace

int run_adam_check(const AdamCheckOptions& options) {
  check_host_memory(options.params);
  // The file first, so that a wrong --nvme-path is said before the timings, not after them.
  std::unique_ptr<DirectFile> file;
  const int64_t records = direct_io_records(options.nvme_bytes);
  if (!options.nvme_path.empty())
    file = std::make_unique<DirectFile>(options.nvme_path, "adam-check", records * kRecordBytes, "--nvme-path");
  const int threads = host_threads_per_rank(options.threads, 1);
  ThreadPool pool(threads);
  const HostSimd best = host_simd_best();
  std::vector<HostSimd> simds = {HostSimd::Scalar};
  if (best >= HostSimd::Avx2) simds.push_back(HostSimd::Avx2);
  if (best >= HostSimd::Avx512) simds.push_back(HostSimd::Avx512);
  bool all_exact = true;
  for (HostSimd simd : simds) {
    const bool exact = check_bits(simd, pool);
    all_exact = all_exact && exact;
    say("adam-check: {:<6} bit for bit against the scalar reference: {}\n", host_simd_name(simd),
               exact ? "yes" : "NO");
  }
  const int64_t n = options.params;
  HostArrays a(n);
  fill(a, n, pool);
  // The node's streaming bandwidth over the same threads, in AdamW's pattern (in place, so no
  // write-allocate traffic): a += b reads 8 and writes 4 bytes per element.
  const int64_t piece = int64_t{1} << 16;
  const int64_t tasks = (n + piece - 1) / piece;
  const double stream_s = best_seconds(options.rounds, [&] {
    pool.run(tasks, [&](int64_t t) {
      const int64_t begin = t * piece;
      add_in_place(static_cast<float*>(a.m.data()) + begin, static_cast<const float*>(a.g.data()) + begin,
                   std::min(n, begin + piece) - begin);
    });
  });
  const double stream_gbs = 12.0 * static_cast<double>(n) / stream_s / 1e9;
  say("adam-check: {} parameters, {} threads; streaming a += b: {:.1f} GB/s\n", n, threads, stream_gbs);
  std::string json = fmt::format("{{\"params\": {}, \"threads\": {}, \"stream_gbs\": {:.2f}, \"exact\": {}",
                                 n, threads, stream_gbs, all_exact ? "true" : "false");
  bool above_streaming = false;
  std::vector<int> thread_counts = {1};
  if (threads > 1) thread_counts.push_back(threads);
  for (HostSimd simd : simds) {
    for (int t : thread_counts) {
      ThreadPool* use = t == 1 ? nullptr : &pool;
      const double s = best_seconds(options.rounds, [&] { host_adamw_update(a.data(n), bench_args(), simd, use); });
      const double per_s = static_cast<double>(n) / s, gbs = per_s * kBytesPerParam / 1e9;
      say("adam-check: {:<6} {:>2} thread{}: {:8.3f} ms/step  {:7.1f} M params/s  {:6.1f} GB/s  ({:.0f}% of "
                 "streaming)\n",
                 host_simd_name(simd), t, t == 1 ? " " : "s", s * 1e3, per_s / 1e6, gbs, 100.0 * gbs / stream_gbs);
      json += fmt::format(", \"{}_t{}_params_per_s\": {:.0f}", host_simd_name(simd), t, per_s);
      above_streaming = above_streaming || gbs > 1.05 * stream_gbs;
    }
  }
  if (above_streaming)
    say("adam-check: a figure above 100% of streaming means the arrays fit in the CPU's caches: time at least the "
        "default 5e7 parameters for the memory-bound rate\n");
  if (file) {
    const auto [write_gbs, read_gbs] = time_direct_io(*file, records);
    say("adam-check: offload file in {}: {} MiB, write {:.2f} GB/s, read {:.2f} GB/s (O_DIRECT, 12 MiB records, "
        "up to {} in flight)\n",
        options.nvme_path, records * (kRecordBytes >> 20), write_gbs, read_gbs, kRecordsInFlight);
    json += fmt::format(", \"nvme_write_gbs\": {:.3f}, \"nvme_read_gbs\": {:.3f}", write_gbs, read_gbs);
  }
  say("{}}}\n", json);
  return all_exact ? 0 : kExitDeviceFailure;
}

}  // namespace strata
