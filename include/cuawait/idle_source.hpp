// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `idle_source`: work that an idle executor thread finds by polling, so completions are
//! found where coroutines resume instead of on a thread of their own. The completion
//! reactor is one: a `thread_pool` worker with nothing to run polls it, and the
//! coroutines whose GPU work finished are queued on that worker (and run there next)
//! without any thread being woken.

#include <atomic>
#include <chrono>
#include <cstddef>

namespace cuawait {

namespace detail {
//! What an executor thread tells an idle source about itself around its idle polls
//! (empty elsewhere), so that a poll may spin on that thread's own wait the way a thread
//! in `cudaStreamSynchronize` spins on its stream.
struct idle_poller {
  //! `work_arrived(context)`: work for this thread arrived, so a poll spinning on one
  //! wait returns early to let it run. nullptr: never.
  bool (*work_arrived)(const void*) noexcept = nullptr;
  const void* context = nullptr;
  //! Its coroutines suspended on the source now (`execution_context::waits`); nullptr:
  //! not counted.
  const std::atomic<std::ptrdiff_t>* own_waits = nullptr;
};
constinit inline thread_local idle_poller tl_idle_poller{};

[[nodiscard]] inline bool idle_interrupted() noexcept {
  const idle_poller& p = tl_idle_poller;
  return p.work_arrived != nullptr && p.work_arrived(p.context);
}

//! True when the polling thread has exactly one coroutine suspended on the source: the
//! one whose wait it may watch.
[[nodiscard]] inline bool idle_poller_waits_once() noexcept {
  const idle_poller& p = tl_idle_poller;
  return p.own_waits != nullptr && p.own_waits->load(std::memory_order_relaxed) == 1;
}
} // namespace detail

//! Polled by idle executor threads (see `thread_pool::set_idle_source`).
//!
//! Contract: every function is safe from any thread, concurrently, and never blocks. An
//! implementation lets one thread poll at a time and returns at once on the others.
class idle_source {
public:
  //! Polls once, unless another thread is polling now: resolves finished work and hands
  //! each coroutine to its executor (a `post` from a pool worker lands in that worker's own
  //! queue). Returns how many were resolved.
  virtual std::size_t poll_idle() noexcept = 0;

  //! Polled by an executor thread that still has work of its own to run (a pool whose
  //! workers have been busy for a while, and so never ran out of work to poll idle):
  //! resolves what finished by now without spinning on anything, and returns at once when
  //! another thread polls. Returns how many were resolved. Default: `poll_idle()` (the
  //! caller makes any spin inside it return after one look, see `detail::idle_poller`).
  virtual std::size_t poll_busy() noexcept { return poll_idle(); }

  //! True while work is pending and something finished or started recently: an idle thread
  //! should keep polling instead of parking. When it returns false, the thread may park for
  //! `idle_park_period()` and poll again (work is still pending), or indefinitely when
  //! `idle_pending()` is false.
  [[nodiscard]] virtual bool idle_keep_spinning() const noexcept = 0;

  //! True while work is pending that only polling discovers.
  [[nodiscard]] virtual bool idle_pending() const noexcept = 0;

  //! True when pending work is known to be ready now, without asking anybody (a polled
  //! timer whose earliest deadline has passed): a thread that polls only for its own waits
  //! (a `run_loop`'s driver) polls once after a nap when it is. Default: never.
  [[nodiscard]] virtual bool idle_due() const noexcept { return false; }

  //! At most this many idle threads should spin on the source at once (the others park):
  //! more spinners than pending waits only contend with the threads doing the work.
  [[nodiscard]] virtual std::size_t idle_spinners_wanted() const noexcept {
    return static_cast<std::size_t>(-1);
  }

  //! How long a parked poller sleeps between polls while work is pending and nothing
  //! wakes it (`thread_pool::wake_idle_poller`).
  [[nodiscard]] virtual std::chrono::nanoseconds idle_park_period() const noexcept = 0;

  //! `fn(context)` is to be called when the source gets new work to poll for, so that a
  //! parked poller can be woken (`thread_pool::wake_idle_poller`); nullptr: none. An
  //! executor's owner (a `runtime`) sets it when it installs the source. The default
  //! ignores it: for sources whose work never arrives while every poller is parked.
  virtual void set_idle_waker(void (*fn)(void*) noexcept, void* context) noexcept {
    (void)fn;
    (void)context;
  }

protected:
  ~idle_source() = default;
};

} // namespace cuawait
