// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The wrapper coroutine `when_all_ready` puts around each child: a `when_all_task` whose
//! result is the child's outcome, a `result<R, std::exception_ptr>`, so that no child ever
//! counts as failed and `when_all`'s awaitables deliver every outcome as a value.

#include "cuawait/detail/when_all_result.hpp"
#include "cuawait/detail/when_all_task.hpp"
#include "cuawait/result.hpp"

#include <exception>
#include <type_traits>

namespace cuawait::detail {

//! A child's outcome: its result (a reference as `std::reference_wrapper`, `void` as
//! `result<void>`) or the exception it threw.
template <class R>
using ready_outcome_t = result<vector_element_t<R>, std::exception_ptr>;

//! As `make_when_all_task`, but catching: the wrapper returns the child's outcome.
template <class R, class State, class A>
when_all_task<ready_outcome_t<R>, State> make_when_all_ready_task(A awaitable) {
  try {
    if constexpr (std::is_void_v<R>) {
      co_await static_cast<A&&>(awaitable);
      co_return ready_outcome_t<R>{};
    } else {
      co_return ready_outcome_t<R>(co_await static_cast<A&&>(awaitable));
    }
  } catch (...) {
    co_return ready_outcome_t<R>(error_tag, std::current_exception());
  }
}

} // namespace cuawait::detail
