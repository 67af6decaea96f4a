// SPDX-License-Identifier: Apache-2.0
#pragma once

// `gate`: a one-shot event for one waiter on one thread, so that a test chooses the order in
// which suspended coroutines continue.

#include <cuawait/detail/trampoline.hpp>

#include <coroutine>
#include <utility>

namespace cuawait::test {

//! `co_await g` suspends until `g.open()` (or not at all once it is open). One waiter at a
//! time; not thread-safe: open it on the thread that awaits it. Neither copyable nor movable
//! (a suspended waiter points at it).
class gate {
public:
  gate() = default;
  gate(const gate&) = delete;
  gate& operator=(const gate&) = delete;

  [[nodiscard]] bool await_ready() const noexcept { return m_open; }
  void await_suspend(std::coroutine_handle<> h) noexcept { m_waiter = h; }
  void await_resume() const noexcept {}

  //! Opens the gate and resumes the waiter, if any, on the calling thread before returning.
  void open() {
    m_open = true;
    if (auto h = std::exchange(m_waiter, {})) {
      cuawait::detail::resume(h);
    }
  }

private:
  bool m_open = false;
  std::coroutine_handle<> m_waiter;
};

} // namespace cuawait::test
