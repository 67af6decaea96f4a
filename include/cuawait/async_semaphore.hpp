// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `async_semaphore`: a counting semaphore for coroutines (bound the work in flight, e.g.
//! bytes of GPU memory or jobs per stream), and `async_semaphore_permit`, its RAII permit.

#include "cuawait/cancellation.hpp"
#include "cuawait/detail/sync_awaiter.hpp"
#include "cuawait/detail/sync_waiter.hpp"

#include <cassert>
#include <cstddef>
#include <mutex>
#include <stdexcept>
#include <stop_token>
#include <utility>

namespace cuawait {

class async_semaphore;

//! Move-only ownership of permits of an `async_semaphore` (one, or the `n` of an
//! `acquire_permit(n)`); returns them all on destruction. The semaphore must outlive it.
class [[nodiscard]] async_semaphore_permit {
public:
  //! Takes over one permit the caller already acquired.
  async_semaphore_permit(async_semaphore& s, std::adopt_lock_t) noexcept : m_semaphore(&s) {}
  //! Takes over `count` permits the caller already acquired.
  async_semaphore_permit(async_semaphore& s, std::ptrdiff_t count, std::adopt_lock_t) noexcept
      : m_semaphore(&s), m_count(count) {}
  async_semaphore_permit(async_semaphore_permit&& other) noexcept
      : m_semaphore(std::exchange(other.m_semaphore, nullptr)),
        m_count(std::exchange(other.m_count, 0)) {}
  async_semaphore_permit& operator=(async_semaphore_permit&& other) noexcept {
    if (this != &other) {
      release();
      m_semaphore = std::exchange(other.m_semaphore, nullptr);
      m_count = std::exchange(other.m_count, 0);
    }
    return *this;
  }
  async_semaphore_permit(const async_semaphore_permit&) = delete;
  async_semaphore_permit& operator=(const async_semaphore_permit&) = delete;
  ~async_semaphore_permit() { release(); }

  //! Returns the permits now; does nothing if they were already returned or moved from.
  void release() noexcept;
  //! True while the permits are held.
  [[nodiscard]] explicit operator bool() const noexcept { return m_semaphore != nullptr; }
  //! How many permits this guard holds (0 once released or moved from).
  [[nodiscard]] std::ptrdiff_t count() const noexcept {
    return m_semaphore != nullptr ? m_count : 0;
  }

private:
  async_semaphore* m_semaphore;
  std::ptrdiff_t m_count = 1;
};

//! A counting semaphore. `co_await s.acquire()` takes one permit, suspending while none is
//! available; `co_await s.acquire(n)` takes `n` at once (bytes of a memory budget, say);
//! `release(k)` returns `k`. Waiters are served strictly in FIFO order, and `release` hands
//! permits straight to them: a large request at the head of the queue is not starved by
//! smaller ones behind it (they wait their turn even when enough permits for them are
//! free), and `try_acquire()` never overtakes a queued waiter. A request for more permits
//! than will ever be released waits until cancelled. Each acquire and release costs O(1)
//! in the count, plus O(1) per waiter it serves.
//!
//! Resumption: a waiter resumes on the thread that called `release()`, inside that call,
//! unless that thread is already resuming a waiter of a cuawait primitive further up its
//! stack; then it resumes on the same thread as soon as the running waiter suspends or
//! finishes. One that got a permit without suspending continues on its own thread. A
//! cancelled waiter resumes on the thread that requested stop (inside `request_stop()`, or
//! deferred the same way when that thread is already resuming a waiter).
//!
//! Cancellation: `acquire(token)` / `acquire_permit(token)` throw `operation_cancelled`
//! when stop is requested before a permit is handed over; no permit is then consumed.
//!
//! Thread-safe. The semaphore must outlive every waiter and every permit.
class async_semaphore {
public:
  //! Awaiter of `acquire()`: completes holding one permit.
  class [[nodiscard]] acquire_awaiter : public detail::sync_awaiter<acquire_awaiter> {
  public:
    acquire_awaiter(async_semaphore& s, std::stop_token token, std::ptrdiff_t count = 1) noexcept
        : sync_awaiter(std::move(token)), m_semaphore(s), m_count(count) {}
    //! @throws operation_cancelled if stop was requested first.
    void await_resume() { finish("cuawait::async_semaphore::acquire cancelled"); }

  private:
    friend class detail::sync_awaiter<acquire_awaiter>;
    friend class async_semaphore;
    bool try_complete_or_enqueue() noexcept;
    std::mutex& sync_mutex() noexcept { return m_semaphore.m_mutex; }
    detail::waiter_queue& sync_queue() noexcept { return m_semaphore.m_waiters; }
    // A withdrawn head may have held back waiters that fit now.
    void on_withdrawn_locked(detail::wake_list& woken) noexcept { m_semaphore.grant_locked(woken); }

  protected:
    async_semaphore& m_semaphore;
    std::ptrdiff_t m_count;
  };

  //! Awaiter of `acquire_permit()`: completes with an `async_semaphore_permit`.
  class [[nodiscard]] permit_awaiter : public acquire_awaiter {
  public:
    using acquire_awaiter::acquire_awaiter;
    //! @throws operation_cancelled if stop was requested first.
    async_semaphore_permit await_resume() {
      acquire_awaiter::await_resume();
      return async_semaphore_permit{m_semaphore, m_count, std::adopt_lock};
    }
  };

  //! A semaphore holding `initial` permits.
  //! @throws std::invalid_argument if `initial` is negative.
  explicit async_semaphore(std::ptrdiff_t initial) : m_available(initial) {
    if (initial < 0) {
      throw std::invalid_argument("cuawait::async_semaphore: negative initial count");
    }
  }
  async_semaphore(const async_semaphore&) = delete;
  async_semaphore& operator=(const async_semaphore&) = delete;
  ~async_semaphore() { assert(m_waiters.empty() && "async_semaphore destroyed with waiters"); }

  //! Takes a permit if one is available and nobody is queued; never suspends.
  [[nodiscard]] bool try_acquire() noexcept { return try_take(1); }
  //! Takes `n` permits if that many are available and nobody is queued; never suspends.
  //! @throws std::invalid_argument if `n` is negative.
  [[nodiscard]] bool try_acquire(std::ptrdiff_t n) { return try_take(checked(n)); }

  //! `co_await acquire()` takes one permit, suspending until one is available.
  acquire_awaiter acquire() noexcept { return acquire_awaiter{*this, {}}; }
  //! As `acquire()`, cancellable through `token`.
  acquire_awaiter acquire(std::stop_token token) noexcept {
    return acquire_awaiter{*this, std::move(token)};
  }
  //! `co_await acquire(n)` takes `n` permits at once (all or none; 0 completes at once).
  //! @throws std::invalid_argument (from this call) if `n` is negative.
  acquire_awaiter acquire(std::ptrdiff_t n) { return acquire_awaiter{*this, {}, checked(n)}; }
  //! As `acquire(n)`, cancellable through `token`: a cancelled request takes no permit.
  acquire_awaiter acquire(std::ptrdiff_t n, std::stop_token token) {
    return acquire_awaiter{*this, std::move(token), checked(n)};
  }
  //! `co_await acquire_permit()` takes one permit and yields a guard that returns it.
  permit_awaiter acquire_permit() noexcept { return permit_awaiter{*this, {}}; }
  //! As `acquire_permit()`, cancellable through `token`.
  permit_awaiter acquire_permit(std::stop_token token) noexcept {
    return permit_awaiter{*this, std::move(token)};
  }
  //! `co_await acquire_permit(n)`: `n` permits in one guard that returns them all.
  //! @throws std::invalid_argument (from this call) if `n` is negative.
  permit_awaiter acquire_permit(std::ptrdiff_t n) { return permit_awaiter{*this, {}, checked(n)}; }
  //! As `acquire_permit(n)`, cancellable through `token`.
  permit_awaiter acquire_permit(std::ptrdiff_t n, std::stop_token token) {
    return permit_awaiter{*this, std::move(token), checked(n)};
  }

  //! Returns `k` permits: the oldest waiters get them first, the rest become available.
  //! @throws std::invalid_argument if `k` is negative (nothing is released).
  void release(std::ptrdiff_t k = 1) {
    if (k < 0) {
      throw std::invalid_argument("cuawait::async_semaphore::release: negative count");
    }
    detail::wake_list woken;
    {
      const std::lock_guard lock(m_mutex);
      m_available += k;
      grant_locked(woken);
    }
    woken.wake_all();
  }

  //! Permits available now (a snapshot: other threads may change it at once).
  [[nodiscard]] std::ptrdiff_t available() const noexcept {
    const std::lock_guard lock(m_mutex);
    return m_available;
  }

private:
  static std::ptrdiff_t checked(std::ptrdiff_t n) {
    if (n < 0) {
      throw std::invalid_argument("cuawait::async_semaphore::acquire: negative count");
    }
    return n;
  }

  bool try_take(std::ptrdiff_t n) noexcept {
    const std::lock_guard lock(m_mutex);
    if (!m_waiters.empty() || m_available < n) {
      return false;
    }
    m_available -= n;
    return true;
  }

  // Serves the queue from its head while the head's request fits.
  void grant_locked(detail::wake_list& woken) noexcept {
    while (!m_waiters.empty()) {
      auto& head = static_cast<acquire_awaiter&>(m_waiters.front());
      if (head.m_count > m_available) {
        return;
      }
      m_available -= head.m_count;
      m_waiters.pop_front();
      head.m_status = detail::wait_status::granted;
      woken.push(head);
    }
  }

  mutable std::mutex m_mutex;
  std::ptrdiff_t m_available;
  detail::waiter_queue m_waiters; // of acquire_awaiter only
};

inline bool async_semaphore::acquire_awaiter::try_complete_or_enqueue() noexcept {
  const std::lock_guard lock(m_semaphore.m_mutex);
  if (m_semaphore.m_waiters.empty() && m_semaphore.m_available >= m_count) {
    m_semaphore.m_available -= m_count;
    m_status = detail::wait_status::granted;
    return true;
  }
  m_semaphore.m_waiters.push_back(*this);
  return false;
}

inline void async_semaphore_permit::release() noexcept {
  if (m_semaphore != nullptr) {
    std::exchange(m_semaphore, nullptr)->release(std::exchange(m_count, 0));
  }
}

} // namespace cuawait
