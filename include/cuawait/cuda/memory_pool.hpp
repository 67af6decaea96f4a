// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `device_memory_pool`: an owning CUDA memory pool (`cudaMemPool_t`) for stream-ordered
//! device allocations (`device_buffer`). Its release threshold decides how much freed
//! memory the pool keeps when a stream synchronizes instead of returning it to the OS; the
//! default keeps everything, so steady-state allocation is a cheap reuse.

#include "cuawait/cuda/error.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <limits>

namespace cuawait::cuda {

//! How a `device_memory_pool` is created.
struct device_memory_pool_options {
  //! Device ordinal; -1 means the calling thread's current device.
  int device = -1;
  //! Bytes of freed memory the pool keeps across synchronizations
  //! (`cudaMemPoolAttrReleaseThreshold`). The default keeps all of it.
  std::uint64_t release_threshold = std::numeric_limits<std::uint64_t>::max();
};

//! An owning CUDA memory pool, move-only. Device memory from it is allocated and freed in
//! stream order (`cudaMallocFromPoolAsync` / `cudaFreeAsync`).
//!
//! Lifetime: destroying a pool with allocations outstanding is allowed; CUDA releases it
//! once they are freed. The destructor never throws.
class device_memory_pool {
public:
  //! Creates a pool on `options.device`.
  //! @throws cuda_error
  explicit device_memory_pool(device_memory_pool_options options = {});
  device_memory_pool(device_memory_pool&& other) noexcept
      : m_pool(other.m_pool), m_device(other.m_device) {
    other.m_pool = nullptr;
  }
  device_memory_pool& operator=(device_memory_pool&& other) noexcept;
  device_memory_pool(const device_memory_pool&) = delete;
  device_memory_pool& operator=(const device_memory_pool&) = delete;
  ~device_memory_pool();

  //! The pool of the calling thread's device context (`current_context().memory()`), the
  //! one a `device_buffer` uses when given none.
  //! @throws no_device_context when the thread has no context.
  [[nodiscard]] static device_memory_pool& current();

  //! The native handle.
  [[nodiscard]] cudaMemPool_t get() const noexcept { return m_pool; }
  //! The device the pool allocates on.
  [[nodiscard]] int device() const noexcept { return m_device; }

  //! Sets the bytes of freed memory kept across synchronizations.
  //! @throws cuda_error
  void set_release_threshold(std::uint64_t bytes);
  //! Bytes the pool holds from the OS now (`cudaMemPoolAttrReservedMemCurrent`).
  //! @throws cuda_error
  [[nodiscard]] std::uint64_t reserved_bytes() const;
  //! Bytes handed out and not yet freed (`cudaMemPoolAttrUsedMemCurrent`).
  //! @throws cuda_error
  [[nodiscard]] std::uint64_t used_bytes() const;
  //! Returns freed memory to the OS until at most `keep_bytes` stay reserved
  //! (`cudaMemPoolTrimTo`); memory in use is unaffected.
  //! @throws cuda_error
  void trim_to(std::size_t keep_bytes);

private:
  cudaMemPool_t m_pool = nullptr;
  int m_device = 0;
};

} // namespace cuawait::cuda
