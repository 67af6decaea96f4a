// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `device_memory_pool`: an owning CUDA memory pool (`cudaMemPool_t`) for stream-ordered
//! device allocations (`device_buffer`). Its release threshold decides how much freed
//! memory the pool keeps when a stream synchronizes instead of returning it to the OS; the
//! default keeps everything, so steady-state allocation is a cheap reuse.
//!
//! The pool is owned through `detail::unique_handle` like streams and events: a move leaves
//! the source moved-from, and using it (allocating from it, reading an attribute) throws
//! `cuda_error` "use of a moved-from cuda::device_memory_pool" before any CUDA call.

#include "cuawait/cuda/detail/unique_handle.hpp"
#include "cuawait/cuda/error.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>

namespace cuawait::cuda {

namespace detail {
//! The owner traits of `device_memory_pool` (see unique_handle.hpp).
struct memory_pool_traits : handle_holder_access {
  using handle_type = cudaMemPool_t;
  using base_type = handle_holder<cudaMemPool_t>;
  static cudaMemPool_t moved_from() noexcept { return sentinel_handle<cudaMemPool_t>(); }
  static bool is_moved_from(cudaMemPool_t p) noexcept { return is_sentinel_handle(p); }
  static void destroy(cudaMemPool_t p) noexcept {
    check_noexcept("device_memory_pool: destroy", cudaMemPoolDestroy(p), "cudaMemPoolDestroy");
  }
  [[noreturn]] static void throw_moved_from(cudaMemPool_t /*p*/, std::source_location where) {
    throw cuda_error::moved_from("cuda::device_memory_pool", where);
  }
};
} // namespace detail

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
class device_memory_pool : public detail::unique_handle<detail::memory_pool_traits> {
  using owner = detail::unique_handle<detail::memory_pool_traits>;

public:
  //! Creates a pool on `options.device`.
  //! @throws cuda_error
  explicit device_memory_pool(device_memory_pool_options options = {});
  //! Moves the pool; `other` is left moved-from (see the file comment).
  device_memory_pool(device_memory_pool&& other) noexcept = default;
  //! Destroys this pool, then takes `other`'s; `other` is left moved-from.
  device_memory_pool& operator=(device_memory_pool&& other) noexcept = default;
  ~device_memory_pool() = default;

  //! The pool of the calling thread's device context (`current_context().memory()`), the
  //! one a `device_buffer` uses when given none.
  //! @throws no_device_context when the thread has no context.
  [[nodiscard]] static device_memory_pool& current();

  //! The native handle.
  //! @throws cuda_error ("use of a moved-from cuda::device_memory_pool") when moved from.
  [[nodiscard]] cudaMemPool_t get() const { return checked_handle(); }
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
  //! Creates the pool on `device` (an ordinal) with CUDA's default threshold.
  device_memory_pool(std::in_place_t, int device);

  int m_device = 0;
};

} // namespace cuawait::cuda
