// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Bounded-stack resumption. Symmetric transfer (an `await_suspend` returning the next
//! coroutine) is a tail call only when the compiler makes it one: g++ 12 at -O0 and under
//! the sanitizers does not, so a loop of synchronously completing awaits would grow the
//! stack by a few frames per iteration. Every resumption the library starts goes through
//! `resume()`, which records a stack base for the thread; a transfer that finds the stack
//! grown past a budget parks the next coroutine and unwinds to the nearest `resume()`,
//! which resumes it from there. In builds where the transfer is a tail call the budget is
//! never reached and the only cost is one comparison.

#include <coroutine>
#include <cstddef>

namespace cuawait::detail {

//! Stack a chain of transfers may use above the nearest trampoline before it unwinds.
inline constexpr std::ptrdiff_t trampoline_stack_budget = 64 * 1024;

struct trampoline_state {
  char* base = nullptr;                 //!< frame address of the innermost trampoline
  std::coroutine_handle<> pending = {}; //!< a transfer parked while unwinding
};

constinit inline thread_local trampoline_state tl_trampoline{};

//! The stack pointer, read directly where we know how: `__builtin_frame_address` would force
//! a frame pointer (a push, a move and a pop) into every coroutine body that awaits a task.
[[gnu::always_inline]] inline char* current_frame() noexcept {
#if defined(__x86_64__)
  char* sp = nullptr;
  asm volatile("mov %%rsp, %0" : "=r"(sp));
  return sp;
#elif defined(__aarch64__)
  char* sp = nullptr;
  asm volatile("mov %0, sp" : "=r"(sp));
  return sp;
#else
  return static_cast<char*>(__builtin_frame_address(0));
#endif
}

//! Resumes `h` on this thread and runs any transfers parked while it ran. Safe to call
//! from inside a running coroutine (a nested trampoline keeps the outer base, so the
//! budget stays cumulative, and drains its own parked transfers).
inline void resume(std::coroutine_handle<> h) noexcept {
  trampoline_state& t = tl_trampoline;
  char* const outer_base = t.base;
  const std::coroutine_handle<> outer_pending = t.pending;
  if (outer_base == nullptr) {
    t.base = current_frame();
  }
  t.pending = {};
  h.resume();
  while (t.pending) {
    const std::coroutine_handle<> next = t.pending;
    t.pending = {};
    next.resume();
  }
  t.base = outer_base;
  t.pending = outer_pending;
}

//! What an `await_suspend` returns to hand control to `next`: `next` itself while the stack
//! has room, otherwise `noop_coroutine()` after parking `next` for the nearest trampoline.
//! With no trampoline on this thread (a foreign thread resumed us) it becomes one.
inline std::coroutine_handle<> transfer_to(std::coroutine_handle<> next) noexcept {
  trampoline_state& t = tl_trampoline;
  if (t.base == nullptr) {
    resume(next);
    return std::noop_coroutine();
  }
  if (t.base - current_frame() < trampoline_stack_budget || t.pending) {
    return next;
  }
  t.pending = next;
  return std::noop_coroutine();
}

} // namespace cuawait::detail
