// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `when_any`: await several awaitables at once, take the result of the first to finish
//! and ask the others to stop.
//!
//! ```cpp
//! auto [index, value] = co_await cuawait::when_any(std::move(replicas)); // one type
//! auto r = co_await cuawait::when_any(fetch(), cuawait::sleep_for(1s)); // a timeout (timer.hpp)
//! ```
//!
//! Cancellation is cooperative. Each child is given the token of a `std::stop_source`
//! owned by the `when_any`; when the first child finishes, a stop is requested on it. A
//! `cuawait::task` child reads its token with `co_await cuawait::get_stop_token()` (tasks it
//! awaits inherit it) and should end soon once `stop_requested()` is true:
//!
//! ```cpp
//! cuawait::task<void> poll() {
//!   const std::stop_token token = co_await cuawait::get_stop_token();
//!   while (!token.stop_requested()) { co_await pool.schedule(); /* ... */ }
//! }
//! ```
//!
//! Awaitables that are not cuawait coroutines see no token; `when_any` still waits for
//! them to finish on their own. A stop requested on the coroutine awaiting `when_any` (its
//! promise's `get_stop_token()`) is forwarded to every child.

#include "cuawait/detail/awaitable_traits.hpp"
#include "cuawait/detail/when_all_result.hpp"
#include "cuawait/detail/when_all_task.hpp"
#include "cuawait/detail/when_any_awaitable.hpp"
#include "cuawait/when_all.hpp"

#include <coroutine>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <variant>

namespace cuawait {

//! Awaits all of `awaitables` concurrently and yields a
//! `when_any_result<std::variant<...>>` for the first one to finish: `index` is its
//! argument position and the variant holds its result as alternative `index` (a `void`
//! result as `void_value`, a reference as `std::reference_wrapper`). Once the first child
//! has finished, the others are asked to stop; the awaiting coroutine resumes only after
//! every child has finished, so nothing keeps running detached.
//!
//! Nothing runs until the result is awaited (as an rvalue, once); children start in turn
//! on the awaiting thread, and a child started after another already finished starts
//! with its stop already requested.
//!
//! @throws the winner's exception, when the first child to finish threw. Exceptions of the
//!         other children are dropped.
//! Lifetime: as `when_all`: rvalue arguments are moved in, lvalue arguments referenced.
template <concepts::combinator_child... As>
requires(sizeof...(As) > 0) [[nodiscard]] auto when_any(As&&... awaitables) {
  return detail::when_any_tuple_awaitable<detail::wrapped_result_t<As>...>(
      detail::make_when_all_task<detail::wrapped_result_t<As>, detail::when_any_state,
                                 detail::child_param_t<As>>(static_cast<As&&>(awaitables))...);
}

//! Not callable: selected when a child is an awaitable that cannot be moved, so that the
//! error names the problem instead of failing inside the combinator. (It returns an
//! awaitable only so that `co_await` adds no second error.)
template <class... As>
requires detail::has_unmovable_child<As...> std::suspend_never when_any(As&&...) {
  static_assert(detail::dependent_false<As...>,
                "when_all/when_any children must be movable awaitables: an rvalue child is moved "
                "into the combinator; wrap it in a task (or pass it as an lvalue)");
  return {};
}

//! Awaits every element of `range` concurrently and yields `when_any_result<T>` (`T` the
//! elements' result; `when_any_result<void>` holds only `index`) for the first one to
//! finish, with the same stop and completion rules as the variadic form.
//!
//! @throws std::invalid_argument when the range is empty (nothing could ever finish);
//!         the winner's exception, rethrown from the `co_await`.
//! Lifetime: as `when_all(range)`.
template <class Range>
requires concepts::combinator_child_range<Range> &&(!concepts::combinator_child<Range>)
    [[nodiscard]] auto when_any(Range&& range) {
  using result_t = detail::wrapped_result_t<detail::range_child_t<Range>>;
  auto children = detail::wrap_range<result_t, detail::when_any_state>(static_cast<Range&&>(range));
  if (children.empty()) {
    throw std::invalid_argument("cuawait::when_any: the range of awaitables is empty");
  }
  return detail::when_any_range_awaitable<result_t>(std::move(children));
}

} // namespace cuawait
