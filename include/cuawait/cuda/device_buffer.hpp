// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `device_buffer<T>`: device memory allocated and freed in stream order through a CUDA
//! memory pool (`cudaMallocFromPoolAsync` / `cudaFreeAsync`).
//!
//! The release rule: the memory is freed with `cudaFreeAsync` on the buffer's stream, so the
//! free is ordered after all work enqueued on that stream before the buffer was destroyed;
//! destroying a buffer never waits and never frees memory under that work. Work on OTHER
//! streams is not ordered by itself: before the buffer dies, either make its stream wait for
//! that work (an event and a cross-stream wait), or call `free_after(other)`, which does that
//! join for you at release time. `set_stream(s)` moves the release to `s` without adding any
//! order.

// stream.hpp first: it must be parsed before any header opens cuawait::cuda::detail (its
// unqualified detail:: names mean cuawait::detail).
#include "cuawait/cuda/stream.hpp"

#include "cuawait/cuda/detail/release_order.hpp"
#include "cuawait/cuda/memory_pool.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <limits>
#include <span>
#include <stdexcept>
#include <type_traits>
#include <utility>

namespace cuawait::cuda {

namespace detail {
//! `bytes` from `pool` in stream order on `s`; nullptr for 0 bytes.
//! @throws cuda_error "device_buffer: allocate N bytes (cudaMallocFromPoolAsync): ..."
[[nodiscard]] void* device_allocate(std::size_t bytes, cudaStream_t s, cudaMemPool_t pool);
//! Joins `order`'s extra streams, then `cudaFreeAsync(p, order.primary())`. Never throws.
void device_free(void* p, release_order& order) noexcept;
//! `count * element` or throws std::length_error naming `what`.
[[nodiscard]] std::size_t checked_bytes(std::size_t count, std::size_t element, const char* what);
} // namespace detail

//! Device memory for `count` objects of `T` (trivially copyable; left uninitialized), owned
//! in stream order. Move-only; the destructor never throws and never blocks.
//! Satisfies the "contiguous range" shape copies take (`data()`, `size()`); the pointer is a
//! device pointer: never dereference it on the host.
template <class T>
class device_buffer {
  static_assert(std::is_trivially_copyable_v<T>, "device_buffer<T> needs a trivially copyable T");

public:
  using value_type = T;

  //! An empty buffer (no memory, no stream).
  device_buffer() noexcept = default;

  //! Allocates `count` elements in stream order on `s` from the current device's default
  //! cuawait pool (`device_memory_pool::current()`). The memory may be used by
  //! work enqueued on `s` right away; other streams must first be ordered after `s`.
  //! @throws cuda_error naming the size (out of memory, invalid stream...);
  //!   std::length_error when the byte count overflows.
  device_buffer(std::size_t count, stream_ref s)
      : device_buffer(count, s, device_memory_pool::current()) {}

  //! As above, from `pool` (which must outlive the buffer's release).
  device_buffer(std::size_t count, stream_ref s, device_memory_pool& pool)
      : m_data(static_cast<T*>(detail::device_allocate(
            detail::checked_bytes(count, sizeof(T), "device_buffer"), s.get(), pool.get()))),
        m_size(count), m_order(s.get()) {}

  device_buffer(device_buffer&& other) noexcept
      : m_data(std::exchange(other.m_data, nullptr)), m_size(std::exchange(other.m_size, 0)),
        m_order(other.m_order) {}
  device_buffer& operator=(device_buffer&& other) noexcept {
    if (this != &other) {
      reset();
      m_data = std::exchange(other.m_data, nullptr);
      m_size = std::exchange(other.m_size, 0);
      m_order = other.m_order;
    }
    return *this;
  }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  //! Frees in stream order (see the file comment). Never throws.
  ~device_buffer() { reset(); }

  //! Device pointer to the first element (nullptr when empty).
  [[nodiscard]] T* data() const noexcept { return m_data; }
  //! Number of elements.
  [[nodiscard]] std::size_t size() const noexcept { return m_size; }
  //! Number of bytes.
  [[nodiscard]] std::size_t size_bytes() const noexcept { return m_size * sizeof(T); }
  //! True when the buffer holds no elements.
  [[nodiscard]] bool empty() const noexcept { return m_size == 0; }
  //! The elements as a span of device memory (for copies and kernel arguments).
  [[nodiscard]] std::span<T> span() const noexcept { return {m_data, m_size}; }
  //! The first `count` elements from `offset` on, as a span of device memory.
  //! @throws std::out_of_range when the range exceeds the buffer.
  [[nodiscard]] std::span<T> subspan(std::size_t offset, std::size_t count) const {
    if (offset > m_size || count > m_size - offset) {
      throw std::out_of_range("device_buffer::subspan: range beyond the buffer");
    }
    return {m_data + offset, count};
  }

  //! The stream the memory is freed on.
  [[nodiscard]] stream_ref stream() const noexcept { return stream_ref(m_order.primary()); }

  //! Frees on `s` from now on. Adds no order: the user makes sure that work on the old
  //! stream is done, or ordered before the end of `s`'s work, when the buffer dies.
  //! @throws cuda_error for a moved-from stream or lease (the buffer is unchanged).
  void set_stream(stream_ref s) { m_order.set_primary(s.get()); }

  //! Makes the release also follow all work enqueued on `s` before the buffer dies (an
  //! event on `s` and a wait by the buffer's stream, at release time). For buffers used by
  //! kernels or copies on several streams.
  //! @throws std::length_error beyond 3 such streams.
  void free_after(stream_ref s) { m_order.add(s.get()); }

  //! Frees now, in stream order, and leaves the buffer empty (its stream is kept).
  void reset() noexcept {
    if (m_data != nullptr) {
      detail::device_free(m_data, m_order);
      m_data = nullptr;
    }
    m_size = 0;
  }

  //! Gives up ownership: the caller frees the pointer (cudaFreeAsync) itself.
  [[nodiscard]] T* release() noexcept {
    m_size = 0;
    return std::exchange(m_data, nullptr);
  }

private:
  T* m_data = nullptr;
  std::size_t m_size = 0;
  detail::release_order m_order;
};

} // namespace cuawait::cuda
