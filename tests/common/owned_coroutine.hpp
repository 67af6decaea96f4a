// SPDX-License-Identifier: Apache-2.0
#pragma once

// `owned_coroutine`: a test coroutine whose frame the test owns, so that it can cancel a
// suspended waiter by destroying it.

#include <coroutine>
#include <exception>

namespace cuawait::test {

//! A coroutine returning `owned_coroutine` starts at once and stays suspended at its end:
//! the test must `handle.destroy()` it (which, while it is suspended, cancels its wait). An
//! exception escaping it terminates the program.
struct owned_coroutine {
  struct promise_type {
    owned_coroutine get_return_object() {
      return {std::coroutine_handle<promise_type>::from_promise(*this)};
    }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_always final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }
  };
  std::coroutine_handle<promise_type> handle;
  //! True once the body has run to its end.
  [[nodiscard]] bool done() const { return handle.done(); }
};

} // namespace cuawait::test
