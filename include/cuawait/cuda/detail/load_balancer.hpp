// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `load_balancer`: picks the least-loaded of a fixed number of slots (devices, for
//! `cuda::device_scheduler`) by counting what is in flight on each. CUDA-free, so its
//! balancing is tested on the CPU. Thread-safe and lock-free.

#include <atomic>
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <utility>

namespace cuawait::cuda::detail {

//! Counts the jobs in flight and done per slot and hands out the least-loaded slot.
//!
//! `acquire()` scans every slot (from a starting point that rotates, so ties spread
//! evenly) and takes one of the least loaded. Two threads acquiring at the same moment
//! may both take the same slot: the balance is exact for one caller at a time and off by
//! at most the number of concurrent callers otherwise, which is all a scheduler of jobs
//! that last much longer than a scan needs.
class load_balancer {
public:
  //! An RAII claim on one slot: counted in flight until destroyed (then counted done).
  class token {
  public:
    token() noexcept = default;
    token(token&& other) noexcept
        : m_owner(std::exchange(other.m_owner, nullptr)), m_slot(other.m_slot) {}
    token& operator=(token&& other) noexcept {
      if (this != &other) {
        reset();
        m_owner = std::exchange(other.m_owner, nullptr);
        m_slot = other.m_slot;
      }
      return *this;
    }
    token(const token&) = delete;
    token& operator=(const token&) = delete;
    ~token() { reset(); }

    //! The slot claimed.
    [[nodiscard]] std::size_t slot() const noexcept { return m_slot; }
    //! True while the token holds a claim.
    [[nodiscard]] bool holds() const noexcept { return m_owner != nullptr; }
    //! Ends the claim now (the job is counted done).
    void reset() noexcept {
      if (m_owner != nullptr) {
        std::exchange(m_owner, nullptr)->release(m_slot);
      }
    }

  private:
    friend class load_balancer;
    token(load_balancer& owner, std::size_t slot) noexcept : m_owner(&owner), m_slot(slot) {}
    load_balancer* m_owner = nullptr;
    std::size_t m_slot = 0;
  };

  //! @throws std::invalid_argument for 0 slots.
  explicit load_balancer(std::size_t slots)
      : m_size(slots), m_slots(slots == 0 ? nullptr : std::make_unique<counters[]>(slots)) {
    if (slots == 0) {
      throw std::invalid_argument("cuawait::load_balancer: no slot to balance over");
    }
  }
  load_balancer(const load_balancer&) = delete;
  load_balancer& operator=(const load_balancer&) = delete;
  //! Every token must be gone by now.
  ~load_balancer() = default;

  //! Claims one of the slots with the fewest jobs in flight.
  [[nodiscard]] token acquire() noexcept {
    const std::size_t start = m_next.fetch_add(1, std::memory_order_relaxed) % m_size;
    std::size_t best = start;
    std::size_t best_load = load(start);
    for (std::size_t k = 1; k < m_size && best_load != 0; ++k) {
      const std::size_t i = (start + k) % m_size;
      if (const std::size_t l = load(i); l < best_load) {
        best = i;
        best_load = l;
      }
    }
    m_slots[best].in_flight.fetch_add(1, std::memory_order_relaxed);
    return token(*this, best);
  }

  //! Claims slot `i` whatever its load (a job that must run there).
  //! @throws std::out_of_range for `i >= size()`.
  [[nodiscard]] token acquire_slot(std::size_t i) {
    if (i >= m_size) {
      throw std::out_of_range("cuawait::load_balancer: no such slot");
    }
    m_slots[i].in_flight.fetch_add(1, std::memory_order_relaxed);
    return token(*this, i);
  }

  //! Number of slots.
  [[nodiscard]] std::size_t size() const noexcept { return m_size; }
  //! Jobs in flight on slot `i` now.
  [[nodiscard]] std::size_t load(std::size_t i) const noexcept {
    return m_slots[i].in_flight.load(std::memory_order_relaxed);
  }
  //! Jobs that finished on slot `i` so far.
  [[nodiscard]] std::size_t completed(std::size_t i) const noexcept {
    return m_slots[i].completed.load(std::memory_order_relaxed);
  }

private:
  struct alignas(64) counters { // one cache line each: slots are claimed from many threads
    std::atomic<std::size_t> in_flight{0};
    std::atomic<std::size_t> completed{0};
  };

  void release(std::size_t i) noexcept {
    m_slots[i].completed.fetch_add(1, std::memory_order_relaxed);
    m_slots[i].in_flight.fetch_sub(1, std::memory_order_relaxed);
  }

  std::size_t m_size;
  std::unique_ptr<counters[]> m_slots;
  std::atomic<std::size_t> m_next{0};
};

} // namespace cuawait::cuda::detail
