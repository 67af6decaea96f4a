// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Timers: `co_await cuawait::sleep_for(d)` suspends a coroutine (never a thread) for at
//! least `d`; with `when_any` it bounds how long anything may take:
//!
//! ```cpp
//! auto r = co_await cuawait::when_any(fetch(), cuawait::sleep_for(100ms));
//! if (r.index == 1) { /* timed out: fetch() was asked to stop and has finished */ }
//! ```
//!
//! A sleep is cancellable through a stop token: the one passed to it, otherwise the token
//! of the coroutine awaiting it (a `cuawait::task`'s, or the token `when_any` gives each
//! child), so the losing sleep of a `when_any` ends at once instead of running out. A
//! cancelled sleep throws `operation_cancelled`.

#include "cuawait/cancellation.hpp"
#include "cuawait/detail/sync_waiter.hpp"
#include "cuawait/executor.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <set>
#include <stop_token>
#include <thread>

namespace cuawait {

class timer_service;

//! Awaiter of `sleep_for` / `sleep_until`. Completes at its deadline, or throws
//! `operation_cancelled` when stop is requested first or its `timer_service` is destroyed.
class [[nodiscard]] sleep_awaiter : private detail::sync_waiter {
public:
  using clock = std::chrono::steady_clock;

  sleep_awaiter(timer_service& service, clock::time_point deadline, std::stop_token token) noexcept
      : m_service(&service), m_deadline(deadline), m_token(std::move(token)) {}
  //! Movable until awaited (so that `when_any` and `when_all` can hold it).
  sleep_awaiter(sleep_awaiter&& other) noexcept
      : m_service(other.m_service), m_deadline(other.m_deadline),
        m_token(std::move(other.m_token)) {}
  sleep_awaiter(const sleep_awaiter&) = delete;
  sleep_awaiter& operator=(const sleep_awaiter&) = delete;
  sleep_awaiter& operator=(sleep_awaiter&&) = delete;

  [[nodiscard]] bool await_ready() const noexcept { return false; }

  template <class Promise>
  bool await_suspend(std::coroutine_handle<Promise> h) {
    if (!m_token.stop_possible()) {
      if constexpr (requires { h.promise().get_stop_token(); }) {
        m_token = h.promise().get_stop_token();
      }
    }
    return suspend(h);
  }

  //! @throws operation_cancelled if stop was requested before the deadline, or the timer
  //!         service was destroyed first.
  void await_resume();

private:
  friend class timer_service;
  struct on_stop {
    sleep_awaiter* self;
    void operator()() const noexcept { self->cancel(); }
  };
  struct earlier {
    bool operator()(const sleep_awaiter* a, const sleep_awaiter* b) const noexcept {
      return a->m_deadline != b->m_deadline ? a->m_deadline < b->m_deadline : a->m_seq < b->m_seq;
    }
  };

  bool suspend(std::coroutine_handle<> h);
  void cancel() noexcept;
  //! The timer's side of the arrival handshake (status already set): resumes the
  //! coroutine on its executor, or inline, unless `await_suspend` has not returned yet.
  void arrive_and_resume() noexcept;

  timer_service* m_service;
  clock::time_point m_deadline;
  std::stop_token m_token;
  std::optional<std::stop_callback<on_stop>> m_stop;
  executor* m_executor = nullptr;
  priority m_priority = priority::normal;
  std::uint64_t m_seq = 0;
};

//! One thread that completes sleeps at their deadlines. A sleep resumes on the executor its
//! coroutine suspended on (with its priority), or, when it has none (a plain thread awaited),
//! on the timer thread. Resolution: the operating system's timed wait, typically within
//! 50-100 µs of the deadline (never before it).
//!
//! Thread-safe. Destroying the service completes every pending sleep with
//! `operation_cancelled` (nothing hangs); the coroutines must still exist then. The
//! executors sleepers resume on must outlive the service (a resumption may still be inside
//! `post()` when the coroutine already runs on a worker): create the service after them.
//! Do not destroy a service from a coroutine it resumes inline.
class timer_service {
public:
  using clock = std::chrono::steady_clock;

  timer_service();
  timer_service(const timer_service&) = delete;
  timer_service& operator=(const timer_service&) = delete;
  ~timer_service();

  //! The process-wide service `cuawait::sleep_for` uses (never destroyed).
  [[nodiscard]] static timer_service& global();

  //! `co_await sleep_until(t)`: resumes at `t` or later; at once if `t` has passed.
  sleep_awaiter sleep_until(clock::time_point t, std::stop_token token = {}) noexcept {
    return sleep_awaiter{*this, t, std::move(token)};
  }
  //! `co_await sleep_for(d)`: resumes after at least `d`.
  template <class Rep, class Period>
  sleep_awaiter sleep_for(std::chrono::duration<Rep, Period> d,
                          std::stop_token token = {}) noexcept {
    return sleep_until(clock::now() + std::chrono::ceil<clock::duration>(d), std::move(token));
  }

  //! Sleeps pending now (a snapshot).
  [[nodiscard]] std::size_t pending() const;

private:
  friend class sleep_awaiter;
  void run();

  mutable std::mutex m_mutex;
  std::condition_variable m_cv;
  std::set<sleep_awaiter*, sleep_awaiter::earlier> m_sleeps;
  std::uint64_t m_next_seq = 0;
  bool m_closed = false;
  std::thread m_thread; // last: started once the members above exist
};

//! `co_await cuawait::sleep_for(d)` on the global timer service.
template <class Rep, class Period>
[[nodiscard]] sleep_awaiter sleep_for(std::chrono::duration<Rep, Period> d,
                                      std::stop_token token = {}) noexcept {
  return timer_service::global().sleep_for(d, std::move(token));
}

//! `co_await cuawait::sleep_until(t)` on the global timer service.
[[nodiscard]] inline sleep_awaiter sleep_until(std::chrono::steady_clock::time_point t,
                                               std::stop_token token = {}) noexcept {
  return timer_service::global().sleep_until(t, std::move(token));
}

} // namespace cuawait
