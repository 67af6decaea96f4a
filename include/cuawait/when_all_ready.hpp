// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `when_all_ready`: await several awaitables at once and get every outcome, value or
//! exception, one per child, instead of the first exception.
//!
//! ```cpp
//! auto [a, b] = co_await cuawait::when_all_ready(load(x), load(y));
//! if (a) { use(*a); } else { log(a.error()); } // result<T, std::exception_ptr>
//! int v = b.value();                           // or rethrow b's exception here
//!
//! for (auto& r : co_await cuawait::when_all_ready(std::move(tasks))) { ... } // std::vector
//! ```

#include "cuawait/detail/awaitable_traits.hpp"
#include "cuawait/detail/when_all_awaitable.hpp"
#include "cuawait/detail/when_all_ready_task.hpp"
#include "cuawait/detail/when_all_result.hpp"
#include "cuawait/result.hpp"
#include "cuawait/when_all.hpp"

#include <exception>
#include <utility>

namespace cuawait {

//! The outcome of one `when_all_ready` child whose `co_await` yields `R`:
//! `result<R, std::exception_ptr>`, with a reference result held as
//! `std::reference_wrapper` and a `void` result as `result<void>`. `value()` returns the
//! value or rethrows the child's exception; `error()` is the `std::exception_ptr`.
template <class R>
using ready_result_t = detail::ready_outcome_t<R>;

//! Awaits all of `awaitables` concurrently, as `when_all` does (same start order, threads,
//! stop-token inheritance and lifetime rules), and yields a `std::tuple` of their outcomes
//! in argument order: one `ready_result_t<R>` per child, holding its result or the
//! exception it threw. The `co_await` itself does not throw what children throw.
//!
//! @throws std::bad_alloc only, when the wrappers cannot be allocated (at this call).
template <concepts::combinator_child... As>
[[nodiscard]] auto when_all_ready(As&&... awaitables) {
  return detail::when_all_tuple_awaitable<detail::ready_outcome_t<detail::wrapped_result_t<As>>...>(
      detail::make_when_all_ready_task<detail::wrapped_result_t<As>, detail::when_all_state,
                                       detail::child_param_t<As>>(
          static_cast<As&&>(awaitables))...);
}

//! Awaits every element of `range` concurrently and yields a `std::vector` of their
//! outcomes (`ready_result_t<R>`, also for `void` elements) in input order. An empty range
//! completes at once with an empty vector.
//!
//! @throws std::bad_alloc only: at this call when the wrappers cannot be allocated, from the
//!         `co_await` when the vector of outcomes cannot.
//! Lifetime: as `when_all(range)`.
template <class Range>
requires concepts::combinator_child_range<Range> &&(!concepts::combinator_child<Range>)
    [[nodiscard]] auto when_all_ready(Range&& range) {
  using child_result_t = detail::wrapped_result_t<detail::range_child_t<Range>>;
  using param_t = detail::child_param_t<detail::range_child_t<Range>>;
  using outcome_t = detail::ready_outcome_t<child_result_t>;
  return detail::when_all_range_awaitable<outcome_t>(
      detail::wrap_range_with<outcome_t, detail::when_all_state>(
          static_cast<Range&&>(range), [](auto&& child) {
            return detail::make_when_all_ready_task<child_result_t, detail::when_all_state,
                                                    param_t>(static_cast<decltype(child)&&>(child));
          }));
}

} // namespace cuawait
