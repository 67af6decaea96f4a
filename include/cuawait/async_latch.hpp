// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `async_latch`: a single-use countdown that coroutines await (e.g. "all N GPU jobs of
//! this batch are done").

#include "cuawait/cancellation.hpp"
#include "cuawait/detail/sync_awaiter.hpp"
#include "cuawait/detail/sync_waiter.hpp"

#include <atomic>
#include <cassert>
#include <cstddef>
#include <mutex>
#include <stdexcept>
#include <stop_token>
#include <utility>

namespace cuawait {

//! A latch counting down from `n`. `co_await latch` (or `co_await latch.wait()`) completes
//! once `count_down` has brought the count to zero; then it stays open for good.
//!
//! Resumption: waiters resume on the thread whose `count_down` reached zero, inside that
//! call, in the order they started waiting, unless that thread is already resuming a
//! waiter of a cuawait primitive further up its stack; then they resume on the same thread
//! as soon as the running waiter suspends or finishes. A waiter that found the latch open
//! continues on its own thread. A cancelled waiter resumes on the thread that requested stop
//! (inside `request_stop()`, or deferred the same way when that thread is already resuming a
//! waiter).
//!
//! Cancellation: `wait(token)` throws `operation_cancelled` when stop is requested before
//! the count reaches zero. A cancelled wait does not count down.
//!
//! Thread-safe. The latch must outlive every waiter.
class async_latch {
public:
  //! Awaiter of `wait()`.
  class [[nodiscard]] wait_awaiter : public detail::sync_awaiter<wait_awaiter> {
  public:
    wait_awaiter(async_latch& l, std::stop_token token) noexcept
        : sync_awaiter(std::move(token)), m_latch(l) {}
    //! Lock-free fast path: already open and not cancelled.
    [[nodiscard]] bool await_ready() const noexcept {
      return !stop_requested() && m_latch.try_wait();
    }
    //! @throws operation_cancelled if stop was requested first.
    void await_resume() { finish("cuawait::async_latch::wait cancelled"); }

  private:
    friend class detail::sync_awaiter<wait_awaiter>;
    bool try_complete_or_enqueue() noexcept {
      const std::lock_guard lock(m_latch.m_mutex);
      if (m_latch.m_count.load(std::memory_order_relaxed) == 0) {
        m_status = detail::wait_status::granted;
        return true;
      }
      m_latch.m_waiters.push_back(*this);
      return false;
    }
    std::mutex& sync_mutex() noexcept { return m_latch.m_mutex; }
    detail::waiter_queue& sync_queue() noexcept { return m_latch.m_waiters; }

    async_latch& m_latch;
  };

  //! A latch that opens after `n` count-downs (`n == 0`: open from the start).
  //! @throws std::invalid_argument if `n` is negative.
  explicit async_latch(std::ptrdiff_t n) : m_count(n) {
    if (n < 0) {
      throw std::invalid_argument("cuawait::async_latch: negative count");
    }
  }
  async_latch(const async_latch&) = delete;
  async_latch& operator=(const async_latch&) = delete;
  ~async_latch() { assert(m_waiters.empty() && "async_latch destroyed with waiters"); }

  //! Decrements the count by `k`; the call that reaches zero resumes every waiter.
  //! @throws std::invalid_argument if `k` is negative, std::logic_error if `k` exceeds the
  //! remaining count (in both cases the count is unchanged).
  void count_down(std::ptrdiff_t k = 1) {
    if (k < 0) {
      throw std::invalid_argument("cuawait::async_latch::count_down: negative count");
    }
    detail::wake_list woken;
    {
      const std::lock_guard lock(m_mutex);
      const std::ptrdiff_t count = m_count.load(std::memory_order_relaxed);
      if (k > count) {
        throw std::logic_error("cuawait::async_latch::count_down: below zero");
      }
      m_count.store(count - k, std::memory_order_release);
      if (count - k != 0) {
        return;
      }
      woken.take_all(m_waiters, detail::wait_status::granted);
    }
    woken.wake_all();
  }

  //! `co_await latch.wait()`: completes once the count is zero.
  wait_awaiter wait() noexcept { return wait_awaiter{*this, {}}; }
  //! As `wait()`, cancellable through `token`.
  wait_awaiter wait(std::stop_token token) noexcept {
    return wait_awaiter{*this, std::move(token)};
  }
  //! `co_await latch` is `co_await latch.wait()`.
  wait_awaiter operator co_await() noexcept { return wait(); }

  //! Whether the count has reached zero. Writes made before the last `count_down` are
  //! visible after this returns true.
  [[nodiscard]] bool try_wait() const noexcept {
    return m_count.load(std::memory_order_acquire) == 0;
  }

private:
  std::mutex m_mutex;
  std::atomic<std::ptrdiff_t> m_count;
  detail::waiter_queue m_waiters;
};

} // namespace cuawait
