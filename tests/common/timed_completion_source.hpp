// SPDX-License-Identifier: Apache-2.0
#pragma once

// A simulated GPU for CPU tests of whole programs: `timed_kernel` "launches" work of a given
// duration on a lane (a stream: work on one lane runs one after another, work on different
// lanes at once), and `timed_completion_source` reports it finished once its end time has
// passed. No thread completes anything: the reactor's pollers see the clock move on.

#include "cuawait/completion_reactor.hpp"
#include "cuawait/completion_source.hpp"

#include <algorithm>
#include <chrono>
#include <coroutine>
#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace cuawait::test {

class timed_completion_source final : public completion_source {
public:
  //! The steady clock in nanoseconds.
  static std::uint64_t now_ns() noexcept {
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          std::chrono::steady_clock::now().time_since_epoch())
                                          .count());
  }

  //! Enqueues work of `duration` on `lane`: it starts when the lane's earlier work ends (or
  //! now) and its end time is returned, the token of its wait.
  std::uint64_t launch(std::uintptr_t lane, std::chrono::nanoseconds duration) {
    const std::lock_guard lock(m_mutex);
    std::uint64_t& end = m_lane_end[lane];
    end = std::max(end, now_ns()) + static_cast<std::uint64_t>(duration.count());
    return end;
  }

  completion_status query(const detail::wait_node& w) noexcept override {
    return now_ns() >= w.token ? completion_status{completion_state::done, 0} : completion_status{};
  }

private:
  std::mutex m_mutex;
  std::unordered_map<std::uintptr_t, std::uint64_t> m_lane_end;
};

//! `co_await timed_kernel{reactor, source, lane, duration}`: launches simulated work and
//! suspends until the reactor sees it finished.
class timed_kernel {
public:
  timed_kernel(completion_reactor& r, timed_completion_source& source, std::uintptr_t lane,
               std::chrono::nanoseconds duration)
      : m_reactor(&r) {
    m_wait.node().lane_key = reinterpret_cast<const void*>(lane);
    m_wait.node().token = source.launch(lane, duration);
    m_wait.node().operation = "timed kernel";
  }
  bool await_ready() const noexcept { return false; }
  bool await_suspend(std::coroutine_handle<> h) noexcept { return m_wait.suspend(*m_reactor, h); }
  completion_status await_resume() noexcept { return m_wait.finish(); }

private:
  completion_reactor* m_reactor;
  detail::reactor_wait m_wait;
};

} // namespace cuawait::test
