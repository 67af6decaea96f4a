// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Deadlines on any awaitable, GPU work or not:
//!
//! ```cpp
//! co_await cuawait::with_timeout(s.launch(kernel, grid, block, d), 10ms);  // or throws
//! auto lease = co_await cuawait::with_deadline(pool.acquire(), t);       // operation_timed_out
//! ```
//!
//! Built on stop tokens and the timer: the awaitable and a sleep until the deadline race in
//! a `when_any`. If the awaitable finishes first, its result (or exception) is the result
//! and the sleep is stopped. If the deadline passes first, the awaitable is asked to stop
//! through its stop token, and `co_await` throws `operation_timed_out`, an
//! `operation_cancelled`. GPU awaits and sleeps inherit that token and give up at once; a
//! task reads it with `co_await get_stop_token()`, and hands it to the CPU primitives,
//! which take their token explicitly:
//!
//! ```cpp
//! task<void> wait_ready(async_event& ev) { co_await ev.wait(co_await get_stop_token()); }
//! co_await cuawait::with_timeout(wait_ready(ev), 5ms);
//! ```
//!
//! A stop request on the awaiting coroutine reaches the awaitable too (then
//! `operation_cancelled`, or whatever the awaitable threw).
//!
//! The `co_await` returns only once the awaitable has finished (it never runs on detached):
//! an awaitable that ignores its stop token delays a timeout until it finishes on its own.
//! When the deadline wins, the awaitable's result, if it produced one at the same moment,
//! is destroyed: prefer awaitables whose results own what they acquired
//! (`async_mutex::scoped_lock`, leases), never bare `lock()`.

#include "cuawait/cancellation.hpp"
#include "cuawait/task.hpp"
#include "cuawait/timer.hpp"
#include "cuawait/when_any.hpp"

#include <chrono>
#include <type_traits>
#include <utility>
#include <variant>

namespace cuawait {

namespace detail {

//! The awaitable (`A`: a reference for an lvalue, a value for an rvalue) against a sleep
//! until `deadline()`, evaluated when the task starts (at its `co_await`).
template <class R, class A, class Deadline>
task<R> deadline_task(A awaitable, timer_service* timers, Deadline deadline) {
  auto r = co_await when_any(static_cast<A&&>(awaitable), timers->sleep_until(deadline()));
  if (r.index != 0) {
    throw operation_timed_out("cuawait: deadline passed before the operation finished");
  }
  if constexpr (std::is_void_v<R>) {
    co_return;
  } else if constexpr (std::is_lvalue_reference_v<R>) {
    co_return std::get<0>(r.value).get();
  } else {
    co_return std::get<0>(std::move(r.value));
  }
}

} // namespace detail

//! `co_await with_deadline(a, t)`: the result of `co_await a` if it finishes before `t`
//! (a steady-clock time), else throws `operation_timed_out` once `a` has stopped.
//! Nothing starts until the result is awaited (once, as an rvalue). `timers` serves the
//! deadline (default: `timer_service::current()`, the calling executor's service or the
//! process-wide one).
//!
//! @throws operation_timed_out when `t` passed first (when it has passed already, the
//!         awaitable still starts, and wins only if it finishes without suspending); what
//!         `co_await a` throws.
//! Lifetime: an rvalue `a` is moved in; an lvalue is referenced and must outlive the await.
template <concepts::combinator_child A>
[[nodiscard]] task<detail::wrapped_result_t<A>>
with_deadline(A&& a, std::chrono::steady_clock::time_point t,
              timer_service& timers = timer_service::current()) {
  return detail::deadline_task<detail::wrapped_result_t<A>, detail::child_param_t<A>>(
      static_cast<A&&>(a), &timers, [t] { return t; });
}

//! `co_await with_timeout(a, d)`: as `with_deadline`, with the deadline `d` after the
//! moment the result is awaited (not created).
template <concepts::combinator_child A, class Rep, class Period>
[[nodiscard]] task<detail::wrapped_result_t<A>>
with_timeout(A&& a, std::chrono::duration<Rep, Period> d,
             timer_service& timers = timer_service::current()) {
  const auto timeout = std::chrono::ceil<std::chrono::steady_clock::duration>(d);
  return detail::deadline_task<detail::wrapped_result_t<A>, detail::child_param_t<A>>(
      static_cast<A&&>(a), &timers,
      [timeout] { return std::chrono::steady_clock::now() + timeout; });
}

} // namespace cuawait
