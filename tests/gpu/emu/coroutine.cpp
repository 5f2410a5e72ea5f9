// Stack switching for the emulator's threads (see coroutine.h). The x86-64 switch saves the
// callee-saved registers and the SSE/x87 control words on the old stack and pops them from the
// new one, which is all the System V ABI asks a call to preserve.
#include "coroutine.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>

#ifdef STRATA_EMU_STACK_SWITCH
extern "C" void strata_emu_switch_stack(void** save_stack_pointer, void* load_stack_pointer);
extern "C" void strata_emu_stack_start();
// A fresh stack holds a frame as strata_emu_switch_stack leaves it: control words, r15 … rbp,
// and the return address strata_emu_stack_start, which calls the entry function kept in r12.
asm(R"(
  .text
  .p2align 4
  .globl strata_emu_switch_stack
  .hidden strata_emu_switch_stack
  .type strata_emu_switch_stack, @function
strata_emu_switch_stack:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size strata_emu_switch_stack, .-strata_emu_switch_stack
  .globl strata_emu_stack_start
  .hidden strata_emu_stack_start
  .type strata_emu_stack_start, @function
strata_emu_stack_start:
  callq *%r12
  ud2
  .size strata_emu_stack_start, .-strata_emu_stack_start
)");
#endif

namespace strata::emu {

GuardedStack::GuardedStack(size_t bytes) : bytes_(bytes) {
  guard_ = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* p = mmap(nullptr, guard_ + bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::runtime_error("emulator: cannot map a thread stack");
  base_ = static_cast<unsigned char*>(p);
  mprotect(base_, guard_, PROT_NONE);
}

GuardedStack::~GuardedStack() { munmap(base_, guard_ + bytes_); }

#ifdef STRATA_EMU_STACK_SWITCH

void prepare_context(Context& context, GuardedStack& stack, void (*entry)()) {
  const uintptr_t top = (reinterpret_cast<uintptr_t>(stack.bottom()) + stack.bytes()) & ~uintptr_t{15};
  // 64 bytes of frame; after the final `ret` the stack pointer is 16-byte aligned, as the
  // `call` in strata_emu_stack_start needs.
  auto* frame = reinterpret_cast<uint64_t*>(top - 80);
  std::memset(frame, 0, 80);
  uint32_t mxcsr = 0;
  uint16_t fpu_control = 0;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpu_control));
  std::memcpy(frame, &mxcsr, sizeof(mxcsr));
  std::memcpy(reinterpret_cast<unsigned char*>(frame) + 4, &fpu_control, sizeof(fpu_control));
  frame[4] = reinterpret_cast<uint64_t>(entry);  // r12
  frame[7] = reinterpret_cast<uint64_t>(&strata_emu_stack_start);
  context.stack_pointer = frame;
}

void switch_context(Context& from, Context& to) { strata_emu_switch_stack(&from.stack_pointer, to.stack_pointer); }

#else

void prepare_context(Context& context, GuardedStack& stack, void (*entry)()) {
  getcontext(&context.state);
  context.state.uc_stack.ss_sp = stack.bottom();
  context.state.uc_stack.ss_size = stack.bytes();
  context.state.uc_link = nullptr;
  makecontext(&context.state, entry, 0);
}

void switch_context(Context& from, Context& to) { swapcontext(&from.state, &to.state); }

#endif

}  // namespace strata::emu
