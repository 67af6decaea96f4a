// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! What the completion reactor counts, and the tracing hooks it calls. Reading statistics
//! is allowed at any time from any thread; hooks cost one predictable branch when unset.

#include "cuawait/detail/reactor_node.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace cuawait {

//! Waits pending on one lane (a CUDA stream), as seen at the snapshot.
struct lane_pending {
  const void* lane_key = nullptr; //!< the lane (for CUDA: the `cudaStream_t`)
  std::size_t waits = 0;          //!< waits pending on it
};

//! Waits that suspended on one lane since the lane was created (a lane is forgotten when its
//! stream or event is destroyed, and its count with it).
struct lane_usage {
  const void* lane_key = nullptr; //!< the lane (for CUDA: the `cudaStream_t`)
  std::uint64_t waits = 0;        //!< waits that suspended on it
};

//! A snapshot of the reactor's counters.
struct reactor_stats {
  //! Buckets of the resume-latency histogram: bucket `i` counts latencies in
  //! [2^i, 2^(i+1)) ns (bucket 0 also holds 0 ns), from the moment the reactor saw the
  //! work finished to the moment the coroutine ran again.
  static constexpr std::size_t latency_buckets = 40;

  std::uint64_t submitted = 0;     //!< waits that suspended a coroutine
  std::uint64_t completions = 0;   //!< waits resolved (done or failed)
  std::uint64_t failures = 0;      //!< of which failed or context lost
  std::uint64_t withdrawn = 0;     //!< waits withdrawn because their coroutine was destroyed
  std::uint64_t cancelled = 0;     //!< waits cancelled by shutdown
  std::uint64_t stopped = 0;       //!< waits withdrawn by a stop request (`cancel`)
  std::uint64_t queries = 0;       //!< calls to `completion_source::query`/`probe`
  std::uint64_t sweeps = 0;        //!< polls over the active lanes
  std::uint64_t spin_ns = 0;       //!< time the reactor thread spent polling
  std::uint64_t parked_ns = 0;     //!< time the reactor thread spent parked
  std::uint64_t parks = 0;         //!< times it parked
  std::size_t pending = 0;         //!< waits pending now
  std::vector<lane_pending> lanes; //!< per lane, lanes with waits only

  // Load over the reactor's life (what `cuawait::doctor` reads). Maintained under the
  // reactor's lock at each submission and resolution, from clock reads it makes anyway.
  std::uint64_t ready = 0; //!< waits whose work had finished at `co_await` (no suspension)
  //! Completions found by a poll after the pollers had been told to stop spinning (nothing
  //! finished or started for `reactor_options::spin_window`): the work outlasted the spin
  //! window, the pollers parked, and unless the source notifies, the completion was seen up
  //! to `park_poll` late.
  std::uint64_t completions_after_spin = 0;
  std::uint64_t lanes_created = 0;    //!< lanes made (distinct streams/events awaited)
  std::size_t peak_pending = 0;       //!< most waits pending at once
  std::size_t peak_busy_lanes = 0;    //!< most lanes with waits pending at once
  std::uint64_t age_ns = 0;           //!< time since the reactor was constructed
  std::uint64_t busy_ns = 0;          //!< time with at least one wait pending
  std::uint64_t pending_wait_ns = 0;  //!< integral of the pending waits over time (wait-ns)
  std::uint64_t busy_lane_ns = 0;     //!< integral of the lanes with waits over time (lane-ns)
  std::vector<lane_usage> lane_waits; //!< every lane kept, with its count of waits
  std::array<std::uint64_t, latency_buckets> resume_latency{}; //!< histogram, see above

  //! The latency (ns, bucket lower bound) below which fraction `q` of resumptions fell.
  [[nodiscard]] std::uint64_t resume_latency_quantile(double q) const noexcept {
    std::uint64_t total = 0;
    for (const std::uint64_t c : resume_latency) {
      total += c;
    }
    std::uint64_t seen = 0;
    for (std::size_t i = 0; i < latency_buckets; ++i) {
      seen += resume_latency[i];
      if (total != 0 && static_cast<double>(seen) >= q * static_cast<double>(total)) {
        return i == 0 ? 0 : (std::uint64_t{1} << i);
      }
    }
    return 0;
  }
};

//! Tracing hooks. Each is optional; `context` is passed back untouched. They run on the
//! thread named below, some under the reactor's lock: keep them short, never call the
//! reactor from them.
struct reactor_trace {
  void* context = nullptr;
  //! A coroutine suspends on `w` (its operation, lane and token are set). Awaiting thread.
  void (*on_suspend)(void* context, const detail::wait_node& w) = nullptr;
  //! The reactor saw `w` finish (`w.status`) and hands it to `w.exec` (nullptr: resumes
  //! it inline on the reactor's thread). Reactor thread, under its lock; or, for a wait a
  //! stop request withdrew (`completion_reactor::cancel`, status `cancelled`), the thread
  //! that requested the stop, under the lock too.
  void (*on_complete)(void* context, const detail::wait_node& w) = nullptr;
  //! `w`'s coroutine runs again on the calling thread, executor `current_executor()`. Also
  //! called right after `on_suspend`, with `w.resolved_ns == 0`, when the work had already
  //! finished and the coroutine did not suspend at all.
  void (*on_resume)(void* context, const detail::wait_node& w) = nullptr;
  //! `w` was withdrawn because its coroutine was destroyed while waiting.
  void (*on_withdraw)(void* context, const detail::wait_node& w) = nullptr;
};

} // namespace cuawait
