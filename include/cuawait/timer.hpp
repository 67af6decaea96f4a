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
//!
//! Where sleeps are kept: `sleep_for` and `sleep_until` use the timer service of the
//! executor the caller runs on (`executor::timers()`; a `runtime`'s pool and run loop have
//! one that their idle threads poll, with no thread of its own), or else the process-wide
//! service, which has a thread (so `sync_wait(sleep_for(d))` works on any thread).

#include "cuawait/cancellation.hpp"
#include "cuawait/detail/sync_waiter.hpp"
#include "cuawait/executor.hpp"
#include "cuawait/idle_source.hpp"

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
  //! The rule of GPU waits: `post_near` the worker it suspended on, or, with no executor,
  //! inline on the thread that completed it.
  void arrive_and_resume() noexcept;

  timer_service* m_service;
  clock::time_point m_deadline;
  std::stop_token m_token;
  std::optional<std::stop_callback<on_stop>> m_stop;
  executor* m_executor = nullptr;
  priority m_priority = priority::normal;
  std::uint32_t m_home = ~std::uint32_t{0}; //!< the worker it suspended on (`post_near`)
  std::uint64_t m_seq = 0;
};

//! Completes sleeps at their deadlines, in one of two ways:
//!
//! - **threaded** (`timer_service{}`): a thread of its own waits for the earliest deadline.
//!   Resolution: the operating system's timed wait, typically within 50-100 µs of the
//!   deadline (never before it).
//! - **polled** (`timer_service{timer_service::polled}`): no thread. It is an `idle_source`:
//!   the idle threads of the executors that poll it (`thread_pool::set_idle_source`,
//!   `run_loop::set_idle_source`, alone or in an `idle_source_set`) find the sleeps that are
//!   due, spin the last microseconds before a deadline (`spin_window`), and otherwise park
//!   until the earliest one. A sleep that becomes the earliest wakes a parked poller through
//!   the waker its owner installs (`set_idle_waker`). A `runtime` owns one, polled by its pool
//!   and run loop, and names it as their `timers()`. Its sleeps are late while every polling
//!   thread is busy running coroutines (as GPU completions are): it serves executors whose
//!   threads go idle. Typical resolution: a few microseconds when a worker is idle.
//!
//! Either way a sleep resumes on the executor its coroutine suspended on (with its
//! priority), or, when it has none (a plain thread awaited), on the thread that completed
//! it (the timer thread, or the polling thread).
//!
//! Thread-safe. Destroying the service (or `close()`) completes every pending sleep with
//! `operation_cancelled` (nothing hangs); the coroutines must still exist then. The
//! executors sleepers resume on must outlive the service (a resumption may still be inside
//! `post()` when the coroutine already runs on a worker): create the service after them,
//! or `close()` it before they stop. A polled service must outlive its use as an idle
//! source. Do not destroy a service from a coroutine it resumes inline.
class timer_service final : public idle_source {
public:
  using clock = std::chrono::steady_clock;

  //! Tag of the polled kind: `timer_service{timer_service::polled}`.
  struct polled_t {
    explicit polled_t() = default;
  };
  static constexpr polled_t polled{};

  //! How close to the earliest deadline a polled service asks idle threads to spin
  //! (`idle_keep_spinning`) instead of parking; a parked poller wakes this much early
  //! (`idle_park_period`), since a timed park typically ends 50-60 us late.
  static constexpr std::chrono::microseconds spin_window{60};

  //! A threaded service: starts its thread.
  //! @throws std::system_error when the thread cannot be started.
  timer_service();
  //! A polled service: no thread; poll it as an `idle_source`.
  explicit timer_service(polled_t) noexcept;
  timer_service(const timer_service&) = delete;
  timer_service& operator=(const timer_service&) = delete;
  ~timer_service();

  //! Completes every pending sleep with `operation_cancelled`, and every sleep awaited
  //! afterwards at once the same way. Idempotent; thread-safe.
  void close() noexcept;

  //! True for a polled service.
  [[nodiscard]] bool is_polled() const noexcept { return m_polled; }

  //! The service `cuawait::sleep_for` uses on the calling thread: its executor's
  //! (`executor::timers()`), else `global()`.
  [[nodiscard]] static timer_service& current() noexcept;

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

  // --- idle_source (a polled service; a threaded one has nothing to poll) ---

  //! Resumes the sleeps that are due, in deadline order; one poller at a time (the others
  //! return 0 at once). Returns how many it resumed.
  std::size_t poll_idle() noexcept override;
  //! True while the earliest deadline is at most `spin_window` away.
  [[nodiscard]] bool idle_keep_spinning() const noexcept override;
  //! True while a sleep is pending.
  [[nodiscard]] bool idle_pending() const noexcept override {
    return m_polled && m_earliest_ns.load(std::memory_order_acquire) != no_deadline;
  }
  //! True when the earliest deadline has passed.
  [[nodiscard]] bool idle_due() const noexcept override;
  //! One spinner, and only near a deadline.
  [[nodiscard]] std::size_t idle_spinners_wanted() const noexcept override {
    return idle_keep_spinning() ? 1 : 0;
  }
  //! The time left until `spin_window` before the earliest deadline (zero when that has
  //! passed; one second when nothing is pending).
  [[nodiscard]] std::chrono::nanoseconds idle_park_period() const noexcept override;
  //! `fn(context)` is called (with the service's lock held) when a sleep becomes the
  //! earliest, so that a parked poller parks again for the shorter time. It must wake the
  //! poller parked with a timeout even while other threads spin (for a pool:
  //! `thread_pool::wake_parked_poller`). nullptr: none.
  void set_idle_waker(void (*fn)(void*) noexcept, void* context) noexcept override;

private:
  friend class sleep_awaiter;
  static constexpr std::int64_t no_deadline = INT64_MAX;
  void run();
  //! With m_mutex held, after m_sleeps changed.
  void publish_earliest_locked() noexcept;
  //! With m_mutex held and a sleep pending: removes the earliest, gives it `status`.
  sleep_awaiter* take_first_locked(detail::wait_status status) noexcept;
  //! With m_mutex held: a sleep was inserted as the earliest.
  void on_new_earliest_locked() noexcept;

  mutable std::mutex m_mutex;
  std::condition_variable m_cv;
  std::set<sleep_awaiter*, sleep_awaiter::earlier> m_sleeps;
  std::uint64_t m_next_seq = 0;
  bool m_closed = false;
  bool m_polled = false;
  //! The earliest deadline (clock ticks since its epoch), or `no_deadline`: what idle
  //! pollers read without the lock.
  std::atomic<std::int64_t> m_earliest_ns{no_deadline};
  std::atomic<bool> m_polling{false};
  void (*m_waker)(void*) noexcept = nullptr; //!< guarded by m_mutex
  void* m_waker_context = nullptr;           //!< guarded by m_mutex
  std::thread m_thread;                      // last: started once the members above exist
};

//! `co_await cuawait::sleep_for(d)` on the calling executor's timer service, else the
//! global one (`timer_service::current()`).
template <class Rep, class Period>
[[nodiscard]] sleep_awaiter sleep_for(std::chrono::duration<Rep, Period> d,
                                      std::stop_token token = {}) noexcept {
  return timer_service::current().sleep_for(d, std::move(token));
}

//! `co_await cuawait::sleep_until(t)` on the calling executor's timer service, else the
//! global one (`timer_service::current()`).
[[nodiscard]] inline sleep_awaiter sleep_until(std::chrono::steady_clock::time_point t,
                                               std::stop_token token = {}) noexcept {
  return timer_service::current().sleep_until(t, std::move(token));
}

} // namespace cuawait
