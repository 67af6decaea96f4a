// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `spin_mutex`: a lock for sections of a few hundred nanoseconds that one thread takes
//! again and again (the reactor's idle poll) while others need it briefly (a coroutine
//! submitting its wait). A waiter spins (`cpu_relax`), then yields, and never sleeps in the
//! kernel, so it gets the lock within the holder's next gap instead of being woken some
//! microseconds later (with a sleeping mutex such a waiter can miss gap after gap). Not for
//! long sections. Meets the standard Lockable requirements (`std::lock_guard`).

#include "cuawait/detail/cpu_relax.hpp"

#include <atomic>
#include <mutex>
#include <thread>

namespace cuawait::detail {

class spin_mutex {
public:
  spin_mutex() noexcept = default;
  //! `sleeping`: behave as `std::mutex` instead (for comparisons).
  explicit spin_mutex(bool sleeping) noexcept : m_sleeping(sleeping) {}

  void lock() noexcept {
    if (m_sleeping) {
      m_plain.lock();
      return;
    }
    for (unsigned round = 0;; ++round) {
      if (!m_locked.load(std::memory_order_relaxed) &&
          !m_locked.exchange(true, std::memory_order_acquire)) {
        return;
      }
      if (round < spin_rounds) {
        cpu_relax();
      } else {
        std::this_thread::yield(); // the holder may have been descheduled
      }
    }
  }
  [[nodiscard]] bool try_lock() noexcept {
    if (m_sleeping) {
      return m_plain.try_lock();
    }
    return !m_locked.load(std::memory_order_relaxed) &&
           !m_locked.exchange(true, std::memory_order_acquire);
  }
  void unlock() noexcept {
    if (m_sleeping) {
      m_plain.unlock();
      return;
    }
    m_locked.store(false, std::memory_order_release);
  }

private:
  //! About 10-40 µs of `pause` before yielding.
  static constexpr unsigned spin_rounds = 256;
  std::atomic<bool> m_locked{false};
  bool m_sleeping = false;
  std::mutex m_plain;
};

} // namespace cuawait::detail
