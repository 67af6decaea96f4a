// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The executor interface: where a suspended coroutine is resumed, and with what priority.
//! Completion sources that are not executors themselves (the GPU reactor, timers) capture
//! the executor a coroutine runs on when it suspends and hand the coroutine back to it,
//! so a coroutine always resumes on the executor it belongs to.

#include <coroutine>
#include <cstdint>

namespace cuawait {

//! Scheduling priority. Higher runs first among work queued on the same worker.
enum class priority : std::uint8_t { low = 0, normal = 1, high = 2 };

//! Number of distinct priorities.
inline constexpr int priority_count = 3;

//! A place that resumes coroutines. Implementations: `thread_pool`, the driving thread
//! of `sync_wait`-style loops, `inline_executor`.
class executor {
public:
  //! Arranges for `h` to be resumed on this executor with priority `p`. Thread-safe;
  //! never resumes `h` inside the call unless the executor is documented as inline.
  virtual void post(std::coroutine_handle<> h, priority p) noexcept = 0;

  //! As `post`, preferring the worker `home` of this executor (the one the coroutine
  //! suspended on, `current_worker()` then): a pool keeps a job on one core when that
  //! worker is idle. A hint only; the default ignores it.
  virtual void post_near(std::coroutine_handle<> h, priority p, std::uint32_t home) noexcept {
    (void)home;
    post(h, p);
  }

protected:
  ~executor() = default;
};

namespace detail {
struct execution_context {
  executor* current = nullptr;
  priority current_priority = priority::normal;
  std::uint32_t worker = ~std::uint32_t{0}; //!< the executor's worker index, if it has workers
};
constinit inline thread_local execution_context tl_execution{};
} // namespace detail

//! The executor running the calling code, or nullptr on a thread no executor owns.
[[nodiscard]] inline executor* current_executor() noexcept { return detail::tl_execution.current; }

//! The priority the calling code was scheduled with.
//! The index of the current executor's worker running the caller (a pool's worker), or
//! `~0u` when the executor has no such notion. A hint for `executor::post_near`.
[[nodiscard]] inline std::uint32_t current_worker() noexcept {
  return detail::tl_execution.worker;
}

[[nodiscard]] inline priority current_priority() noexcept {
  return detail::tl_execution.current_priority;
}

//! Marks the calling thread as running on `ex` with priority `p` for the scope's lifetime.
//! Executors use it around each resumption; users rarely need it.
class executor_scope {
public:
  executor_scope(executor* ex, priority p) noexcept : m_saved(detail::tl_execution) {
    detail::tl_execution = {ex, p};
  }
  //! As above, on worker `worker` of `ex` (see `current_worker()`).
  executor_scope(executor* ex, priority p, std::uint32_t worker) noexcept
      : m_saved(detail::tl_execution) {
    detail::tl_execution = {ex, p, worker};
  }
  executor_scope(const executor_scope&) = delete;
  executor_scope& operator=(const executor_scope&) = delete;
  ~executor_scope() { detail::tl_execution = m_saved; }

private:
  detail::execution_context m_saved;
};

} // namespace cuawait
