// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The unsynchronised queues behind `thread_pool` and `run_loop`: a growable FIFO ring of
//! coroutine handles, and one such ring per priority. Callers hold their own lock.

#include "cuawait/executor.hpp"

#include <coroutine>
#include <cstddef>
#include <memory>
#include <utility>

namespace cuawait::detail {

//! A FIFO of coroutine handles in a power-of-two ring that doubles when full. Not
//! thread-safe. Destroying it does not destroy the coroutines it still holds.
class handle_ring {
public:
  [[nodiscard]] bool empty() const noexcept { return m_size == 0; }
  [[nodiscard]] std::size_t size() const noexcept { return m_size; }

  //! Appends `h`. @throws std::bad_alloc when the ring has to grow and cannot.
  void push_back(std::coroutine_handle<> h) {
    if (m_size == m_capacity) {
      grow();
    }
    m_buffer[(m_head + m_size) & (m_capacity - 1)] = h;
    ++m_size;
  }

  //! Removes and returns the oldest handle. Precondition: `!empty()`.
  std::coroutine_handle<> pop_front() noexcept {
    const std::coroutine_handle<> h = m_buffer[m_head];
    m_head = (m_head + 1) & (m_capacity - 1);
    --m_size;
    return h;
  }

private:
  void grow() {
    const std::size_t capacity = m_capacity == 0 ? 64 : m_capacity * 2;
    auto buffer = std::make_unique<std::coroutine_handle<>[]>(capacity);
    for (std::size_t i = 0; i < m_size; ++i) {
      buffer[i] = m_buffer[(m_head + i) & (m_capacity - 1)];
    }
    m_buffer = std::move(buffer);
    m_capacity = capacity;
    m_head = 0;
  }

  std::unique_ptr<std::coroutine_handle<>[]> m_buffer;
  std::size_t m_capacity = 0;
  std::size_t m_head = 0;
  std::size_t m_size = 0;
};

//! One FIFO per priority; `pop()` takes the oldest handle of the highest priority present.
class priority_rings {
public:
  [[nodiscard]] bool empty() const noexcept { return m_mask == 0; }

  //! Bit `p` is set while priority `p` has queued work; 0 when empty.
  [[nodiscard]] unsigned mask() const noexcept { return m_mask; }

  [[nodiscard]] std::size_t size() const noexcept {
    std::size_t n = 0;
    for (const handle_ring& r : m_rings) {
      n += r.size();
    }
    return n;
  }

  //! @throws std::bad_alloc when a ring has to grow and cannot.
  void push(std::coroutine_handle<> h, priority p) {
    const auto i = static_cast<unsigned>(p);
    m_rings[i].push_back(h);
    m_mask |= 1U << i;
  }

  //! Removes the oldest handle of the highest queued priority. Precondition: `!empty()`.
  std::pair<std::coroutine_handle<>, priority> pop() noexcept {
    const unsigned i = top_priority_index(m_mask);
    const std::coroutine_handle<> h = m_rings[i].pop_front();
    if (m_rings[i].empty()) {
      m_mask &= ~(1U << i);
    }
    return {h, static_cast<priority>(i)};
  }

  //! The index of the highest priority set in `mask`. Precondition: `mask != 0`.
  static unsigned top_priority_index(unsigned mask) noexcept {
    return static_cast<unsigned>(31 - __builtin_clz(mask));
  }

private:
  handle_ring m_rings[priority_count];
  unsigned m_mask = 0;
};

} // namespace cuawait::detail
