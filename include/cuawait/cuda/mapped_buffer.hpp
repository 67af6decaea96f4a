// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `mapped_buffer<T>`: zero-copy memory, one page-locked host allocation mapped into the
//! device's address space (`cudaHostAlloc` with `cudaHostAllocMapped`). Kernels read and
//! write it over the bus through `device_data()`; the host uses `host_data()`. For flags,
//! small results and host<->kernel signalling, not for bulk data.
//!
//! The release rule: `cudaFreeHost` does not wait for kernels that use the memory. Await
//! (or synchronize) every piece of GPU work that touches the buffer before it dies, or
//! release it with `reset_after(stream)`, which frees it once the stream's work so far has
//! finished. Not pooled: creating one is slow (milliseconds for large sizes); keep them for
//! long. The free itself (`cudaFreeHost`, which may wait for the device) runs on the release
//! thread of the calling thread's device context when it has one, so destroying a buffer
//! never blocks a coroutine's thread.

#include "cuawait/cuda/error.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <span>
#include <type_traits>
#include <utility>

namespace cuawait::cuda {

namespace detail {
//! Allocates `count * element` mapped bytes (zeroed); sets `device` to the device pointer.
//! @throws cuda_error naming the size; std::length_error on overflow.
[[nodiscard]] void* mapped_allocate(std::size_t count, std::size_t element, void*& device);
//! `cudaFreeHost` on the release thread (or here without a context); never throws.
void mapped_free(void* host) noexcept;
//! The same, once the work enqueued on `s` so far has finished; never throws.
void mapped_free_after(void* host, cudaStream_t s) noexcept;
} // namespace detail

//! Zero-copy memory for `count` objects of `T` (trivially copyable; zero-initialized).
//! Move-only; the destructor never throws. Host accesses racing with a kernel need atomics
//! or volatile accesses on both sides (e.g. `std::atomic_ref` on the host).
template <class T>
class mapped_buffer {
  static_assert(std::is_trivially_copyable_v<T>, "mapped_buffer<T> needs a trivially copyable T");

public:
  using value_type = T;

  //! An empty buffer.
  mapped_buffer() noexcept = default;
  //! `count` zeroed elements mapped for the current device.
  //! @throws cuda_error naming the size; std::length_error
  explicit mapped_buffer(std::size_t count)
      : m_host(static_cast<T*>(detail::mapped_allocate(count, sizeof(T), m_device_raw))),
        m_size(count) {}

  mapped_buffer(mapped_buffer&& other) noexcept
      : m_device_raw(std::exchange(other.m_device_raw, nullptr)),
        m_host(std::exchange(other.m_host, nullptr)), m_size(std::exchange(other.m_size, 0)) {}
  mapped_buffer& operator=(mapped_buffer&& other) noexcept {
    if (this != &other) {
      reset();
      m_device_raw = std::exchange(other.m_device_raw, nullptr);
      m_host = std::exchange(other.m_host, nullptr);
      m_size = std::exchange(other.m_size, 0);
    }
    return *this;
  }
  mapped_buffer(const mapped_buffer&) = delete;
  mapped_buffer& operator=(const mapped_buffer&) = delete;
  //! Frees the memory (see the release rule). Never throws.
  ~mapped_buffer() { reset(); }

  //! Host pointer to the first element.
  [[nodiscard]] T* host_data() const noexcept { return m_host; }
  //! Device pointer to the same memory, for kernels and copies.
  [[nodiscard]] T* device_data() const noexcept { return static_cast<T*>(m_device_raw); }
  //! The host pointer; with `size()`, makes the buffer a host range for copies.
  [[nodiscard]] T* data() const noexcept { return m_host; }
  //! Number of elements.
  [[nodiscard]] std::size_t size() const noexcept { return m_size; }
  //! Number of bytes.
  [[nodiscard]] std::size_t size_bytes() const noexcept { return m_size * sizeof(T); }
  //! True when the buffer holds no elements.
  [[nodiscard]] bool empty() const noexcept { return m_size == 0; }
  //! The elements, on the host.
  [[nodiscard]] std::span<T> host_span() const noexcept { return {m_host, m_size}; }
  //! The elements, as device memory.
  [[nodiscard]] std::span<T> device_span() const noexcept { return {device_data(), m_size}; }
  [[nodiscard]] T& operator[](std::size_t i) const noexcept { return m_host[i]; }

  //! Frees now (see the release rule); the buffer becomes empty.
  void reset() noexcept {
    if (m_host != nullptr) {
      detail::mapped_free(m_host);
    }
    forget();
  }
  //! Frees once the work enqueued on `s` so far has finished, without waiting here; the
  //! buffer becomes empty at once. Work on other streams that uses it must be joined into
  //! `s` first (`s.wait(other)`).
  void reset_after(cudaStream_t s) noexcept {
    if (m_host != nullptr) {
      detail::mapped_free_after(m_host, s);
    }
    forget();
  }

private:
  void forget() noexcept {
    m_host = nullptr;
    m_device_raw = nullptr;
    m_size = 0;
  }

  void* m_device_raw = nullptr; // declared first: the host member's initializer sets it
  T* m_host = nullptr;
  std::size_t m_size = 0;
};

} // namespace cuawait::cuda
