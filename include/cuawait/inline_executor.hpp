// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `inline_executor`: resumes a posted coroutine at once, on the posting thread.

#include "cuawait/detail/trampoline.hpp"
#include "cuawait/executor.hpp"

#include <coroutine>

namespace cuawait {

//! An executor that runs work where it is posted: `post(h, p)` resumes `h` before it
//! returns, on the calling thread, inside an `executor_scope` naming this executor and
//! `p`. Useful for completions cheap enough to run on the completing thread, and in
//! tests. The resumption goes through the bounded-stack trampoline, so a chain of inline
//! posts does not grow the stack without bound. Stateless and thread-safe.
class inline_executor final : public executor {
public:
  //! Resumes `h` now, on the calling thread. Whatever `h` throws stays inside its own
  //! promise (coroutine bodies report exceptions through their awaiters).
  void post(std::coroutine_handle<> h, priority p) noexcept override {
    const executor_scope scope(this, p);
    detail::resume(h);
  }

  //! Awaiter returned by `schedule()`: completes at once, without suspending.
  struct schedule_awaiter {
    [[nodiscard]] bool await_ready() const noexcept { return true; }
    void await_suspend(std::coroutine_handle<>) const noexcept {}
    void await_resume() const noexcept {}
  };

  //! `co_await ex.schedule()` continues at once, on the same thread (it exists so that
  //! generic code can `schedule()` onto any executor).
  [[nodiscard]] schedule_awaiter schedule(priority = priority::normal) const noexcept { return {}; }

  //! A process-wide instance (the executor holds no state).
  [[nodiscard]] static inline_executor& instance() noexcept {
    static inline_executor ex;
    return ex;
  }
};

} // namespace cuawait
