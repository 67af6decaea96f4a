// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `async_event`: a manual-reset event that coroutines await.

#include "cuawait/cancellation.hpp"
#include "cuawait/detail/sync_awaiter.hpp"
#include "cuawait/detail/sync_waiter.hpp"

#include <atomic>
#include <cassert>
#include <mutex>
#include <stop_token>
#include <utility>

namespace cuawait {

//! A manual-reset event. `co_await e` (or `co_await e.wait()`) completes at once while the
//! event is set and otherwise suspends until `set()`, which resumes every waiter. The event
//! stays set until `reset()`.
//!
//! Resumption: waiters resume on the thread that called `set()`, inside that call, in the
//! order they started waiting, unless that thread is already resuming a waiter of a
//! cuawait primitive further up its stack; then they resume on the same thread as soon as
//! the running waiter suspends or finishes. A waiter that found the event set continues on
//! its own thread. A cancelled waiter resumes on the thread that requested stop (inside
//! `request_stop()`, or deferred the same way when that thread is already resuming a waiter).
//!
//! Cancellation: `wait(token)` throws `operation_cancelled` when stop is requested before
//! `set()` reaches the waiter.
//!
//! Thread-safe. The event must outlive every waiter.
class async_event {
public:
  //! Awaiter of `wait()`.
  class [[nodiscard]] wait_awaiter : public detail::sync_awaiter<wait_awaiter> {
  public:
    wait_awaiter(async_event& e, std::stop_token token) noexcept
        : sync_awaiter(std::move(token)), m_event(e) {}
    //! Lock-free fast path: already set and not cancelled.
    [[nodiscard]] bool await_ready() const noexcept {
      return !stop_requested() && m_event.is_set();
    }
    //! @throws operation_cancelled if stop was requested first.
    void await_resume() { finish("cuawait::async_event::wait cancelled"); }

  private:
    friend class detail::sync_awaiter<wait_awaiter>;
    bool try_complete_or_enqueue() noexcept {
      const std::lock_guard lock(m_event.m_mutex);
      if (m_event.m_set.load(std::memory_order_relaxed)) {
        m_status = detail::wait_status::granted;
        return true;
      }
      m_event.m_waiters.push_back(*this);
      return false;
    }
    std::mutex& sync_mutex() noexcept { return m_event.m_mutex; }
    detail::waiter_queue& sync_queue() noexcept { return m_event.m_waiters; }

    async_event& m_event;
  };

  //! An event, initially set if `initially_set`.
  explicit async_event(bool initially_set = false) noexcept : m_set(initially_set) {}
  async_event(const async_event&) = delete;
  async_event& operator=(const async_event&) = delete;
  ~async_event() { assert(m_waiters.empty() && "async_event destroyed with waiters"); }

  //! `co_await e.wait()`: completes once the event is set.
  wait_awaiter wait() noexcept { return wait_awaiter{*this, {}}; }
  //! As `wait()`, cancellable through `token`.
  wait_awaiter wait(std::stop_token token) noexcept {
    return wait_awaiter{*this, std::move(token)};
  }
  //! `co_await e` is `co_await e.wait()`.
  wait_awaiter operator co_await() noexcept { return wait(); }

  //! Sets the event and resumes every waiter (see the class comment for where). Writes
  //! made before `set()` are visible to the waiters. Setting a set event does nothing.
  void set() noexcept {
    detail::wake_list woken;
    {
      const std::lock_guard lock(m_mutex);
      m_set.store(true, std::memory_order_release);
      woken.take_all(m_waiters, detail::wait_status::granted);
    }
    woken.wake_all();
  }

  //! Clears the event; later waits suspend until the next `set()`.
  void reset() noexcept {
    const std::lock_guard lock(m_mutex);
    m_set.store(false, std::memory_order_relaxed);
  }

  //! Whether the event is set now (a snapshot).
  [[nodiscard]] bool is_set() const noexcept { return m_set.load(std::memory_order_acquire); }

private:
  std::mutex m_mutex;
  std::atomic<bool> m_set;
  detail::waiter_queue m_waiters;
};

} // namespace cuawait
