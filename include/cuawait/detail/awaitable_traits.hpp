// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! What `co_await x` means for an arbitrary `x`: its awaiter and its result type.

#include <concepts>
#include <coroutine>
#include <type_traits>
#include <utility>

namespace cuawait::detail {

template <class T>
concept has_member_co_await = requires(T&& t) {
  static_cast<T&&>(t).operator co_await();
};

template <class T>
concept has_free_co_await = requires(T&& t) {
  operator co_await(static_cast<T&&>(t));
};

template <class T>
concept is_suspend_result = std::same_as<T, void> || std::same_as<T, bool> ||
    std::convertible_to<T, std::coroutine_handle<>>;

} // namespace cuawait::detail

namespace cuawait::concepts {

//! An object usable directly as the operand's awaiter.
template <class A>
concept awaiter = requires(A& a, std::coroutine_handle<> h) {
  { a.await_ready() } -> std::convertible_to<bool>;
  requires detail::is_suspend_result<decltype(a.await_suspend(h))>;
  a.await_resume();
};

} // namespace cuawait::concepts

namespace cuawait::detail {

//! The awaiter `co_await t` would use (ignoring a promise's `await_transform`).
template <class T>
decltype(auto) get_awaiter(T&& t) {
  if constexpr (has_member_co_await<T>) {
    return static_cast<T&&>(t).operator co_await();
  } else if constexpr (has_free_co_await<T>) {
    return operator co_await(static_cast<T&&>(t));
  } else {
    return static_cast<T&&>(t);
  }
}

} // namespace cuawait::detail

namespace cuawait::concepts {

//! Anything `co_await` accepts in a coroutine whose promise has no `await_transform`.
template <class T>
concept awaitable = requires(T&& t) {
  { detail::get_awaiter(static_cast<T&&>(t)) } -> awaiter;
};

} // namespace cuawait::concepts

namespace cuawait {

//! The type `co_await std::declval<T>()` produces.
template <concepts::awaitable T>
using await_result_t = decltype(detail::get_awaiter(std::declval<T>()).await_resume());

} // namespace cuawait
