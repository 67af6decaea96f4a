// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `pinned_buffer<T>`: page-locked host memory from a `pinned_pool` (by default the one of
//! the calling thread's device context, `pinned_pool::current()`), for fast asynchronous
//! copies.
//!
//! The release rule: a buffer that has a stream (given at construction, `set_stream` or
//! `free_after`) returns its memory to the pool fenced by an event recorded on that stream
//! when it dies; the pool hands the memory out again only after the event completes, so a
//! copy still in flight is never overwritten. Work on other streams is joined with
//! `free_after(other)`. A buffer WITHOUT a stream returns its memory for immediate reuse:
//! the user must have awaited every copy that uses it before it dies.

// stream.hpp first: it must be parsed before any header opens cuawait::cuda::detail (its
// unqualified detail:: names mean cuawait::detail).
#include "cuawait/cuda/stream.hpp"

#include "cuawait/cuda/detail/release_order.hpp"
#include "cuawait/cuda/pinned_pool.hpp"

#include <cstddef>
#include <span>
#include <stdexcept>
#include <type_traits>
#include <utility>

namespace cuawait::cuda {

namespace detail {
//! `count * element` or throws std::length_error naming `what` (defined in
//! src/cuda/device_buffer.cpp).
[[nodiscard]] std::size_t checked_bytes(std::size_t count, std::size_t element, const char* what);
//! Returns `b` to `pool` after joining `order` (fenced on its primary stream if any).
void pinned_release(pinned_pool& pool, pinned_pool::block b, release_order& order) noexcept;
} // namespace detail

//! Pinned host memory for `count` objects of `T` (trivially copyable; left uninitialized).
//! Move-only; a contiguous host range (`data()`, `size()`, iterators, `operator[]`). The
//! destructor never throws and never blocks.
template <class T>
class pinned_buffer {
  static_assert(std::is_trivially_copyable_v<T>, "pinned_buffer<T> needs a trivially copyable T");

public:
  using value_type = T;
  using iterator = T*;
  using const_iterator = const T*;

  //! An empty buffer.
  pinned_buffer() noexcept = default;

  //! `count` elements from `pool`, without a stream (see the release rule).
  //! @throws cuda_error naming the size when pinned memory runs out; std::length_error
  explicit pinned_buffer(std::size_t count, pinned_pool& pool = pinned_pool::current())
      : m_pool(&pool), m_block(allocate(pool, count)), m_size(count) {}

  //! `count` elements from `pool`, released in order after the work of `s`.
  //! @throws cuda_error naming the size when pinned memory runs out; std::length_error
  pinned_buffer(std::size_t count, stream_ref s, pinned_pool& pool = pinned_pool::current())
      : m_pool(&pool), m_block(allocate(pool, count)), m_size(count), m_order(s.get()) {}

  pinned_buffer(pinned_buffer&& other) noexcept
      : m_pool(other.m_pool), m_block(std::exchange(other.m_block, {})),
        m_size(std::exchange(other.m_size, 0)), m_order(other.m_order) {}
  pinned_buffer& operator=(pinned_buffer&& other) noexcept {
    if (this != &other) {
      reset();
      m_pool = other.m_pool;
      m_block = std::exchange(other.m_block, {});
      m_size = std::exchange(other.m_size, 0);
      m_order = other.m_order;
    }
    return *this;
  }
  pinned_buffer(const pinned_buffer&) = delete;
  pinned_buffer& operator=(const pinned_buffer&) = delete;
  //! Returns the memory to the pool under the release rule. Never throws.
  ~pinned_buffer() { reset(); }

  [[nodiscard]] T* data() noexcept { return static_cast<T*>(m_block.ptr); }
  [[nodiscard]] const T* data() const noexcept { return static_cast<const T*>(m_block.ptr); }
  //! Number of elements.
  [[nodiscard]] std::size_t size() const noexcept { return m_size; }
  //! Number of bytes.
  [[nodiscard]] std::size_t size_bytes() const noexcept { return m_size * sizeof(T); }
  //! True when the buffer holds no elements.
  [[nodiscard]] bool empty() const noexcept { return m_size == 0; }
  [[nodiscard]] T& operator[](std::size_t i) noexcept { return data()[i]; }
  [[nodiscard]] const T& operator[](std::size_t i) const noexcept { return data()[i]; }
  [[nodiscard]] iterator begin() noexcept { return data(); }
  [[nodiscard]] iterator end() noexcept { return data() + m_size; }
  [[nodiscard]] const_iterator begin() const noexcept { return data(); }
  [[nodiscard]] const_iterator end() const noexcept { return data() + m_size; }
  //! The elements as a span.
  [[nodiscard]] std::span<T> span() noexcept { return {data(), m_size}; }
  [[nodiscard]] std::span<const T> span() const noexcept { return {data(), m_size}; }

  //! True when the release is fenced on a stream.
  [[nodiscard]] bool has_stream() const noexcept { return m_order.has_primary(); }
  //! The stream the release is fenced on (the legacy default stream when none).
  [[nodiscard]] stream_ref stream() const noexcept { return stream_ref(m_order.primary()); }
  //! Fences the release on `s` from now on (adds no order between the old stream and `s`).
  //! @throws cuda_error for a moved-from stream or lease (the buffer is unchanged).
  void set_stream(stream_ref s) { m_order.set_primary(s.get()); }
  //! Makes the release also follow the work enqueued on `s` before the buffer dies; the
  //! first such stream of a buffer without one becomes its stream.
  //! @throws std::length_error beyond 3 extra streams.
  void free_after(stream_ref s) { m_order.add(s.get()); }

  //! Returns the memory now under the release rule; the buffer becomes empty.
  void reset() noexcept {
    if (m_block.ptr != nullptr) {
      detail::pinned_release(*m_pool, std::exchange(m_block, {}), m_order);
    }
    m_size = 0;
  }

private:
  static pinned_pool::block allocate(pinned_pool& pool, std::size_t count) {
    const std::size_t bytes = detail::checked_bytes(count, sizeof(T), "pinned_buffer");
    return bytes == 0 ? pinned_pool::block{} : pool.allocate(bytes);
  }

  pinned_pool* m_pool = nullptr;
  pinned_pool::block m_block{};
  std::size_t m_size = 0;
  detail::release_order m_order;
};

} // namespace cuawait::cuda
