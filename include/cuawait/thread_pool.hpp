// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `thread_pool`: a work-stealing executor with priorities.

#include "cuawait/executor.hpp"
#include "cuawait/idle_source.hpp"

#include <atomic>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <thread>

namespace cuawait {

//! What a `thread_pool`'s workers did since they started, summed over the workers (what
//! `cuawait::doctor` reads). Time is wall-clock: a worker is busy from the moment it finds
//! work until it finds none (time spent blocked inside a coroutine counts as busy), idle
//! otherwise; idle time is spinning (polling the idle source, yielding) or parked. Clocks
//! are read only when a worker changes between busy and idle, never per resumption.
struct thread_pool_stats {
  std::size_t workers = 0;       //!< worker threads
  std::uint64_t resumed = 0;     //!< coroutines resumed by the workers
  std::uint64_t busy_ns = 0;     //!< time running coroutines
  std::uint64_t idle_ns = 0;     //!< time without work (spinning or parked)
  std::uint64_t parked_ns = 0;   //!< of which parked on the condition variable
  std::uint64_t queued_seen = 0; //!< sum over resumptions of the handles left in the queue
                                 //!< the handle was taken from (the backlog a pick saw),
                                 //!< estimated from every 16th pick of each queue
  std::size_t queued = 0;        //!< handles queued now, all queues

  //! Busy time over busy plus idle time, in [0, 1]; 0 before anything was measured.
  [[nodiscard]] double busy_fraction() const noexcept {
    const std::uint64_t total = busy_ns + idle_ns;
    return total == 0 ? 0.0 : static_cast<double>(busy_ns) / static_cast<double>(total);
  }
  //! Mean backlog seen by a pick (`queued_seen / resumed`).
  [[nodiscard]] double mean_backlog() const noexcept {
    return resumed == 0 ? 0.0 : static_cast<double>(queued_seen) / static_cast<double>(resumed);
  }
};

//! A fixed set of worker threads that resume coroutines.
//!
//! Scheduling: each worker owns a queue. A coroutine posted from one of the pool's own
//! workers goes to that worker's queue (it stays warm in that core's cache); a post from
//! any other thread goes to a shared injection queue. A worker takes the oldest handle of
//! the highest priority found in its own queue or the injection queue (and, every few
//! rounds, the injection queue first, so outside work is never starved by local work);
//! with both empty it steals from the other workers. A worker that finds nothing spins
//! briefly, then parks on a condition variable until work is posted: an idle pool uses no
//! CPU. Every resumption runs inside an `executor_scope` naming this pool and the
//! priority the coroutine was posted with.
//!
//! Shutdown (`shutdown()`, also run by the destructor):
//! - From then on the pool accepts new work only from its own workers (the continuations
//!   of work it already holds). A `post()` from any other thread resumes the coroutine at
//!   once on the calling thread, and `schedule()` completes without suspending: nothing is
//!   leaked, dropped or left hanging, but that code runs on the caller's thread.
//! - Work already queued, and everything it queues on the pool in turn, runs to completion
//!   before the workers exit; `shutdown()` then joins them and returns.
//! - It is idempotent and may be called from several threads (all return after the join).
//! - Calling it from one of this pool's workers would join the calling thread: it throws
//!   `std::logic_error` instead (and the destructor, being noexcept, terminates).
//!
//! A coroutine suspended elsewhere (on a GPU operation, a mutex...) when the pool shuts
//! down is resumed by whoever completes it, on that thread, as described above.
//!
//! Idle polling (`set_idle_source`): a worker with nothing to run polls the source (the GPU
//! completion reactor) itself, one worker at a time; what finished lands in that worker's
//! queue and runs there next, and idle workers take the rest without being woken. While
//! the source has work pending and made progress recently, idle workers spin instead of
//! parking (like threads blocked in a spinning `cudaStreamSynchronize`, but any of them
//! can resume any job); afterwards one worker parks with a timeout and polls again, and the
//! others park until work is posted or `wake_idle_poller()` is called. A pool that never
//! runs out of work still polls: a worker busy without a break for 50 us polls the source
//! once (`idle_source::poll_busy`, nothing spun on) before its next pick, at most one worker
//! per 50 us, so GPU completions and due timers are not held behind a long backlog of ready
//! work. `CUAWAIT_BUSY_POLL_US=N` sets the period (0: never); the constructor throws
//! `std::invalid_argument` for a value that is not a number.
class thread_pool final : public executor {
public:
  //! Starts `threads` workers (at least one; 0 means one).
  //! @throws std::system_error when a thread cannot be started.
  explicit thread_pool(std::size_t threads = std::thread::hardware_concurrency());

  //! As above; each worker first calls `on_worker_start(index)` (index in [0, threads)),
  //! before it runs anything: e.g. to give the thread a device or a context of its own. It
  //! must not throw (an exception escaping it terminates).
  thread_pool(std::size_t threads, std::function<void(std::size_t)> on_worker_start);

  //! Shuts the pool down (see the class comment) and joins the workers.
  //! Terminates when run on one of this pool's workers.
  ~thread_pool();

  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;

  //! Queues `h` to run on a worker with priority `p`; never resumes it inside the call,
  //! except after `shutdown()` from a non-worker thread (then it runs here, at once).
  void post(std::coroutine_handle<> h, priority p) noexcept override;
  //! As `post`; from one of its workers, a coroutine whose worker `home` spins idle waiting
  //! for it is queued there (that worker runs it next, on the same core as before).
  void post_near(std::coroutine_handle<> h, priority p, std::uint32_t home) noexcept override;

  //! Queues all of `handles` on one worker's queue under one lock (successive calls take
  //! successive workers, so that a large batch posted in chunks spreads over the pool) and
  //! wakes as many parked workers as it queued handles. After `shutdown()`, from a
  //! non-worker thread, it resumes them here, as `post` does.
  void post_bulk(std::span<const std::coroutine_handle<>> handles, priority p) noexcept override;

  //! Awaiter returned by `schedule()`.
  class schedule_awaiter {
  public:
    [[nodiscard]] bool await_ready() const noexcept { return false; }
    //! Queues the awaiting coroutine; continues inline (returns false) once shut down.
    bool await_suspend(std::coroutine_handle<> h) noexcept { return m_pool.try_enqueue(h, m_p); }
    void await_resume() const noexcept {}

  private:
    friend class thread_pool;
    schedule_awaiter(thread_pool& pool, priority p) noexcept : m_pool(pool), m_p(p) {}
    thread_pool& m_pool;
    priority m_p;
  };

  //! `co_await pool.schedule()` moves the awaiting coroutine onto a worker, keeping the
  //! priority it runs with now (`current_priority()`).
  [[nodiscard]] schedule_awaiter schedule() noexcept { return {*this, current_priority()}; }
  //! `co_await pool.schedule(p)` moves the awaiting coroutine onto a worker with priority `p`.
  [[nodiscard]] schedule_awaiter schedule(priority p) noexcept { return {*this, p}; }

  //! Number of worker threads.
  [[nodiscard]] std::size_t size() const noexcept;

  //! True once `shutdown()` has begun.
  [[nodiscard]] bool is_shutting_down() const noexcept;

  //! True when called from one of this pool's worker threads.
  [[nodiscard]] bool on_worker_thread() const noexcept;

  //! Lets idle workers poll `source` (see the class comment); nullptr stops it. When it
  //! replaces or removes a source, it returns once no worker uses the old one any more, so
  //! the old source may be destroyed then. Not from one of this pool's workers.
  void set_idle_source(idle_source* source) noexcept;

  //! Names `timers` as the timer service that `sleep_for` / `sleep_until` use for
  //! coroutines running on this pool (`executor::timers()`); nullptr (the default): the
  //! process-wide one. A polled service must also be polled by this pool (its idle source,
  //! or a member of it) or by another executor's idle threads. Thread-safe; sleeps already
  //! started stay with their service.
  void set_timer_service(timer_service* timers) noexcept {
    m_timers.store(timers, std::memory_order_release);
  }
  [[nodiscard]] timer_service* timers() const noexcept override {
    return m_timers.load(std::memory_order_acquire);
  }

  //! Called by the idle source when it has new work pending (or a completion was signalled)
  //! and no worker may be polling: wakes the parked poller, or one parked worker. Cheap when
  //! a worker is spinning already. Safe from any thread.
  void wake_idle_poller() noexcept;

  //! Called by an idle source whose `idle_park_period()` just became shorter (a polled
  //! `timer_service` with a new earliest sleep): the worker parked with a timeout wakes and
  //! parks again for the new period (with none parked, a parked worker wakes to poll).
  //! Unlike `wake_idle_poller`, it wakes the parked poller even while other workers spin,
  //! since they may park behind its old period. Costs a futex call when a worker is parked.
  //! Safe from any thread.
  void wake_parked_poller() noexcept;

  //! The workers' counters (see `thread_pool_stats`); a near snapshot, from any thread.
  [[nodiscard]] thread_pool_stats stats() const;

  //! Stops accepting outside work, runs what is queued, joins the workers (class comment).
  //! @throws std::logic_error when called from one of this pool's workers.
  void shutdown();

  struct impl; //!< Internal; defined in src/core/thread_pool.cpp.

private:
  //! Queues `h`, or returns false when the pool no longer accepts work from this thread.
  bool try_enqueue(std::coroutine_handle<> h, priority p) noexcept;

  std::unique_ptr<impl> m_impl;
  std::atomic<timer_service*> m_timers{nullptr};
};

} // namespace cuawait
