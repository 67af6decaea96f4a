// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Fixed-capacity FIFO of values for `channel<T>`: one allocation at construction, values
//! moved in and out, never copied.

#include <cstddef>
#include <memory>
#include <optional>
#include <utility>

namespace cuawait::detail {

//! Not thread-safe: the channel's mutex guards it. `T`'s move constructor must not throw.
template <class T>
class sync_ring_buffer {
public:
  //! A buffer for `capacity` values; capacity 0 holds nothing (a rendezvous channel).
  explicit sync_ring_buffer(std::size_t capacity)
      : m_slots(capacity == 0 ? nullptr : std::make_unique<std::optional<T>[]>(capacity)),
        m_capacity(capacity) {}

  [[nodiscard]] std::size_t size() const noexcept { return m_size; }
  [[nodiscard]] std::size_t capacity() const noexcept { return m_capacity; }
  [[nodiscard]] bool empty() const noexcept { return m_size == 0; }
  [[nodiscard]] bool full() const noexcept { return m_size == m_capacity; }

  //! Appends `value` (moved); the buffer must not be full.
  void push(T&& value) noexcept {
    m_slots[(m_head + m_size) % m_capacity].emplace(std::move(value));
    ++m_size;
  }

  //! Moves the oldest value into `out`; the buffer must not be empty.
  void pop_into(std::optional<T>& out) noexcept {
    std::optional<T>& slot = m_slots[m_head];
    out.emplace(std::move(*slot));
    slot.reset();
    m_head = (m_head + 1) % m_capacity;
    --m_size;
  }

private:
  std::unique_ptr<std::optional<T>[]> m_slots;
  std::size_t m_capacity;
  std::size_t m_head = 0;
  std::size_t m_size = 0;
};

} // namespace cuawait::detail
