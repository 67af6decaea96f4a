// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `async_scope`: start any number of fire-and-forget tasks and later wait for all of
//! them, without losing their exceptions or leaving them running detached.
//!
//! ```cpp
//! cuawait::async_scope scope;
//! for (auto& job : jobs) scope.spawn(process(job));
//! co_await scope.join(); // rethrows the first exception of a spawned task
//! ```

#include "cuawait/detail/async_scope_state.hpp"
#include "cuawait/detail/awaitable_traits.hpp"
#include "cuawait/detail/trampoline.hpp"

#include <coroutine>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <stop_token>
#include <type_traits>
#include <utility>

namespace cuawait {

//! Owns a dynamic set of running tasks (spawned work) and lets one coroutine at a time
//! wait for all of them.
//!
//! Thread-safety: `spawn`, `request_stop` and `get_stop_token` may be called from any
//! thread at any time, also while a join is pending (the join then waits for the new work
//! too). At most one `join()` may be pending at a time.
//!
//! Lifetime: destroying a scope while spawned work is still running is a programming
//! error: the destructor prints a message naming `cuawait::async_scope` to stderr and
//! calls `std::terminate()`. Always `co_await scope.join()` (or `sync_wait` it) first. A
//! scope whose work has all finished may be destroyed without a join; an exception no
//! join collected is then discarded.
class async_scope {
public:
  async_scope() = default;
  async_scope(const async_scope&) = delete;
  async_scope& operator=(const async_scope&) = delete;
  //! Terminates the program (after a message) when spawned work is still running.
  ~async_scope() {
    if (const std::uint64_t live = m_state.live_tasks(); live != 0) {
      std::fprintf(stderr,
                   "cuawait::async_scope destroyed while %llu spawned task(s) are still "
                   "running; co_await scope.join() before destroying it\n",
                   static_cast<unsigned long long>(live));
      std::terminate();
    }
  }

  //! Starts `work` at once: it runs on the calling thread until it first suspends, then
  //! wherever it is resumed. Its frame (and `work` itself, moved into it) is freed as soon
  //! as it finishes. A spawned cuawait task inherits the scope's stop token.
  //!
  //! @throws std::bad_alloc (or what moving `work` throws) when the work cannot be
  //!         started; it then never runs. An exception thrown BY the work is captured and
  //!         rethrown from `join()`, never from here.
  template <class A>
  requires concepts::awaitable<std::remove_cvref_t<A> &&>&&
      std::is_void_v<await_result_t<std::remove_cvref_t<A>&&>> void
      spawn(A&& work) {
    const detail::async_scope_task wrapper =
        detail::make_async_scope_task<std::remove_cvref_t<A>>(static_cast<A&&>(work));
    wrapper.handle().promise().scope = &m_state;
    m_state.task_added();
    detail::resume(wrapper.handle());
  }

  //! Awaiter returned by `join()`.
  class join_awaiter {
  public:
    explicit join_awaiter(detail::async_scope_state& state) noexcept : m_state(state) {}
    [[nodiscard]] bool await_ready() const noexcept { return m_state.live_tasks() == 0; }
    bool await_suspend(std::coroutine_handle<> h) noexcept { return m_state.join_suspend(h); }
    void await_resume() const { m_state.rethrow_exception(); }

  private:
    detail::async_scope_state& m_state;
  };

  //! `co_await scope.join()` completes when no spawned work is running (at once when
  //! none is), on the thread that finished the last of it.
  //! @throws the first exception thrown by spawned work since the previous join (later
  //!         ones are discarded); the scope stays usable, and may be joined again.
  [[nodiscard]] join_awaiter join() noexcept { return join_awaiter{m_state}; }

  //! Requests a stop on the token every spawned task inherits. Cooperative: work that
  //! never reads its token runs on.
  void request_stop() noexcept { m_state.request_stop(); }
  //! The token spawned tasks inherit (`co_await cuawait::get_stop_token()` in them).
  [[nodiscard]] std::stop_token get_stop_token() const noexcept { return m_state.get_stop_token(); }

private:
  detail::async_scope_state m_state;
};

} // namespace cuawait
