// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `run_loop`: a single-threaded executor driven by the thread that calls `run()`.

#include "cuawait/detail/awaitable_traits.hpp"
#include "cuawait/detail/move_or_copy.hpp"
#include "cuawait/detail/pool_queue.hpp"
#include "cuawait/executor.hpp"
#include "cuawait/idle_source.hpp"

#include <atomic>
#include <condition_variable>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <type_traits>
#include <utility>

namespace cuawait {

class run_loop;

namespace detail {
template <class R>
class loop_driver;
} // namespace detail

//! A queue of coroutines resumed by whichever thread drives the loop (`run()`,
//! `run_one()`, `poll()` or `run(awaitable)`), highest priority first, FIFO within a
//! priority. `post()`, `finish()` and `wake()` are thread-safe and may be called from any
//! thread; the driving functions are meant for one thread at a time. An idle driver
//! blocks on a condition variable (no CPU) until a post, `finish()` or `wake()`.
//!
//! Every resumption runs inside an `executor_scope` naming this loop and the priority
//! the coroutine was posted with, so completions captured with `current_executor()` come
//! back to the loop.
//!
//! Lifetime: destroying the loop first runs, on the destroying thread, the work still
//! queued (as `poll()` does), so no posted coroutine is lost. Nothing may post to a loop
//! after its destruction has begun.
class run_loop final : public executor {
public:
  //! Reads `CUAWAIT_BUSY_POLL_US` (see `set_idle_source`); throws `std::invalid_argument`
  //! naming it when its value is not a number.
  run_loop();
  //! Runs what is still queued (see the class comment), then frees the loop.
  ~run_loop();
  run_loop(const run_loop&) = delete;
  run_loop& operator=(const run_loop&) = delete;

  //! Queues `h` with priority `p` and wakes the driver. Never resumes `h` inside the call.
  //! Thread-safe. Terminates if the queue cannot grow (out of memory).
  void post(std::coroutine_handle<> h, priority p) noexcept override;

  //! Awaiter returned by `schedule()`.
  class schedule_awaiter {
  public:
    [[nodiscard]] bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h) const noexcept { m_loop.post(h, m_p); }
    void await_resume() const noexcept {}

  private:
    friend class run_loop;
    schedule_awaiter(run_loop& loop, priority p) noexcept : m_loop(loop), m_p(p) {}
    run_loop& m_loop;
    priority m_p;
  };

  //! `co_await loop.schedule()` moves the coroutine onto the loop with its current priority.
  [[nodiscard]] schedule_awaiter schedule() noexcept { return {*this, current_priority()}; }
  //! `co_await loop.schedule(p)` moves the coroutine onto the loop with priority `p`.
  [[nodiscard]] schedule_awaiter schedule(priority p) noexcept { return {*this, p}; }

  //! Runs posted work, blocking when there is none, until `finish()` is called (before or
  //! during this call; one `finish()` ends one `run()`). Work still queued then stays
  //! queued for the next driving call.
  void run();

  //! Blocks until one coroutine has run (returns true), or returns false when nothing is
  //! queued and `finish()` or `wake()` has been called. A `wake()` that comes before the
  //! call is not lost: it is consumed by the next `run_one()` that finds the queue empty.
  //! A pending `finish()` is not consumed (it is `run()`'s).
  bool run_one();

  //! Runs queued work without blocking until the queue is empty, including work posted
  //! while it runs. Returns the number of resumptions.
  std::size_t poll();

  //! Makes the current (or next) `run()` return. Thread-safe.
  void finish() noexcept;

  //! Wakes a driver blocked in `run_one()` (it returns false; if none is blocked the next
  //! `run_one()` that finds nothing queued returns false at once), without queueing
  //! anything. A completion source that keeps its own state calls it after changing that
  //! state, so a thread driving `run_one()` in a loop can look at it. `run()` ignores it.
  //! Thread-safe.
  void wake() noexcept;

  //! Number of coroutines queued now (a snapshot).
  [[nodiscard]] std::size_t pending() const noexcept;

  //! Work the driver polls when it runs out of queued work (see `idle_source`): while the
  //! source has work pending, `run()` and `run(awaitable)` poll it (spinning while it makes
  //! progress, then in naps of its `idle_park_period()`) instead of sleeping until a post,
  //! so a completion meant for this loop is found and resumed by the loop's own thread with
  //! no thread woken. A driver that never runs out of queued work, while coroutines of its
  //! own wait on the source, polls it once between two resumptions every 50 us
  //! (`CUAWAIT_BUSY_POLL_US`; 0: never), so their completions do not wait for the backlog.
  //! `nullptr` (the default) turns it off. Not thread-safe: set it while no
  //! thread drives the loop; the source must outlive its use here.
  void set_idle_source(idle_source* source) noexcept { m_source = source; }

  //! Names `timers` as the timer service that `sleep_for` / `sleep_until` use for
  //! coroutines running on this loop (`executor::timers()`); nullptr (the default): the
  //! process-wide one. A polled service must be polled by this loop (its idle source, or a
  //! member of it) or by another executor's idle threads. Thread-safe.
  void set_timer_service(timer_service* timers) noexcept {
    m_timers.store(timers, std::memory_order_release);
  }
  [[nodiscard]] timer_service* timers() const noexcept override {
    return m_timers.load(std::memory_order_acquire);
  }

  //! Runs `awaitable` on this thread: drives the loop (resumptions posted to it run here)
  //! until the awaitable completes, then returns its result (a reference result stays a
  //! reference) or rethrows its exception. The awaitable may complete on another thread;
  //! the loop wakes for it. Work still queued at completion stays queued. Blocks forever if
  //! nothing ever completes the awaitable, like any blocking wait.
  template <concepts::awaitable A>
  decltype(auto) run(A&& awaitable);

private:
  template <class R>
  friend class detail::loop_driver;

  //! Runs work until `done` (guarded by m_mutex) becomes true.
  void run_until(bool& done) { drive(done, false); }
  //! With `lock` held and nothing queued: polls the idle source while it keeps making
  //! progress and `stop()` (read under the lock) is false. Returns with `lock` held.
  template <class Stop>
  void poll_source(std::unique_lock<std::mutex>& lock, Stop&& stop);
  //! Drives the loop until `stop` (guarded by m_mutex) is true; `consume`: sets it back to
  //! false then (one `finish()` ends one `run()`).
  void drive(bool& stop, bool consume);
  //! With work queued: true when the driver has been busy for the busy-poll period since
  //! `since` (then reset to now) while coroutines of its own wait on the source.
  [[nodiscard]] bool busy_poll_due(std::uint64_t& since) const noexcept;
  //! Blocks on the condition until `ready()`, or for the source's park period while it has
  //! work pending.
  template <class Ready>
  void wait(std::unique_lock<std::mutex>& lock, Ready&& ready);
  //! Sets `done` under the lock and wakes the driver; the last access to anything.
  void mark_done(bool& done) noexcept;
  void execute(std::coroutine_handle<> h, priority p) noexcept;

  mutable std::mutex m_mutex;
  std::condition_variable m_cv;
  detail::priority_rings m_queue;
  bool m_finish = false;
  bool m_wake_pending = false; //!< set by wake(), consumed by run_one()
  idle_source* m_source = nullptr;
  std::uint64_t m_busy_poll_ns = 0; //!< `CUAWAIT_BUSY_POLL_US` (see `set_idle_source`)
  std::atomic<timer_service*> m_timers{nullptr};
  //! Its coroutines suspended on reactor waits now (see `detail::execution_context::waits`).
  std::atomic<std::ptrdiff_t> m_waits{0};
  //! Posts ever made: a poll spinning on one wait returns when it changes.
  std::atomic<std::uint64_t> m_posts{0};
  [[nodiscard]] static bool spin_for_all() noexcept;
  //! For `detail::tl_idle_poller`: `context` is a `posts_seen`.
  static bool posted_since(const void* context) noexcept;
  struct posts_seen {
    const run_loop* loop;
    std::uint64_t seen;
  };
};

namespace detail {

//! The coroutine `run_loop::run(awaitable)` drives: awaits the awaitable, stores its
//! result, and tells the loop at its final suspension.
template <class R>
class loop_driver {
public:
  struct final_awaiter {
    [[nodiscard]] bool await_ready() const noexcept { return false; }
    template <class Promise>
    void await_suspend(std::coroutine_handle<Promise> h) const noexcept {
      h.promise().loop->mark_done(h.promise().done);
    }
    void await_resume() const noexcept {}
  };

  struct promise_base {
    run_loop* loop = nullptr;
    bool done = false; //!< guarded by loop->m_mutex
    std::exception_ptr exception;
    std::suspend_always initial_suspend() const noexcept { return {}; }
    final_awaiter final_suspend() const noexcept { return {}; }
    void unhandled_exception() noexcept { exception = std::current_exception(); }
  };

  //! Keeps the address of the result, which the coroutine yields and stays suspended on
  //! (as sync_wait does): a temporary result lives in the frame, never moved into here.
  struct value_promise : promise_base {
    std::add_pointer_t<R> value = nullptr;
    loop_driver get_return_object() noexcept {
      return loop_driver{std::coroutine_handle<value_promise>::from_promise(*this)};
    }
    final_awaiter yield_value(R&& v) noexcept {
      value = std::addressof(v);
      return {};
    }
    //! Never reached: the coroutine is destroyed at its `co_yield`.
    void return_void() const noexcept {}
  };

  struct void_promise : promise_base {
    loop_driver get_return_object() noexcept {
      return loop_driver{std::coroutine_handle<void_promise>::from_promise(*this)};
    }
    void return_void() const noexcept {}
  };

  using promise_type = std::conditional_t<std::is_void_v<R>, void_promise, value_promise>;

  explicit loop_driver(std::coroutine_handle<promise_type> h) noexcept : m_handle(h) {}
  loop_driver(loop_driver&& o) noexcept : m_handle(std::exchange(o.m_handle, {})) {}
  loop_driver(const loop_driver&) = delete;
  loop_driver& operator=(const loop_driver&) = delete;
  loop_driver& operator=(loop_driver&&) = delete;
  ~loop_driver() {
    if (m_handle) {
      m_handle.destroy();
    }
  }

  R run_on(run_loop& loop) {
    promise_type& p = m_handle.promise();
    p.loop = &loop;
    loop.post(m_handle, current_priority());
    loop.run_until(p.done);
    if (p.exception) {
      std::rethrow_exception(p.exception);
    }
    if constexpr (std::is_reference_v<R>) {
      return static_cast<R>(*p.value);
    } else if constexpr (!std::is_void_v<R>) {
      return move_or_copy(*p.value);
    }
  }

private:
  std::coroutine_handle<promise_type> m_handle;
};

template <class R, class A>
loop_driver<R> make_loop_driver(A&& awaitable) {
  if constexpr (std::is_void_v<R>) {
    co_await static_cast<A&&>(awaitable);
  } else {
    co_yield co_await static_cast<A&&>(awaitable);
  }
}

} // namespace detail

template <concepts::awaitable A>
decltype(auto) run_loop::run(A&& awaitable) {
  using result_t = await_result_t<A>;
  using stored_t = std::conditional_t<std::is_rvalue_reference_v<result_t>,
                                      std::remove_reference_t<result_t>, result_t>;
  auto driver = detail::make_loop_driver<stored_t>(static_cast<A&&>(awaitable));
  return driver.run_on(*this);
}

} // namespace cuawait
