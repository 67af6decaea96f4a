// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The busy poll shared by `thread_pool` and `run_loop` (private to the library).

#include "cuawait/idle_source.hpp"

#include <chrono>
#include <cstdint>

namespace cuawait::detail {

//! How often an executor whose threads never run out of work still polls its idle source
//! once between two pieces of work: 50 us by default; `CUAWAIT_BUSY_POLL_US=N` sets it
//! (0: never, the rule before, for comparison). Throws `std::invalid_argument` naming the
//! variable when its value is not a number.
std::uint64_t busy_poll_period_ns();

//! The `idle_poller` of a busy poll: work is always waiting, so nothing inside the poll
//! spins on a wait.
inline bool busy_poll_interrupted(const void*) noexcept { return true; }
inline constexpr idle_poller busy_poller{&busy_poll_interrupted, nullptr, nullptr};

//! The steady clock in nanoseconds.
inline std::uint64_t steady_ns() noexcept {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

} // namespace cuawait::detail
