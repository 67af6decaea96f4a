// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The part every reactor-backed awaiter shares: it owns the intrusive wait node, submits
//! it on suspension with the executor and priority of the suspending code, and withdraws
//! it if the coroutine is destroyed while waiting.

#include "cuawait/completion_reactor.hpp"
#include "cuawait/detail/reactor_node.hpp"
#include "cuawait/executor.hpp"

#include <coroutine>

namespace cuawait::detail {

//! Embed one per awaiter. Not movable once suspended (the reactor points at the node).
class reactor_wait {
public:
  reactor_wait() noexcept = default;
  reactor_wait(const reactor_wait&) = delete;
  reactor_wait& operator=(const reactor_wait&) = delete;
  //! Moves the awaiter part of an unsubmitted wait.
  reactor_wait(reactor_wait&& other) noexcept : m_node(other.m_node) {}
  //! A wait still submitted here means the coroutine is being destroyed while suspended:
  //! withdraw it so that it is never resumed. (Only the awaiting coroutine touches
  //! `m_submitted`, so reading it needs no lock.)
  ~reactor_wait() {
    if (m_submitted) {
      m_reactor->withdraw(m_node);
    }
  }

  //! The node, for the awaiter to fill (lane, token, operation) before `suspend`.
  wait_node& node() noexcept { return m_node; }
  const wait_node& node() const noexcept { return m_node; }

  //! Submits the wait for `h`, to be resumed on the current executor with the current
  //! priority (inline on the reactor's thread when there is none). Returns false when the
  //! work had already finished: do not suspend.
  bool suspend(completion_reactor& r, std::coroutine_handle<> h) noexcept {
    m_node.handle = h;
    m_node.exec = current_executor();
    m_node.prio = current_priority();
    m_reactor = &r;
    if (r.trace().on_suspend != nullptr) {
      r.trace().on_suspend(r.trace().context, m_node);
    }
    m_submitted = true; // before submit: the coroutine may run (and finish) before it returns
    if (r.submit(m_node)) {
      return true;
    }
    m_submitted = false;
    // Finished before it could suspend: close what on_suspend opened (resolved_ns == 0
    // tells the hook that the coroutine never suspended).
    if (r.trace().on_resume != nullptr) {
      r.trace().on_resume(r.trace().context, m_node);
    }
    return false;
  }

  //! Call from `await_resume`: the wait's outcome (records the resume latency).
  completion_status finish() noexcept {
    if (m_submitted) {
      m_submitted = false;
      m_reactor->on_resumed(m_node);
    }
    return m_node.status;
  }

private:
  wait_node m_node{};
  completion_reactor* m_reactor = nullptr;
  bool m_submitted = false;
};

} // namespace cuawait::detail
