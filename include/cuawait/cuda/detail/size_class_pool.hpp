// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The CUDA-free core of the pinned host memory pool: size classes, per-class free lists and
//! "fenced" returns. A block given back with a fence (for pinned memory: a CUDA event
//! recorded on the stream that may still copy from or into it) is not handed out again until
//! the backend reports the fence complete. The backend is a template parameter so that CPU
//! tests drive the pool with fake memory and fake fences.

#include "cuawait/gpu_counters.hpp"
#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <mutex>
#include <utility>
#include <vector>

namespace cuawait::cuda::detail {

using cuawait::size_class_pool_stats;

//! Smallest size class, in bytes. Smaller requests are rounded up to it.
inline constexpr std::size_t size_class_min_bytes = 256;
//! Largest pooled size class (1 TiB); larger requests bypass the pool.
inline constexpr std::size_t size_class_max_bytes = std::size_t{1} << 40;
//! Size classes per doubling: 1.25, 1.5, 1.75 and 2 times a power of two, so a request
//! wastes at most 20% of its block.
inline constexpr unsigned size_classes_per_doubling = 4;
//! Fences not yet complete that one request checks at most before it allocates anew.
inline constexpr std::size_t fence_checks_per_request = 4;
//! Number of pooled size classes.
inline constexpr unsigned size_class_count =
    (std::bit_width(size_class_max_bytes) - std::bit_width(size_class_min_bytes)) *
        size_classes_per_doubling +
    1;

//! A size class: its index (`size_class_count` for "not pooled") and its block size.
struct size_class {
  unsigned index;
  std::size_t bytes;
};

//! The class a request of `bytes` is served from.
[[nodiscard]] constexpr size_class size_class_for(std::size_t bytes) noexcept {
  if (bytes <= size_class_min_bytes) {
    return {0, size_class_min_bytes};
  }
  if (bytes > size_class_max_bytes) {
    return {size_class_count, bytes};
  }
  // 2^k < bytes <= 2^(k+1); the classes in that interval are 2^k + step * {1, 2, 3, 4}.
  const unsigned k = static_cast<unsigned>(std::bit_width(bytes - 1)) - 1;
  const std::size_t base = std::size_t{1} << k;
  const std::size_t step = base / size_classes_per_doubling;
  const std::size_t sub = (bytes - base + step - 1) / step;
  const unsigned min_k = static_cast<unsigned>(std::bit_width(size_class_min_bytes)) - 1;
  return {static_cast<unsigned>((k - min_k) * size_classes_per_doubling + sub), base + sub * step};
}

//! A thread-safe pool of blocks in size classes over `Backend`, which provides:
//! - `void* allocate(std::size_t bytes)`: new memory, or throws;
//! - `void deallocate(void* p, std::size_t bytes) noexcept`;
//! - `using fence_type = ...;` plus `bool is_complete(fence_type&) noexcept`,
//!   `void wait(fence_type&) noexcept` (blocks until complete) and
//!   `void discard(fence_type&) noexcept` (called once per fence when the pool is done
//!   with it).
//! The backend's members are called concurrently from several threads.
//!
//! A fenced block becomes reusable when its fence completes. Fences are checked only when a
//! class has no ready block, oldest first, with at most `fence_checks_per_request` misses,
//! so a request costs O(1) fence checks amortized however many blocks are fenced.
template <class Backend>
class size_class_pool {
public:
  using fence_type = typename Backend::fence_type;

  //! A block: its address and its capacity (the class size, >= the requested bytes).
  struct block {
    void* ptr = nullptr;
    std::size_t bytes = 0;
  };

  //! @param max_cached_bytes ready blocks beyond this many cached bytes go back to the
  //! backend instead of staying in the pool.
  explicit size_class_pool(Backend backend = Backend{},
                           std::size_t max_cached_bytes = std::numeric_limits<std::size_t>::max())
      : m_backend(std::move(backend)), m_max_cached(max_cached_bytes) {}

  size_class_pool(const size_class_pool&) = delete;
  size_class_pool& operator=(const size_class_pool&) = delete;

  //! Waits for every fence, then gives every cached block back to the backend. Blocks still
  //! handed out must not be returned afterwards.
  ~size_class_pool() {
    for (auto& c : m_classes) {
      for (auto& p : c.fenced) {
        m_backend.wait(p.fence);
        m_backend.discard(p.fence);
        m_backend.deallocate(p.blk.ptr, p.blk.bytes);
      }
      for (const block& b : c.ready) {
        m_backend.deallocate(b.ptr, b.bytes);
      }
    }
  }

  //! A block of at least `bytes`, from the cache when one is ready, else from the backend.
  //! @throws whatever the backend's allocate throws; the pool stays usable.
  [[nodiscard]] block allocate(std::size_t bytes) {
    const size_class sc = size_class_for(bytes);
    if (sc.index < size_class_count) {
      if (block b = take_cached(sc.index); b.ptr != nullptr) {
        m_reuses.fetch_add(1, std::memory_order_relaxed);
        m_in_use.fetch_add(b.bytes, std::memory_order_relaxed);
        return b;
      }
    }
    const block b = from_backend(sc.bytes);
    m_misses.fetch_add(1, std::memory_order_relaxed);
    m_in_use.fetch_add(b.bytes, std::memory_order_relaxed);
    return b;
  }

  //! Fills the cache ahead of use: `count` ready blocks that each hold `bytes`, so the next
  //! `count` requests of that size are served without the backend (where allocation is
  //! slow: `cudaHostAlloc` takes about 1 ms per 4 MiB). Blocks already cached for that
  //! class count towards `count`. Stops early rather than exceed the pool's cache limit;
  //! requests too large to be pooled reserve nothing.
  //! @returns the blocks the backend allocated.
  //! @throws whatever the backend's allocate throws; the blocks allocated before stay
  //!         cached and the pool stays usable.
  std::size_t reserve(std::size_t bytes, std::size_t count) {
    const size_class sc = size_class_for(bytes);
    if (sc.index >= size_class_count) {
      return 0;
    }
    class_state& c = m_classes[sc.index];
    std::size_t have = 0;
    {
      const std::lock_guard lock(c.mutex);
      have = c.ready.size();
    }
    std::size_t added = 0;
    for (; have + added < count && fits_in_cache(sc.bytes); ++added) {
      const block b = from_backend(sc.bytes);
      const std::lock_guard lock(c.mutex);
      try {
        c.ready.push_back(b);
      } catch (...) {
        release_to_backend(b);
        throw;
      }
      m_cached.fetch_add(b.bytes, std::memory_order_relaxed);
    }
    return added;
  }

  //! Returns `b` for immediate reuse: nothing may still read or write it.
  void deallocate(block b) noexcept {
    m_in_use.fetch_sub(b.bytes, std::memory_order_relaxed);
    const size_class sc = size_class_for(b.bytes);
    if (sc.index >= size_class_count || !fits_in_cache(b.bytes)) {
      release_to_backend(b);
      return;
    }
    class_state& c = m_classes[sc.index];
    const std::lock_guard lock(c.mutex);
    try {
      c.ready.push_back(b);
    } catch (...) { // out of memory for the list itself: give the block back instead
      release_to_backend(b);
      return;
    }
    m_cached.fetch_add(b.bytes, std::memory_order_relaxed);
  }

  //! Returns `b`, reusable once `fence` completes. Takes ownership of `fence`.
  void deallocate(block b, fence_type fence) noexcept {
    m_in_use.fetch_sub(b.bytes, std::memory_order_relaxed);
    const size_class sc = size_class_for(b.bytes);
    if (sc.index < size_class_count) {
      class_state& c = m_classes[sc.index];
      const std::lock_guard lock(c.mutex);
      try {
        c.fenced.push_back(fenced_block{b, std::move(fence)});
        m_cached.fetch_add(b.bytes, std::memory_order_relaxed);
        m_fenced.fetch_add(b.bytes, std::memory_order_relaxed);
        return;
      } catch (...) { // fall through: wait for the fence and give the block back
      }
    }
    m_backend.wait(fence);
    m_backend.discard(fence);
    release_to_backend(b);
  }

  //! Takes `b` (handed out by this pool) out of the pool's books without giving it back to
  //! the backend: the caller frees it (e.g. later, on another thread).
  void abandon(block b) noexcept {
    m_in_use.fetch_sub(b.bytes, std::memory_order_relaxed);
    m_held.fetch_sub(b.bytes, std::memory_order_relaxed);
  }

  //! Gives back to the backend every cached block that is ready (fences complete).
  //! @returns the bytes given back.
  std::size_t trim() noexcept {
    std::size_t freed = 0;
    for (auto& c : m_classes) {
      std::vector<block> drop;
      {
        const std::lock_guard lock(c.mutex);
        reap(c);
        drop.swap(c.ready);
      }
      for (const block& b : drop) {
        m_cached.fetch_sub(b.bytes, std::memory_order_relaxed);
        release_to_backend(b);
        freed += b.bytes;
      }
    }
    return freed;
  }

  //! The counters now (each read atomically; together they are a near snapshot).
  [[nodiscard]] size_class_pool_stats stats() const noexcept {
    size_class_pool_stats s;
    s.bytes_held = m_held.load(std::memory_order_relaxed);
    s.bytes_in_use = m_in_use.load(std::memory_order_relaxed);
    s.bytes_cached = m_cached.load(std::memory_order_relaxed);
    s.bytes_fenced = m_fenced.load(std::memory_order_relaxed);
    s.backend_allocations = m_backend_allocations.load(std::memory_order_relaxed);
    s.reuses = m_reuses.load(std::memory_order_relaxed);
    s.misses = m_misses.load(std::memory_order_relaxed);
    return s;
  }

  //! The backend (e.g. for tests that inspect a fake one).
  [[nodiscard]] Backend& backend() noexcept { return m_backend; }

private:
  struct fenced_block {
    block blk;
    fence_type fence;
  };
  struct class_state {
    std::mutex mutex;
    std::vector<block> ready;        // LIFO: the most recently used block is warm
    std::deque<fenced_block> fenced; // FIFO: the oldest fence completes first
  };

  bool fits_in_cache(std::size_t bytes) const noexcept {
    return m_cached.load(std::memory_order_relaxed) + bytes <= m_max_cached;
  }

  // Call outside every lock: backend allocation (cudaHostAlloc) is slow.
  block from_backend(std::size_t bytes) {
    const block b{m_backend.allocate(bytes), bytes};
    m_backend_allocations.fetch_add(1, std::memory_order_relaxed);
    m_held.fetch_add(b.bytes, std::memory_order_relaxed);
    return b;
  }

  void release_to_backend(const block& b) noexcept {
    m_held.fetch_sub(b.bytes, std::memory_order_relaxed);
    m_backend.deallocate(b.ptr, b.bytes);
  }

  // Moves completed fenced blocks of `c` to its ready list (caller holds c.mutex). A fence
  // not yet complete goes to the back of the queue, so one slow stream does not hide the
  // blocks of faster ones behind it; at most `fence_checks_per_request` such misses.
  void reap(class_state& c) noexcept {
    std::size_t misses = std::min(c.fenced.size(), fence_checks_per_request);
    while (!c.fenced.empty() && misses > 0) {
      fenced_block f = std::move(c.fenced.front());
      c.fenced.pop_front();
      if (!m_backend.is_complete(f.fence)) {
        c.fenced.push_back(std::move(f)); // cannot throw: the slot was just freed
        --misses;
        continue;
      }
      m_backend.discard(f.fence);
      m_fenced.fetch_sub(f.blk.bytes, std::memory_order_relaxed);
      bool kept = false;
      if (m_cached.load(std::memory_order_relaxed) <= m_max_cached) {
        try {
          c.ready.push_back(f.blk);
          kept = true;
        } catch (...) {
        }
      }
      if (!kept) {
        m_cached.fetch_sub(f.blk.bytes, std::memory_order_relaxed);
        release_to_backend(f.blk);
      }
    }
  }

  block take_cached(unsigned index) noexcept {
    class_state& c = m_classes[index];
    const std::lock_guard lock(c.mutex);
    if (c.ready.empty()) {
      reap(c); // fence checks cost driver calls: only when no ready block is left
    }
    if (c.ready.empty()) {
      return {};
    }
    const block b = c.ready.back();
    c.ready.pop_back();
    m_cached.fetch_sub(b.bytes, std::memory_order_relaxed);
    return b;
  }

  Backend m_backend;
  std::size_t m_max_cached;
  std::array<class_state, size_class_count> m_classes{};
  std::atomic<std::size_t> m_held{0};
  std::atomic<std::size_t> m_in_use{0};
  std::atomic<std::size_t> m_cached{0};
  std::atomic<std::size_t> m_fenced{0};
  std::atomic<std::size_t> m_backend_allocations{0};
  std::atomic<std::size_t> m_reuses{0};
  std::atomic<std::size_t> m_misses{0};
};

} // namespace cuawait::cuda::detail
