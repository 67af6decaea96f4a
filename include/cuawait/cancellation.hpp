// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Cooperative cancellation. Every waiting operation of the async primitives (`lock`,
//! `acquire`, `wait`, `send`, `receive`) has an overload taking a `std::stop_token`. When
//! stop is requested while the coroutine waits, it is removed from the primitive's queue
//! (it consumes no lock, permit or value) and resumes with `operation_cancelled` thrown
//! from the `co_await`. A token whose stop was requested before the `co_await` cancels it
//! at once, even if the primitive could have completed it.

#include <exception>

namespace cuawait {

//! Thrown from a `co_await` that ended because stop was requested on its token.
//! `what()` names the cancelled operation, e.g. "cuawait::async_mutex::lock cancelled".
class operation_cancelled : public std::exception {
public:
  //! `what` must outlive the exception (the library passes string literals).
  explicit operation_cancelled(const char* what = "cuawait: operation cancelled") noexcept
      : m_what(what) {}

  //! The cancelled operation.
  [[nodiscard]] const char* what() const noexcept override { return m_what; }

private:
  const char* m_what;
};

//! Thrown from `co_await with_timeout(...)` / `with_deadline(...)` (deadline.hpp) when the
//! deadline passed before the awaited operation finished. An `operation_cancelled`: the
//! operation was stopped, by the clock; catch this type to tell a timeout from other stops.
class operation_timed_out : public operation_cancelled {
public:
  //! `what` must outlive the exception (the library passes string literals).
  explicit operation_timed_out(const char* what = "cuawait: operation timed out") noexcept
      : operation_cancelled(what) {}
};

} // namespace cuawait
