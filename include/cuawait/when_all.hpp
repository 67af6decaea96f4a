// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `when_all`: await several awaitables at once and get all their results.
//!
//! ```cpp
//! auto [a, b] = co_await cuawait::when_all(load(x), load(y));        // std::tuple
//! std::vector<int> all = co_await cuawait::when_all(std::move(tasks)); // input order
//! ```

#include "cuawait/detail/awaitable_traits.hpp"
#include "cuawait/detail/when_all_awaitable.hpp"
#include "cuawait/detail/when_all_result.hpp"
#include "cuawait/detail/when_all_task.hpp"

#include <concepts>
#include <coroutine>
#include <iterator>
#include <ranges>
#include <type_traits>
#include <utility>
#include <vector>

namespace cuawait::detail {

//! An lvalue child is referenced; an rvalue child is moved into its wrapper coroutine.
template <class A>
concept holdable_child = std::is_lvalue_reference_v<A> || requires {
  requires std::constructible_from<child_param_t<A>, A>;
  requires std::move_constructible<child_param_t<A>>;
};

} // namespace cuawait::detail

namespace cuawait::concepts {

//! Something a combinator can take as a child: awaitable as it will be held (an lvalue by
//! reference, an rvalue by value), so an rvalue child must be movable. The awaiters of the
//! async primitives (`lock()`, `acquire()`, `wait()`, `send()`, `receive()`) are not:
//! await one in a task and pass the task, or pass it as an lvalue.
template <class A>
concept combinator_child = detail::holdable_child<A> && awaitable<detail::child_param_t<A> &&>;

//! A range whose elements a combinator can take as children (see `when_all(range)`).
template <class Range>
concept combinator_child_range = std::ranges::input_range<Range> && combinator_child<
    std::conditional_t<std::is_lvalue_reference_v<Range>, std::ranges::range_reference_t<Range>,
                       std::ranges::range_rvalue_reference_t<Range>>>;

} // namespace cuawait::concepts

namespace cuawait::detail {

template <class Range>
using range_child_t =
    std::conditional_t<std::is_lvalue_reference_v<Range>, std::ranges::range_reference_t<Range>,
                       std::ranges::range_rvalue_reference_t<Range>>;

//! One wrapper coroutine per element, in order, made by `wrap(element)`: an element of an
//! lvalue range is passed as an lvalue, one of an rvalue range is moved out of it.
template <class R, class State, class Range, class Wrap>
std::vector<when_all_task<R, State>> wrap_range_with(Range&& range, Wrap wrap) {
  std::vector<when_all_task<R, State>> children;
  if constexpr (std::ranges::sized_range<Range>) {
    children.reserve(static_cast<std::size_t>(std::ranges::size(range)));
  }
  for (auto it = std::ranges::begin(range); it != std::ranges::end(range); ++it) {
    if constexpr (std::is_lvalue_reference_v<Range>) {
      children.push_back(wrap(*it));
    } else {
      children.push_back(wrap(std::ranges::iter_move(it)));
    }
  }
  return children;
}

//! One `make_when_all_task` wrapper per element (see `wrap_range_with`).
template <class R, class State, class Range>
std::vector<when_all_task<R, State>> wrap_range(Range&& range) {
  using param_t = child_param_t<range_child_t<Range>>;
  return wrap_range_with<R, State>(static_cast<Range&&>(range), [](auto&& child) {
    return make_when_all_task<R, State, param_t>(static_cast<decltype(child)&&>(child));
  });
}

//! Arguments that would all be children but for an rvalue that cannot be moved: they select
//! the overloads that only explain the error (see `when_all` and `when_any`).
template <class... As>
concept has_unmovable_child = (concepts::awaitable<child_param_t<As>&&> && ...) &&
                              !(concepts::combinator_child<As> && ...);

template <class...>
inline constexpr bool dependent_false = false;

} // namespace cuawait::detail

namespace cuawait {

//! Awaits all of `awaitables` concurrently and yields `std::tuple` of their results, in
//! argument order: a `void` result becomes `void_value`, a reference result stays a
//! reference, an rvalue-reference result is moved into a value.
//!
//! Nothing runs until the result is awaited (as an rvalue, once). Then every child starts
//! in turn on the awaiting thread and runs until it first suspends; they may finish on
//! any threads; the awaiting coroutine resumes on the thread of the last one to finish.
//! Children inherit the awaiting coroutine's stop token.
//!
//! @throws the first exception thrown by a child, in completion order, rethrown only
//!         once every child has finished (later exceptions are dropped).
//! Lifetime: rvalue arguments are moved into the result; lvalue arguments are referenced
//! and must outlive the `co_await`.
template <concepts::combinator_child... As>
[[nodiscard]] auto when_all(As&&... awaitables) {
  return detail::when_all_tuple_awaitable<detail::wrapped_result_t<As>...>(
      detail::make_when_all_task<detail::wrapped_result_t<As>, detail::when_all_state,
                                 detail::child_param_t<As>>(static_cast<As&&>(awaitables))...);
}

//! Not callable: selected when a child is an awaitable that cannot be moved, so that the
//! error names the problem instead of failing inside the combinator. (It returns an
//! awaitable only so that `co_await` adds no second error.)
template <class... As>
requires detail::has_unmovable_child<As...> std::suspend_never when_all(As&&...) {
  static_assert(detail::dependent_false<As...>,
                "when_all/when_any children must be movable awaitables: an rvalue child is moved "
                "into the combinator; wrap it in a task (or pass it as an lvalue)");
  return {};
}

//! Awaits every element of `range` concurrently (as the variadic form does) and yields a
//! `std::vector` of their results in input order: references as `std::reference_wrapper`,
//! or `void` when the elements yield `void`. An empty range completes at once.
//!
//! @throws the first exception thrown by an element, in completion order, once every
//!         element has finished; `std::bad_alloc` when the wrappers cannot be allocated.
//! Lifetime: the elements of an rvalue range (e.g. `std::move(tasks)`) are moved out of it
//! at this call; those of an lvalue range are referenced and must outlive the `co_await`.
template <class Range>
requires concepts::combinator_child_range<Range> &&(!concepts::combinator_child<Range>)
    [[nodiscard]] auto when_all(Range&& range) {
  using result_t = detail::wrapped_result_t<detail::range_child_t<Range>>;
  return detail::when_all_range_awaitable<result_t>(
      detail::wrap_range<result_t, detail::when_all_state>(static_cast<Range&&>(range)));
}

} // namespace cuawait
