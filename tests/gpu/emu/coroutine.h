// Execution contexts of the emulated GPU threads: each runs on its own guarded stack and hands
// control back and forth with the scheduler. On x86-64 a few instructions switch stacks (no
// system call per switch, unlike swapcontext); elsewhere, and under AddressSanitizer, ucontext.
#pragma once
#include <cstddef>

#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define STRATA_EMU_STACK_SWITCH 1
#else
#include <ucontext.h>
#endif

namespace strata::emu {

// A coroutine stack with an inaccessible page below it: an overflow faults at once instead of
// corrupting whatever lies next to it.
class GuardedStack {
 public:
  explicit GuardedStack(size_t bytes);
  ~GuardedStack();
  GuardedStack(const GuardedStack&) = delete;
  GuardedStack& operator=(const GuardedStack&) = delete;
  void* bottom() const { return base_ + guard_; }
  size_t bytes() const { return bytes_; }

 private:
  unsigned char* base_ = nullptr;
  size_t guard_ = 0;
  size_t bytes_ = 0;
};

// Where a suspended context resumes.
struct Context {
#ifdef STRATA_EMU_STACK_SWITCH
  void* stack_pointer = nullptr;
#else
  ucontext_t state;
#endif
};

// Makes `context` start `entry` on `stack` when first switched to. `entry` must never return:
// it ends by switching away for good.
void prepare_context(Context& context, GuardedStack& stack, void (*entry)());
// Saves the running context into `from` and resumes `to`.
void switch_context(Context& from, Context& to);

}  // namespace strata::emu
