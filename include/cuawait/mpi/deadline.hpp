// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `mpi::with_deadline`: an MPI operation bounded in time, reporting what really happened.
//!
//! ```cpp
//! if (auto st = co_await mpi::with_deadline(m.recv(buf, src, tag), 2s)) {
//!   use(buf, *st);                  // received (perhaps just as the deadline passed)
//! } else {
//!   peer_is_late();                 // cancelled: MPI never wrote into buf
//! }
//! ```
//!
//! Why not `when_any(m.recv(...), sleep_for(d))`: when the timer wins but the message was
//! being received as MPI_Cancel came, the receive completes normally and `when_any` drops
//! its result, reporting the timer. The message is in the buffer but the program believes
//! it never came. `with_deadline` reports the receive's own outcome instead.

#include "cuawait/cancellation.hpp"
#include "cuawait/mpi/request.hpp"
#include "cuawait/task.hpp"
#include "cuawait/timer.hpp"
#include "cuawait/when_all.hpp"

#include <mpi.h>

#include <chrono>
#include <concepts>
#include <optional>
#include <stop_token>

namespace cuawait::mpi {

//! Awaits `op`, asking it to stop (`MPI_Cancel`) at `deadline` or when the awaiting
//! coroutine is asked to stop. Yields its status, or nullopt when the cancellation took
//! effect (or the operation was never started). Resumes only once MPI has finished with
//! the operation, so its buffer is free then. The timer is `timer_service::current()`.
//! @throws mpi_error when the operation fails.
template <std::derived_from<request_awaiter> A>
task<std::optional<MPI_Status>> with_deadline(A op,
                                              std::chrono::steady_clock::time_point deadline) {
  std::stop_source op_stop;
  std::stop_source timer_stop;
  const std::stop_token outer = co_await get_stop_token();
  struct forward_stop {
    std::stop_source* to;
    void operator()() const noexcept { to->request_stop(); }
  };
  const std::stop_callback<forward_stop> from_outer(outer, forward_stop{&op_stop});
  op.set_stop_token(op_stop.get_token());

  auto run_op = [&]() -> task<std::optional<MPI_Status>> {
    std::optional<MPI_Status> result;
    try {
      result = co_await std::move(op);
    } catch (const operation_cancelled&) {
    } catch (...) {
      timer_stop.request_stop();
      throw;
    }
    timer_stop.request_stop();
    co_return result;
  };
  auto run_timer = [&]() -> task<void> {
    try {
      co_await sleep_until(deadline, timer_stop.get_token());
      op_stop.request_stop();
    } catch (const operation_cancelled&) { // the operation finished first
    }
  };
  auto [result, timer_done] = co_await when_all(run_op(), run_timer());
  (void)timer_done;
  co_return result;
}

//! `with_deadline(op, now + timeout)`.
template <std::derived_from<request_awaiter> A, class Rep, class Period>
task<std::optional<MPI_Status>> with_deadline(A op, std::chrono::duration<Rep, Period> timeout) {
  return with_deadline(std::move(op),
                       std::chrono::steady_clock::now() +
                           std::chrono::ceil<std::chrono::steady_clock::duration>(timeout));
}

} // namespace cuawait::mpi
