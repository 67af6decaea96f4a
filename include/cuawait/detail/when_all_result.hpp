// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! How a child's `co_await` result is stored by `when_all` / `when_any`, and what it
//! becomes in their results: `void` becomes `void_value`, references stay references.

#include "cuawait/detail/awaitable_traits.hpp"

#include <functional>
#include <type_traits>

namespace cuawait {

//! Stands for the result of a child whose `co_await` yields `void`, where a combinator must
//! put some value in a tuple or variant (`when_all(a, b)`, `when_any(a, b)`).
struct void_value {
  friend constexpr bool operator==(void_value, void_value) noexcept { return true; }
};

} // namespace cuawait

namespace cuawait::detail {

//! What a wrapper coroutine keeps of a child's result: an rvalue reference result is
//! taken by value (like `sync_wait`), everything else as is.
template <class R>
using child_result_t = std::conditional_t<std::is_rvalue_reference_v<R>, std::remove_cvref_t<R>, R>;

//! How a child's awaitable is held by its wrapper coroutine: an lvalue stays a reference
//! (the caller keeps it alive), an rvalue is moved into the wrapper's frame.
template <class A>
using child_param_t = std::conditional_t<std::is_lvalue_reference_v<A>, A, std::remove_cvref_t<A>>;

//! The result of a wrapper whose child is held as `child_param_t<A>`.
template <class A>
using wrapped_result_t = child_result_t<await_result_t<child_param_t<A>&&>>;

//! A child result as an element of a `std::tuple` (`void` -> `void_value`).
template <class R>
using tuple_element_t = std::conditional_t<std::is_void_v<R>, void_value, R>;

//! A child result as an alternative of a `std::variant` (which holds no references).
template <class R>
using variant_alternative_t =
    std::conditional_t<std::is_void_v<R>, void_value,
                       std::conditional_t<std::is_lvalue_reference_v<R>,
                                          std::reference_wrapper<std::remove_reference_t<R>>, R>>;

//! A child result as an element of a `std::vector` (references as `reference_wrapper`).
template <class R>
using vector_element_t = std::conditional_t<std::is_lvalue_reference_v<R>,
                                            std::reference_wrapper<std::remove_reference_t<R>>, R>;

} // namespace cuawait::detail
