// Which of two kernels for one op runs while a new kernel waits for a GPU run to time it against
// the kernel it replaces. For benchmarks and tests only (not a configuration key): the environment
// variable STRATA_KERNELS picks the set, and tests may override it to run both in one process.
#pragma once

namespace strata::cuda {

enum class KernelSet : int { New = 0, Previous = 1 };

// STRATA_KERNELS, read once: unset, empty or "new" -> New; "previous" -> Previous. Any other value
// aborts with a message naming the variable and its valid values (a mistyped benchmark setting
// must not silently time the wrong kernel). An override, when set, wins.
KernelSet kernel_set();
inline bool use_previous_kernels() { return kernel_set() == KernelSet::Previous; }

// For tests: run `set` regardless of the environment until clear_kernel_set_override().
void override_kernel_set(KernelSet set);
void clear_kernel_set_override();

}  // namespace strata::cuda
