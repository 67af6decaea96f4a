// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `arena_pair`: one pinned host arena and one device arena of the same size, cut into
//! equal slots. A job leases a slot (`co_await arenas.acquire()`) and gets a host span and a
//! device span at the same offset. Slots are leased lowest first, so jobs submitted together
//! sit side by side, and `copy_to_device` / `copy_to_host` copy a batch's slots with one
//! transfer per run of adjacent slots instead of one per job (what makes batched graphs beat
//! the per-copy cost: docs/GRAPHS.md). Jobs whose buffers come from elsewhere still work with
//! per-job copies; they just do not merge.
//!
//! The release rule: a slot is reusable as soon as its lease dies. Await the job's last
//! copy or kernel that uses the slot before dropping the lease.

#include "cuawait/cuda/stream.hpp"

#include "cuawait/cuda/detail/arena_ranges.hpp"
#include "cuawait/cuda/detail/slot_pool.hpp"

#include <cstddef>
#include <optional>
#include <span>
#include <stop_token>
#include <utility>
#include <vector>

namespace cuawait::cuda {

class arena_pair;

//! A lease on `count()` adjacent slots of an `arena_pair`. Move-only; gives the slots back
//! on destruction. The arena must outlive the lease.
class arena_slot {
public:
  arena_slot(arena_slot&& other) noexcept
      : m_arena(std::exchange(other.m_arena, nullptr)), m_first(other.m_first),
        m_count(std::exchange(other.m_count, 0)) {}
  arena_slot& operator=(arena_slot&& other) noexcept {
    if (this != &other) {
      reset();
      m_arena = std::exchange(other.m_arena, nullptr);
      m_first = other.m_first;
      m_count = std::exchange(other.m_count, 0);
    }
    return *this;
  }
  arena_slot(const arena_slot&) = delete;
  arena_slot& operator=(const arena_slot&) = delete;
  ~arena_slot() { reset(); }

  //! Index of the first slot.
  [[nodiscard]] std::size_t index() const noexcept { return m_first; }
  //! Number of slots held.
  [[nodiscard]] std::size_t count() const noexcept { return m_count; }
  //! Byte offset of the first slot in both arenas.
  [[nodiscard]] std::size_t offset() const noexcept;
  //! The slots' pinned host memory.
  [[nodiscard]] std::span<std::byte> host() const noexcept;
  //! The slots' device memory (same offset, same size).
  [[nodiscard]] std::span<std::byte> device() const noexcept;
  //! The host memory as `T` elements (the slot size is a multiple of 256 bytes).
  template <class T>
  [[nodiscard]] std::span<T> host_as() const noexcept {
    const auto b = host();
    return {reinterpret_cast<T*>(b.data()), b.size() / sizeof(T)};
  }
  //! The device memory as `T` elements.
  template <class T>
  [[nodiscard]] std::span<T> device_as() const noexcept {
    const auto b = device();
    return {reinterpret_cast<T*>(b.data()), b.size() / sizeof(T)};
  }
  //! Gives the slots back now (see the release rule).
  void reset() noexcept;

private:
  friend class arena_pair;
  arena_slot(arena_pair& a, std::size_t first, std::size_t count) noexcept
      : m_arena(&a), m_first(first), m_count(count) {}

  arena_pair* m_arena = nullptr;
  std::size_t m_first = 0;
  std::size_t m_count = 0;
};

//! A pinned arena and a device arena of `slots * slot_bytes()` bytes each. Thread-safe
//! leasing; no CUDA call on the leasing path.
//!
//! Lifetime: destroy it only when no slot is leased and no GPU work uses it (the destructor
//! frees both arenas with `cudaFreeHost` / `cudaFree`, which do not wait for that work).
class arena_pair {
public:
  //! Awaitable of `acquire()`; yields an `arena_slot`.
  class acquire_awaiter {
  public:
    [[nodiscard]] bool await_ready() const noexcept { return m_inner.await_ready(); }
    template <class Promise>
    bool await_suspend(std::coroutine_handle<Promise> h) noexcept {
      return m_inner.await_suspend(h);
    }
    //! @throws operation_cancelled when a stop request ended the wait (no slot leased).
    [[nodiscard]] arena_slot await_resume() {
      return arena_slot(*m_arena, m_inner.await_resume(), 1);
    }

  private:
    friend class arena_pair;
    acquire_awaiter(arena_pair& a, std::stop_token token) noexcept
        : m_arena(&a), m_inner(a.m_slots.acquire(priority::normal, std::move(token))) {}
    arena_pair* m_arena;
    cuawait::cuda::detail::slot_pool::acquire_awaiter m_inner;
  };

  //! Allocates both arenas on the current device. `bytes_per_slot` is rounded up to a
  //! multiple of 256 (CUDA's allocation alignment), so every slot is aligned for any type.
  //! @throws cuda_error naming the size when memory runs out; std::invalid_argument for 0
  //!   slots; std::length_error on overflow.
  arena_pair(std::size_t bytes_per_slot, std::size_t slots);
  arena_pair(const arena_pair&) = delete;
  arena_pair& operator=(const arena_pair&) = delete;
  ~arena_pair();

  //! `co_await arenas.acquire()`: the lowest free slot, suspending while all are leased
  //! (first come first served; resumed on the waiter's executor). Cancellable through
  //! `token`, else the awaiting coroutine's token: a stop request before a slot is handed
  //! over resumes the coroutine at once with `operation_cancelled` and leases nothing.
  [[nodiscard]] acquire_awaiter acquire(std::stop_token token = {}) noexcept {
    return acquire_awaiter(*this, std::move(token));
  }
  //! The lowest free slot now, or nothing.
  [[nodiscard]] std::optional<arena_slot> try_acquire() noexcept;
  //! `n` adjacent slots now (one lease; its spans cover all of them), or nothing.
  [[nodiscard]] std::optional<arena_slot> try_acquire_run(std::size_t n) noexcept;

  //! Bytes per slot (after rounding).
  [[nodiscard]] std::size_t slot_bytes() const noexcept { return m_slot_bytes; }
  //! Number of slots.
  [[nodiscard]] std::size_t slots() const noexcept { return m_slots.size(); }
  //! Slots not leased now.
  [[nodiscard]] std::size_t available() const noexcept { return m_slots.available(); }
  //! Start of the pinned arena.
  [[nodiscard]] std::byte* host_base() const noexcept { return m_host; }
  //! Start of the device arena.
  [[nodiscard]] std::byte* device_base() const noexcept { return m_device; }

  //! The copies that move the first `used_bytes` of each slot in `slot_indices`: one range
  //! per run of adjacent slots used in full (see `detail::merge_slot_ranges`).
  [[nodiscard]] std::vector<cuawait::cuda::detail::byte_range>
  copy_ranges(std::span<const std::size_t> slot_indices, std::size_t used_bytes) const {
    return cuawait::cuda::detail::merge_slot_ranges(slot_indices, m_slot_bytes, used_bytes);
  }
  //! Enqueues on `s` the host-to-device copies of those bytes (merged as above).
  //! @returns the number of copies enqueued. @throws cuda_error naming the range
  std::size_t copy_to_device(stream_ref s, std::span<const std::size_t> slot_indices,
                             std::size_t used_bytes) const;
  //! Enqueues on `s` the device-to-host copies of those bytes (merged as above).
  //! @returns the number of copies enqueued. @throws cuda_error naming the range
  std::size_t copy_to_host(stream_ref s, std::span<const std::size_t> slot_indices,
                           std::size_t used_bytes) const;

private:
  friend class arena_slot;
  std::size_t copy(stream_ref s, std::span<const std::size_t> slots, std::size_t used_bytes,
                   bool to_device) const;

  std::size_t m_slot_bytes;
  cuawait::cuda::detail::slot_pool m_slots;
  std::byte* m_host = nullptr;
  std::byte* m_device = nullptr;
};

inline std::size_t arena_slot::offset() const noexcept { return m_first * m_arena->m_slot_bytes; }

inline std::span<std::byte> arena_slot::host() const noexcept {
  if (m_arena == nullptr) {
    return {};
  }
  return {m_arena->m_host + offset(), m_count * m_arena->m_slot_bytes};
}

inline std::span<std::byte> arena_slot::device() const noexcept {
  if (m_arena == nullptr) {
    return {};
  }
  return {m_arena->m_device + offset(), m_count * m_arena->m_slot_bytes};
}

inline void arena_slot::reset() noexcept {
  if (m_arena != nullptr) {
    std::exchange(m_arena, nullptr)->m_slots.release_run(m_first, std::exchange(m_count, 0));
  }
}

} // namespace cuawait::cuda
