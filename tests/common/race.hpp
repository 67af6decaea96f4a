// SPDX-License-Identifier: Apache-2.0
#pragma once

// Helpers that start two sides of a race at the same moment: `spin_gate`, and
// `race_stop_request`, which requests a stop on another thread while the test thread does
// whatever should compete with it.

#include <atomic>
#include <stop_token>
#include <thread>

namespace cuawait::test {

//! Lets two threads enter a race at the same moment. A blocking barrier (std::latch) lets
//! the last arriver run ahead while the other is still being woken, which makes one side of
//! a race win almost every time; spinning keeps both sides hot.
//! (A synchronisation point, not a delay: nothing waits for time to pass.)
class spin_gate {
public:
  void arrive_and_wait() noexcept {
    m_arrived.fetch_add(1, std::memory_order_acq_rel);
    for (int spins = 0; m_arrived.load(std::memory_order_acquire) < 2; ++spins) {
      if (spins > 4096) {
        std::this_thread::yield(); // oversubscribed machine: let the other side run
      }
    }
  }

private:
  std::atomic<int> m_arrived{0};
};

//! Calls `stop.request_stop()` on a new thread and `here()` on the calling thread, both
//! released by one spin_gate, and returns once both have finished. A fatal gtest failure
//! inside `here` ends only `here`: wrap the call in ASSERT_NO_FATAL_FAILURE to end the test.
template <class F>
void race_stop_request(std::stop_source& stop, F&& here) {
  spin_gate go;
  std::thread stopper([&] {
    go.arrive_and_wait();
    stop.request_stop();
  });
  go.arrive_and_wait();
  static_cast<F&&>(here)();
  stopper.join();
}

} // namespace cuawait::test
