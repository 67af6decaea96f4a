// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The part every reactor-backed awaiter shares: it owns the intrusive wait node, submits
//! it on suspension with the executor and priority of the suspending code, honours a stop
//! token, and withdraws the wait if the coroutine is destroyed while waiting.
//!
//! Stop: when the wait's token can be stopped, a stop callback hands the node to the
//! reactor's `request_stop`, which costs O(1) and takes no lock (one `std::stop_source`
//! may run ten thousand such callbacks in a row): the node's claim word decides between the
//! stop request and the work's completion, so exactly one of them ends the wait, and the
//! reactor's pollers end and resume the stopped waits in bulk. Whoever ends the wait still
//! has to meet `await_suspend`, which may be registering the callback at that moment: both
//! set the node's arrival flag, and the second one resumes the coroutine (as `sync_waiter`
//! does for the CPU primitives). A wait that cannot be stopped skips all of this.

#include "cuawait/completion_reactor.hpp"
#include "cuawait/detail/reactor_node.hpp"
#include "cuawait/detail/trampoline.hpp"
#include "cuawait/executor.hpp"

#include <atomic>
#include <coroutine>
#include <optional>
#include <stop_token>

namespace cuawait::detail {

//! Calls `f(token)` with the stop token a wait of the coroutine `h` honours, and returns
//! its result: `own` when it can be stopped, else the token the coroutine's promise offers
//! (a cuawait task's, inherited from its awaiter, or the one `when_any` / `async_scope`
//! give their children), else `own` (which then never stops). A promise may return its
//! token by value: hence the callback instead of a returned reference.
template <class Promise, class F>
decltype(auto) with_wait_stop_token(std::coroutine_handle<Promise> h, const std::stop_token& own,
                                    F&& f) {
  if constexpr (requires { h.promise().get_stop_token(); }) {
    if (!own.stop_possible()) {
      decltype(auto) inherited = h.promise().get_stop_token();
      return static_cast<F&&>(f)(static_cast<const std::stop_token&>(inherited));
    }
  }
  return static_cast<F&&>(f)(own);
}

//! Embed one per awaiter. Not movable once suspended (the reactor points at the node).
class reactor_wait {
public:
  reactor_wait() noexcept = default;
  reactor_wait(const reactor_wait&) = delete;
  reactor_wait& operator=(const reactor_wait&) = delete;
  //! Moves the awaiter part of an unsubmitted wait.
  reactor_wait(reactor_wait&& other) noexcept : m_node(other.m_node) { m_node.arrival = nullptr; }
  //! A wait still submitted here means the coroutine is being destroyed while suspended:
  //! withdraw it so that it is never resumed. (Only the awaiting coroutine touches
  //! `m_submitted`, so reading it needs no lock.) The stop callback goes first: once it is
  //! deregistered no stop request can reach the node any more.
  ~reactor_wait() {
    m_stop.reset();
    if (m_submitted) {
      m_reactor->withdraw(m_node);
      uncount();
    }
  }

  //! The node, for the awaiter to fill (lane, token, operation) before `suspend`.
  wait_node& node() noexcept { return m_node; }
  const wait_node& node() const noexcept { return m_node; }

  //! Call before arming any completion marker: true when `token` already asks to stop.
  //! The wait is then over (do not submit, do not suspend) and `stopped()` is true.
  [[nodiscard]] bool stop_before_submit(const std::stop_token& token) noexcept {
    if (!token.stop_requested()) {
      return false;
    }
    m_node.status = {completion_state::cancelled, 0};
    m_stopped = true;
    return true;
  }

  //! Submits the wait for `h`, to be resumed on the current executor with the current
  //! priority (inline on the reactor's thread when there is none). Returns false when the
  //! work had already finished, or stop was requested on `token` meanwhile: do not
  //! suspend. A stop request on `token` while suspended ends the wait and resumes the
  //! coroutine on its executor (see `completion_reactor::request_stop` for who resumes it
  //! and where); `stopped()` then says so. `token` is only read here (the callback keeps
  //! its state).
  bool suspend(completion_reactor& r, std::coroutine_handle<> h,
               const std::stop_token& token = {}) noexcept {
    m_node.handle = h;
    m_node.exec = current_executor();
    m_node.prio = current_priority();
    m_node.home = tl_execution.worker;
    m_counter = tl_execution.waits;
    if (m_counter != nullptr) {
      m_counter->fetch_add(1, std::memory_order_relaxed); // before submit: may resume at once
    }
    m_reactor = &r;
    const bool cancellable = token.stop_possible();
    if (cancellable) {
      m_arrival.store(false, std::memory_order_relaxed);
      m_node.arrival = &m_arrival;
      m_node.claim = stop_claim::open; // published to the reactor by submit's lock
    }
    if (r.trace().on_suspend != nullptr) {
      r.trace().on_suspend(r.trace().context, m_node);
    }
    m_submitted = true; // before submit: the coroutine may run (and finish) before it returns
    if (!r.submit(m_node)) {
      m_submitted = false;
      uncount();
      // Finished before it could suspend: close what on_suspend opened (resolved_ns == 0
      // tells the hook that the coroutine never suspended).
      if (r.trace().on_resume != nullptr) {
        r.trace().on_resume(r.trace().context, m_node);
      }
      return false;
    }
    if (!cancellable) {
      return true; // the reactor may already be resuming us: touch nothing
    }
    (void)m_stop.emplace(token, on_stop{this}); // may run on_stop_requested() inline
    return !m_arrival.exchange(true, std::memory_order_acq_rel);
  }

  //! Call from `await_resume`: the wait's outcome (records the resume latency). A wait
  //! ended by a stop request reports `completion_state::cancelled` and `stopped()`.
  completion_status finish() noexcept {
    m_stop.reset(); // waits for a stop callback that lost the race on another thread
    if (m_submitted) {
      m_submitted = false;
      uncount();
      m_reactor->on_resumed(m_node);
    }
    if (m_node.status.state == completion_state::cancelled &&
        m_node.status.error == stopped_by_request) {
      m_stopped = true; // a stop request: its own (request_stop) or for all (stop_all)
    }
    return m_node.status;
  }

  //! True when a stop request ended the wait (read after `finish`).
  [[nodiscard]] bool stopped() const noexcept { return m_stopped; }

private:
  struct on_stop {
    reactor_wait* self;
    void operator()() const noexcept { self->on_stop_requested(); }
  };

  // O(1), no lock: the reactor ends the wait (status `stopped_by_request`, which `finish`
  // reports as stopped) and meets await_suspend through the arrival flag.
  void on_stop_requested() noexcept { m_reactor->request_stop(m_node); }

  void uncount() noexcept {
    if (m_counter != nullptr) {
      m_counter->fetch_sub(1, std::memory_order_relaxed);
      m_counter = nullptr;
    }
  }

  wait_node m_node{};
  completion_reactor* m_reactor = nullptr;
  std::atomic<std::ptrdiff_t>* m_counter = nullptr; //!< the suspending executor's wait count
  bool m_submitted = false;
  bool m_stopped = false;
  std::atomic<bool> m_arrival{true};
  std::optional<std::stop_callback<on_stop>> m_stop;
};

} // namespace cuawait::detail
