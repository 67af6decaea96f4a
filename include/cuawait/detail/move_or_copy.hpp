// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Taking a result out of a promise when its type may be copy-only (a deleted move
//! constructor beside a copy constructor): such a type is copied where others are moved.

#include <type_traits>
#include <utility>

namespace cuawait::detail {

//! `std::move(x)`, or `x` itself (an lvalue) when `T` cannot be move-constructed, so that
//! what is built from it copies instead of naming the deleted move constructor.
template <class T>
constexpr auto&& move_or_copy(T& x) noexcept {
  if constexpr (std::is_move_constructible_v<T>) {
    return std::move(x);
  } else {
    return x;
  }
}

//! What an rvalue await of a stored `T` yields: `T&&`, or a copy of a copy-only `T` (a
//! reference would let `T x = co_await ...` name the deleted move constructor).
template <class T>
using moved_result_t = std::conditional_t<std::is_move_constructible_v<T>, T&&, T>;

} // namespace cuawait::detail
