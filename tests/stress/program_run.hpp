// SPDX-License-Identifier: Apache-2.0
#pragma once

// Running a random program (program.hpp) on a fresh thread_pool and timer_service.

#include "program.hpp"

#include <string>
#include <vector>

namespace cuawait::stress {

//! Runs `p` to its end through `sync_wait`, then checks it: the model's rules on every
//! node (check()), the invariants each synchronisation group saw while it ran (mutual
//! exclusion, permits in use, values conserved...), and that every coroutine frame,
//! exception and channel value was destroyed. Returns every violation (empty: passed).
[[nodiscard]] std::vector<std::string> run_and_check(const program& p);

} // namespace cuawait::stress
