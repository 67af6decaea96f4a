// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `pinned_pool`: pooled page-locked host memory in size classes (four per doubling, at most
//! 20% slack), so that the hot path never calls `cudaHostAlloc` / `cudaFreeHost` (both are
//! slow, and `cudaFreeHost` synchronizes the device). Thread-safe, with statistics.
//!
//! The reuse rule: a block returned with a stream (`deallocate(b, s)`) gets an event
//! recorded on `s`, and is not handed out again until that event has completed, so a copy
//! still in flight from or into it is never overwritten by the next owner. A block returned
//! without a stream is reusable at once: the caller vouches that no GPU work uses it.

#include "cuawait/cuda/detail/size_class_pool.hpp"
#include "cuawait/cuda/stream.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <limits>
#include <mutex>
#include <vector>

namespace cuawait::cuda {

//! How a `pinned_pool` allocates and how much it keeps.
struct pinned_pool_options {
  //! Flags for `cudaHostAlloc`; portable by default (usable from every device).
  unsigned host_alloc_flags = cudaHostAllocPortable;
  //! Ready cached bytes beyond this go back to the OS (`cudaFreeHost`) when returned. On a
  //! thread with a device context the free runs on the context's release thread.
  std::size_t max_cached_bytes = std::numeric_limits<std::size_t>::max();
};

//! Counters of a pinned pool; see `cuawait::size_class_pool_stats`.
using pinned_pool_stats = cuawait::size_class_pool_stats;

namespace detail {
//! The CUDA backend of the pinned pool: `cudaHostAlloc`, `cudaFreeHost`, and events as
//! fences (recycled in a small cache, because creating one costs ~0.4 µs).
class pinned_backend {
public:
  using fence_type = cudaEvent_t;

  explicit pinned_backend(unsigned flags) noexcept : m_flags(flags) {}
  pinned_backend(pinned_backend&& other) noexcept;
  ~pinned_backend();

  //! @throws cuda_error "pinned_pool: allocate N bytes (cudaHostAlloc): ..."
  [[nodiscard]] void* allocate(std::size_t bytes);
  //! Hands the block to the release thread of the calling thread's context (`cudaFreeHost`
  //! there), or frees it here when there is none.
  void deallocate(void* p, std::size_t bytes) noexcept;
  //! Complete, or failed for good (a lost context runs nothing more).
  bool is_complete(fence_type& f) noexcept;
  void wait(fence_type& f) noexcept;
  void discard(fence_type& f) noexcept;

  //! An event recorded on `s`, or nullptr when recording failed.
  [[nodiscard]] fence_type record(cudaStream_t s) noexcept;

private:
  unsigned m_flags;
  std::mutex m_mutex;
  std::vector<cudaEvent_t> m_events; // idle events for reuse
};
} // namespace detail

//! A thread-safe pool of page-locked host memory. Move-only is not offered: buffers keep a
//! reference to their pool, which must outlive them.
class pinned_pool;
namespace detail {
class release_order;
void pinned_release(pinned_pool& pool,
                    cuawait::cuda::detail::size_class_pool<pinned_backend>::block b,
                    release_order& order) noexcept;
} // namespace detail

class pinned_pool {
public:
  //! A block of `bytes` capacity (the size class, >= the request).
  using block = cuawait::cuda::detail::size_class_pool<detail::pinned_backend>::block;

  explicit pinned_pool(pinned_pool_options options = {});
  pinned_pool(const pinned_pool&) = delete;
  pinned_pool& operator=(const pinned_pool&) = delete;
  //! Waits for the fences of returned blocks, then frees all cached memory.
  ~pinned_pool();

  //! The pool of the calling thread's device context (`current_context().pinned()`), the
  //! one `pinned_buffer` uses when given none.
  //! @throws no_device_context when the thread has no context.
  [[nodiscard]] static pinned_pool& current();

  //! At least `bytes` of pinned memory, from the cache when a block is ready.
  //! @throws cuda_error naming the size when `cudaHostAlloc` fails; the pool stays usable.
  [[nodiscard]] block allocate(std::size_t bytes);
  //! Returns `b` for immediate reuse: no GPU work may use it any more.
  void deallocate(block b) noexcept;
  //! Returns `b`, reused only after the work enqueued on `s` so far has completed.
  void deallocate(block b, stream_ref s) noexcept;

  //! Allocates ahead of use so that the next `count` requests of `bytes` each are served
  //! from the cache (cudaHostAlloc costs about 1 ms per 4 MiB: pay it before the timed or
  //! latency-sensitive part). Ready blocks of that size already cached count; the cache
  //! limit (`max_cached_bytes`) is respected. @returns the blocks allocated.
  //! @throws cuda_error naming the size when `cudaHostAlloc` fails; blocks allocated before
  //!         the failure stay cached.
  std::size_t reserve(std::size_t bytes, std::size_t count);
  //! Frees cached blocks that are ready (on a thread with a device context, the frees run on
  //! its release thread: this never blocks there). @returns the bytes freed.
  std::size_t trim() noexcept;
  //! The counters now (bytes held, in use, cached, fenced; allocations; reuses).
  [[nodiscard]] pinned_pool_stats stats() const noexcept;

private:
  friend void detail::pinned_release(pinned_pool& pool, block b,
                                     detail::release_order& order) noexcept;
  //! Frees `b` on the release thread once the device is idle: the last resort when the
  //! streams that may use it cannot be fenced.
  void release_after_device_idle(block b) noexcept;

  cuawait::cuda::detail::size_class_pool<detail::pinned_backend> m_pool;
};

} // namespace cuawait::cuda
