// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The executor interface: where a suspended coroutine is resumed, and with what priority.
//! Completion sources that are not executors themselves (the GPU reactor, timers) capture
//! the executor a coroutine runs on when it suspends and hand the coroutine back to it,
//! so a coroutine always resumes on the executor it belongs to.

#include <atomic>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <span>

namespace cuawait {

//! Scheduling priority. Higher runs first among work queued on the same worker.
enum class priority : std::uint8_t { low = 0, normal = 1, high = 2 };

class timer_service;

//! Number of distinct priorities.
inline constexpr int priority_count = 3;

//! A place that resumes coroutines. Implementations: `thread_pool`, the driving thread
//! of `sync_wait`-style loops, `inline_executor`.
class executor {
public:
  //! Arranges for `h` to be resumed on this executor with priority `p`. Thread-safe;
  //! never resumes `h` inside the call unless the executor is documented as inline.
  virtual void post(std::coroutine_handle<> h, priority p) noexcept = 0;

  //! Arranges for each of `handles` to be resumed, as `post` does for one. For whoever ends
  //! many waits at once (a stop request reaching thousands of GPU waits): an executor may
  //! queue them under one lock and wake its threads once. Default: `post` each, in order.
  virtual void post_bulk(std::span<const std::coroutine_handle<>> handles, priority p) noexcept {
    for (const std::coroutine_handle<> h : handles) {
      post(h, p);
    }
  }

  //! As `post`, preferring worker `home` of this executor (the one the coroutine suspended
  //! on, `detail::tl_execution.worker` then): a pool resumes a finished GPU wait on the
  //! worker that waits for it, keeping a job on one core. A hint; the default ignores it.
  virtual void post_near(std::coroutine_handle<> h, priority p, std::uint32_t home) noexcept {
    (void)home;
    post(h, p);
  }

  //! The timer service that `sleep_for` / `sleep_until` use for coroutines running here
  //! (see `timer_service::current()`), or nullptr for the process-wide one. A `runtime`'s
  //! pool and run loop name its polled service.
  [[nodiscard]] virtual timer_service* timers() const noexcept { return nullptr; }

protected:
  ~executor() = default;
};

namespace detail {
struct execution_context {
  executor* current = nullptr;
  priority current_priority = priority::normal;
  //! Where the running executor counts its coroutines suspended on completion-reactor
  //! waits (GPU work), or nullptr when it does not count them. A `reactor_wait` adds one
  //! when it suspends and takes it back when its coroutine runs again (or is destroyed),
  //! so that an executor whose threads look for finished work when idle knows whether any
  //! of its own coroutines waits: the pool spins no more threads than that, and a run
  //! loop spins only for its own waits.
  std::atomic<std::ptrdiff_t>* waits = nullptr;
  //! The executor's worker running the caller (a pool's worker index), or `~0u`: where a
  //! finished wait prefers to resume (`executor::post_near`).
  std::uint32_t worker = ~std::uint32_t{0};
};
constinit inline thread_local execution_context tl_execution{};
} // namespace detail

//! The executor running the calling code, or nullptr on a thread no executor owns.
[[nodiscard]] inline executor* current_executor() noexcept { return detail::tl_execution.current; }

//! The priority the calling code was scheduled with.
[[nodiscard]] inline priority current_priority() noexcept {
  return detail::tl_execution.current_priority;
}

//! Marks the calling thread as running on `ex` with priority `p` for the scope's lifetime.
//! Executors use it around each resumption; users rarely need it.
class executor_scope {
public:
  executor_scope(executor* ex, priority p) noexcept : m_saved(detail::tl_execution) {
    detail::tl_execution = {ex, p, nullptr};
  }
  //! The same, for an executor that counts its coroutines' reactor waits in `waits` (see
  //! `detail::execution_context::waits`).
  executor_scope(executor* ex, priority p, std::atomic<std::ptrdiff_t>* waits,
                 std::uint32_t worker = ~std::uint32_t{0}) noexcept
      : m_saved(detail::tl_execution) {
    detail::tl_execution = {ex, p, waits, worker};
  }
  executor_scope(const executor_scope&) = delete;
  executor_scope& operator=(const executor_scope&) = delete;
  ~executor_scope() { detail::tl_execution = m_saved; }

private:
  detail::execution_context m_saved;
};

} // namespace cuawait
