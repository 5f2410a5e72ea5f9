// STRATA_KERNELS: picks the new or the previous kernel of an op still awaiting a GPU timing of
// both (kernel_selection.cuh). Host code only; it lives in the kernels library so every caller of
// a launcher, the backend, tests and benchmarks, sees one setting.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernel_selection.cuh"

namespace strata::cuda {
namespace {

constexpr int kNoOverride = -1;
std::atomic<int> g_override{kNoOverride};

KernelSet from_environment() {
  const char* value = std::getenv("STRATA_KERNELS");
  if (value == nullptr || value[0] == '\0' || std::strcmp(value, "new") == 0) return KernelSet::New;
  if (std::strcmp(value, "previous") == 0) return KernelSet::Previous;
  // Abort rather than fall back: a benchmark that silently timed the default would mislabel its rows.
  std::fprintf(stderr, "strata: STRATA_KERNELS=\"%s\" is not valid; use \"new\" (the default) or \"previous\"\n",
               value);
  std::abort();
}

}  // namespace

KernelSet kernel_set() {
  // Read (and judged) even under an override, so a bad value fails in tests too.
  static const KernelSet from_env = from_environment();
  const int forced = g_override.load(std::memory_order_relaxed);
  return forced != kNoOverride ? static_cast<KernelSet>(forced) : from_env;
}

void override_kernel_set(KernelSet set) { g_override.store(static_cast<int>(set), std::memory_order_relaxed); }

void clear_kernel_set_override() { g_override.store(kNoOverride, std::memory_order_relaxed); }

}  // namespace strata::cuda
