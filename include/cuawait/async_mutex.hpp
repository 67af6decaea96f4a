// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `async_mutex`: a mutual-exclusion lock that suspends the awaiting coroutine instead of
//! blocking its thread, with FIFO hand-over, and `async_mutex_lock`, its RAII guard.

#include "cuawait/cancellation.hpp"
#include "cuawait/detail/sync_awaiter.hpp"
#include "cuawait/detail/sync_waiter.hpp"

#include <cassert>
#include <mutex>
#include <stop_token>
#include <utility>

namespace cuawait {

class async_mutex;

//! Move-only ownership of a locked `async_mutex`; unlocks it on destruction.
//! The mutex must outlive the guard.
class [[nodiscard]] async_mutex_lock {
public:
  //! Takes over a lock the caller already holds.
  async_mutex_lock(async_mutex& m, std::adopt_lock_t) noexcept : m_mutex(&m) {}
  async_mutex_lock(async_mutex_lock&& other) noexcept
      : m_mutex(std::exchange(other.m_mutex, nullptr)) {}
  async_mutex_lock& operator=(async_mutex_lock&& other) noexcept {
    if (this != &other) {
      unlock();
      m_mutex = std::exchange(other.m_mutex, nullptr);
    }
    return *this;
  }
  async_mutex_lock(const async_mutex_lock&) = delete;
  async_mutex_lock& operator=(const async_mutex_lock&) = delete;
  ~async_mutex_lock() { unlock(); }

  //! Unlocks now (the next waiter resumes as described at `async_mutex::unlock`).
  //! Does nothing if the guard no longer owns the lock.
  void unlock() noexcept;
  //! True while the guard owns the lock.
  [[nodiscard]] bool owns_lock() const noexcept { return m_mutex != nullptr; }
  //! The guarded mutex, or nullptr after `unlock()` or a move.
  [[nodiscard]] async_mutex* mutex() const noexcept { return m_mutex; }

private:
  async_mutex* m_mutex;
};

//! A mutex for coroutines. `co_await m.lock()` suspends while another holder has it;
//! waiters get the lock in the order they started waiting (FIFO), and `unlock()` hands it
//! straight to the oldest waiter, so a stream of new `try_lock()` or `lock()` calls can
//! never starve a queued one.
//!
//! Resumption: a waiter resumes on the thread that called `unlock()`, inside that call,
//! unless that thread is already resuming a waiter of a cuawait primitive further up its
//! stack; then it resumes on the same thread as soon as the running waiter suspends or
//! finishes (this bounds stack depth under contention). A waiter that got the lock without
//! suspending continues on its own thread. A cancelled waiter resumes on the thread that
//! requested stop (inside `request_stop()`, or
//! deferred the same way when that thread is already resuming a waiter).
//!
//! Cancellation: `lock(token)` / `scoped_lock(token)` throw `operation_cancelled` from the
//! `co_await` when stop is requested before the lock is handed over; the lock is then not
//! held. If the hand-over wins the race the await succeeds and the caller owns the lock.
//!
//! Thread-safe. Not recursive. The mutex must outlive every waiter and be unlocked when
//! destroyed.
class async_mutex {
public:
  //! Awaiter of `lock()`: completes holding the lock.
  class [[nodiscard]] lock_awaiter : public detail::sync_awaiter<lock_awaiter> {
  public:
    lock_awaiter(async_mutex& m, std::stop_token token) noexcept
        : sync_awaiter(std::move(token)), m_mutex(m) {}
    //! @throws operation_cancelled if stop was requested first.
    void await_resume() { finish("cuawait::async_mutex::lock cancelled"); }

  private:
    friend class detail::sync_awaiter<lock_awaiter>;
    bool try_complete_or_enqueue() noexcept;
    std::mutex& sync_mutex() noexcept { return m_mutex.m_mutex; }
    detail::waiter_queue& sync_queue() noexcept { return m_mutex.m_waiters; }

  protected:
    async_mutex& m_mutex;
  };

  //! Awaiter of `scoped_lock()`: completes with an `async_mutex_lock` guard.
  class [[nodiscard]] scoped_lock_awaiter : public lock_awaiter {
  public:
    using lock_awaiter::lock_awaiter;
    //! @throws operation_cancelled if stop was requested first.
    async_mutex_lock await_resume() {
      lock_awaiter::await_resume();
      return async_mutex_lock{m_mutex, std::adopt_lock};
    }
  };

  async_mutex() noexcept = default;
  async_mutex(const async_mutex&) = delete;
  async_mutex& operator=(const async_mutex&) = delete;
  ~async_mutex() { assert(m_waiters.empty() && "async_mutex destroyed with waiters"); }

  //! Takes the lock if it is free. Never suspends; fails while anyone holds it.
  [[nodiscard]] bool try_lock() noexcept {
    const std::lock_guard lock(m_mutex);
    return !std::exchange(m_locked, true);
  }

  //! `co_await lock()` takes the lock, suspending while it is held. Pair with `unlock()`.
  lock_awaiter lock() noexcept { return lock_awaiter{*this, {}}; }
  //! As `lock()`, cancellable through `token`.
  lock_awaiter lock(std::stop_token token) noexcept {
    return lock_awaiter{*this, std::move(token)};
  }

  //! `co_await scoped_lock()` takes the lock and yields a guard that releases it.
  scoped_lock_awaiter scoped_lock() noexcept { return scoped_lock_awaiter{*this, {}}; }
  //! As `scoped_lock()`, cancellable through `token`.
  scoped_lock_awaiter scoped_lock(std::stop_token token) noexcept {
    return scoped_lock_awaiter{*this, std::move(token)};
  }

  //! Releases the lock, handing it to the oldest waiter if there is one (see the class
  //! comment for where it resumes). The caller must hold the lock.
  void unlock() noexcept {
    detail::wake_list woken;
    {
      const std::lock_guard lock(m_mutex);
      assert(m_locked && "async_mutex::unlock without the lock");
      if (m_waiters.empty()) {
        m_locked = false;
        return;
      }
      detail::sync_waiter& next = m_waiters.pop_front();
      next.m_status = detail::wait_status::granted; // m_locked stays true: handed over
      woken.push(next);
    }
    woken.wake_all();
  }

private:
  std::mutex m_mutex;
  bool m_locked = false;
  detail::waiter_queue m_waiters;
};

inline bool async_mutex::lock_awaiter::try_complete_or_enqueue() noexcept {
  const std::lock_guard lock(m_mutex.m_mutex);
  if (!m_mutex.m_locked) {
    m_mutex.m_locked = true;
    m_status = detail::wait_status::granted;
    return true;
  }
  m_mutex.m_waiters.push_back(*this);
  return false;
}

inline void async_mutex_lock::unlock() noexcept {
  if (m_mutex != nullptr) {
    std::exchange(m_mutex, nullptr)->unlock();
  }
}

} // namespace cuawait
