// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Growable raw CUDA allocations for the hand-written sync and threads modes (the
//! baseline deliberately uses plain cudaMalloc / cudaMallocHost, not cuawait's buffers).

#include <cuawait/cuda/error.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>

namespace cuawait::images::gpu {

//! Device (`pinned == false`) or pinned host memory of at least `size()` bytes, grown on
//! demand (the old contents are dropped). Move-free; frees on destruction.
class raw_buffer {
public:
  explicit raw_buffer(bool pinned) noexcept : m_pinned(pinned) {}
  raw_buffer(const raw_buffer&) = delete;
  raw_buffer& operator=(const raw_buffer&) = delete;
  ~raw_buffer() { release(); }

  //! Makes the buffer at least `bytes` long and returns it.
  //! @throws cuawait::cuda::cuda_error
  void* reserve(std::size_t bytes) {
    if (bytes > m_size) {
      release();
      if (m_pinned) {
        CUAWAIT_CUDA_CHECK("pinned allocation", cudaMallocHost(&m_ptr, bytes));
      } else {
        CUAWAIT_CUDA_CHECK("device allocation", cudaMalloc(&m_ptr, bytes));
      }
      m_size = bytes;
    }
    return m_ptr;
  }

  //! Typed view of the start of the buffer.
  template <class T>
  [[nodiscard]] T* as() const noexcept {
    return static_cast<T*>(m_ptr);
  }

private:
  void release() noexcept {
    if (m_ptr != nullptr) {
      cuawait::cuda::check_noexcept("buffer free", m_pinned ? cudaFreeHost(m_ptr) : cudaFree(m_ptr),
                                    m_pinned ? "cudaFreeHost" : "cudaFree");
    }
    m_ptr = nullptr;
    m_size = 0;
  }

  bool m_pinned;
  void* m_ptr = nullptr;
  std::size_t m_size = 0;
};

} // namespace cuawait::images::gpu
