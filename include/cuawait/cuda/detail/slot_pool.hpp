// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `slot_pool`: a fixed set of numbered slots, split into one group per `priority`, leased
//! out lowest number first, with an awaitable acquire that suspends while a group is empty.
//! The CUDA-free core of `cuda::stream_pool` (a slot is a stream) and of `cuda::arena_pair`
//! (a slot is a fixed-size region of the arenas; lowest-first leasing keeps the buffers of
//! jobs submitted together adjacent, so their copies merge).

#include "cuawait/cancellation.hpp"
#include "cuawait/detail/trampoline.hpp"
#include "cuawait/executor.hpp"

#include <array>
#include <atomic>
#include <bit>
#include <cassert>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <utility>
#include <vector>

namespace cuawait::cuda::detail {

//! Slots `0 .. size()-1`; group `g` (one per `priority`) owns a contiguous range of them.
//! Thread-safe. Releasing a slot hands it straight to the oldest coroutine waiting on its
//! group (no barging), resumed on the executor it was suspended on (`post` with its
//! priority), or inline on the releasing thread when it had none.
//!
//! Lifetime: the pool must outlive every lease and every waiting coroutine.
class slot_pool {
public:
  class acquire_awaiter;

  //! @param group_sizes slots per group, indexed by `priority` (low, normal, high).
  //! @throws std::invalid_argument when every group is empty.
  explicit slot_pool(std::array<std::size_t, priority_count> group_sizes) {
    std::size_t begin = 0;
    for (int g = 0; g < priority_count; ++g) {
      m_groups[g].begin = begin;
      m_groups[g].end = begin + group_sizes[g];
      m_groups[g].available = group_sizes[g];
      begin += group_sizes[g];
    }
    if (begin == 0) {
      throw std::invalid_argument("slot_pool: no slots");
    }
    m_size = begin;
    m_free.assign((begin + 63) / 64, 0);
    for (std::size_t i = 0; i < begin; ++i) {
      m_free[i / 64] |= std::uint64_t{1} << (i % 64);
    }
    // A priority without slots of its own is served by normal, else by the first group
    // that has slots.
    for (int p = 0; p < priority_count; ++p) {
      int g = p;
      if (group_sizes[g] == 0) {
        g = static_cast<int>(priority::normal);
      }
      for (int h = 0; group_sizes[g] == 0 && h < priority_count; ++h) {
        g = h;
      }
      m_group_for[p] = static_cast<std::uint8_t>(g);
    }
  }

  slot_pool(const slot_pool&) = delete;
  slot_pool& operator=(const slot_pool&) = delete;
  ~slot_pool() { assert(no_waiters() && "slot_pool destroyed while coroutines wait on it"); }

  //! Number of slots in all groups.
  [[nodiscard]] std::size_t size() const noexcept { return m_size; }

  //! The group that serves requests of priority `p`.
  [[nodiscard]] int group_for(priority p) const noexcept {
    return m_group_for[static_cast<int>(p)];
  }
  //! The group slot `slot` belongs to.
  [[nodiscard]] int group_of(std::size_t slot) const noexcept {
    int g = 0;
    while (slot >= m_groups[g].end) {
      ++g;
    }
    return g;
  }

  //! The lowest free slot of the group serving `p`, or nothing when all are leased.
  [[nodiscard]] std::optional<std::size_t> try_acquire(priority p = priority::normal) noexcept {
    const std::lock_guard lock(m_mutex);
    return take_lowest(m_groups[group_for(p)]);
  }

  //! The first of the lowest `n` adjacent free slots of the group serving `p`, all leased
  //! (release each, or with `release_run`), or nothing when there is no such run.
  [[nodiscard]] std::optional<std::size_t> try_acquire_run(std::size_t n,
                                                           priority p = priority::normal) noexcept {
    const std::lock_guard lock(m_mutex);
    group& g = m_groups[group_for(p)];
    std::size_t run = 0;
    for (std::size_t i = g.begin; i < g.end && n > 0; ++i) {
      run = is_free(i) ? run + 1 : 0;
      if (run == n) {
        const std::size_t first = i + 1 - n;
        for (std::size_t j = first; j <= i; ++j) {
          set_free(j, false);
        }
        g.available -= n;
        return first;
      }
    }
    return std::nullopt;
  }

  //! Awaitable that yields a slot index of the group serving `p`, suspending while that
  //! group has none free. Destroying a coroutine suspended in it withdraws the wait (a slot
  //! already handed to it goes back to the pool).
  //!
  //! Cancellation: `token`, else the awaiting coroutine's (a cuawait task's, or the one
  //! `when_any` / `async_scope` give their children). A stop request before a slot is
  //! handed over withdraws the wait, takes no slot, and resumes the coroutine at once with
  //! `operation_cancelled` (on its executor; inline on the requesting thread without one);
  //! if the hand-over wins the race, the await succeeds. A token already stopped at the
  //! `co_await` cancels it even when a slot is free.
  [[nodiscard]] acquire_awaiter acquire(priority p = priority::normal,
                                        std::stop_token token = {}) noexcept;

  //! Returns `slot`: to the oldest waiter of its group, else to the free set.
  void release(std::size_t slot) noexcept;

  //! Releases `n` slots from `first` on.
  void release_run(std::size_t first, std::size_t n) noexcept {
    for (std::size_t i = first; i < first + n; ++i) {
      release(i);
    }
  }

  //! Free slots of the group serving `p`.
  [[nodiscard]] std::size_t available(priority p = priority::normal) const noexcept {
    const std::lock_guard lock(m_mutex);
    return m_groups[group_for(p)].available;
  }
  //! Coroutines waiting on the group serving `p`.
  [[nodiscard]] std::size_t waiting(priority p = priority::normal) const noexcept {
    const std::lock_guard lock(m_mutex);
    return m_groups[group_for(p)].waiting;
  }

private:
  struct group {
    std::size_t begin = 0;
    std::size_t end = 0;
    std::size_t available = 0;
    std::size_t waiting = 0;
    acquire_awaiter* head = nullptr; // FIFO of waiters
    acquire_awaiter* tail = nullptr;
  };

  bool is_free(std::size_t i) const noexcept { return (m_free[i / 64] >> (i % 64)) & 1U; }
  void set_free(std::size_t i, bool f) noexcept {
    const std::uint64_t bit = std::uint64_t{1} << (i % 64);
    m_free[i / 64] = f ? (m_free[i / 64] | bit) : (m_free[i / 64] & ~bit);
  }

  // Lowest free slot of `g`, marked leased (caller holds m_mutex).
  std::optional<std::size_t> take_lowest(group& g) noexcept {
    if (g.available == 0) {
      return std::nullopt;
    }
    for (std::size_t w = g.begin / 64; w * 64 < g.end; ++w) {
      std::uint64_t bits = m_free[w];
      if (w == g.begin / 64) {
        bits &= ~std::uint64_t{0} << (g.begin % 64); // slots of lower groups
      }
      if (bits != 0) {
        const std::size_t i = w * 64 + static_cast<std::size_t>(std::countr_zero(bits));
        if (i >= g.end) {
          break;
        }
        set_free(i, false);
        --g.available;
        return i;
      }
    }
    return std::nullopt;
  }

  bool no_waiters() const noexcept {
    const std::lock_guard lock(m_mutex);
    for (const group& g : m_groups) {
      if (g.head != nullptr) {
        return false;
      }
    }
    return true;
  }

  mutable std::mutex m_mutex;
  std::array<group, priority_count> m_groups{};
  std::array<std::uint8_t, priority_count> m_group_for{};
  std::vector<std::uint64_t> m_free; // bit set: slot is free
  std::size_t m_size = 0;
};

//! See `slot_pool::acquire`. Lives in the awaiting coroutine's frame; it is the node of the
//! waiter list, so waiting allocates nothing. A stop request and a release race as for the
//! CPU primitives (see sync_waiter.hpp): the pool's lock decides who ends the wait, and an
//! arrival flag decides who resumes the coroutine, it or `await_suspend` not suspending.
class slot_pool::acquire_awaiter {
public:
  acquire_awaiter(slot_pool& pool, int group, std::stop_token token = {}) noexcept
      : m_pool(&pool), m_group(group), m_token(std::move(token)) {}
  //! Only before it is awaited (so that `when_any` and `with_timeout` can hold it).
  acquire_awaiter(acquire_awaiter&& other) noexcept
      : m_pool(other.m_pool), m_group(other.m_group), m_token(std::move(other.m_token)) {}
  acquire_awaiter(const acquire_awaiter&) = delete;
  acquire_awaiter& operator=(const acquire_awaiter&) = delete;
  acquire_awaiter& operator=(acquire_awaiter&&) = delete;

  ~acquire_awaiter() {
    m_stop.reset(); // no stop request reaches the node after this
    if (!m_suspended) {
      return;
    }
    bool give_back = false;
    {
      const std::lock_guard lock(m_pool->m_mutex);
      if (m_queued) {
        unlink();
      } else {
        give_back = !m_resumed && !m_cancelled; // granted, destroyed before it took it
      }
    }
    if (give_back) {
      m_pool->release(m_slot);
    }
  }

  //! Never ready: the slot is taken in `await_suspend`, once the token is known.
  [[nodiscard]] bool await_ready() const noexcept { return false; }

  template <class Promise>
  bool await_suspend(std::coroutine_handle<Promise> h) noexcept {
    if constexpr (requires { h.promise().get_stop_token(); }) {
      if (!m_token.stop_possible()) {
        m_token = h.promise().get_stop_token();
      }
    }
    return suspend(h);
  }

  //! The leased slot. @throws operation_cancelled when a stop request ended the wait.
  [[nodiscard]] std::size_t await_resume() {
    m_stop.reset(); // waits for a stop callback that lost the race on another thread
    if (m_cancelled) {
      throw operation_cancelled("cuawait: slot acquisition cancelled");
    }
    m_resumed = true;
    return m_slot;
  }

private:
  friend class slot_pool;

  struct on_stop {
    acquire_awaiter* self;
    void operator()() const noexcept { self->cancel(); }
  };

  bool suspend(std::coroutine_handle<> h) noexcept {
    if (m_token.stop_requested()) {
      m_cancelled = true;
      return false;
    }
    const bool cancellable = m_token.stop_possible();
    // Without a callback to register, await_suspend arrives up front: the releaser alone
    // resumes the coroutine.
    m_arrived.store(!cancellable, std::memory_order_relaxed);
    {
      const std::lock_guard lock(m_pool->m_mutex);
      if (take_now()) {
        return false;
      }
      m_handle = h;
      m_executor = current_executor();
      m_priority = current_priority();
      m_suspended = true;
      m_queued = true;
      group& g = m_pool->m_groups[m_group];
      m_prev = g.tail;
      (g.tail ? g.tail->m_next : g.head) = this;
      g.tail = this;
      ++g.waiting;
    }
    if (!cancellable) {
      return true; // a release may already be resuming us: touch nothing
    }
    (void)m_stop.emplace(m_token, on_stop{this}); // may run cancel() inline
    return !m_arrived.exchange(true, std::memory_order_acq_rel);
  }

  void cancel() noexcept {
    {
      const std::lock_guard lock(m_pool->m_mutex);
      if (!m_queued) {
        return; // a release handed us a slot first
      }
      unlink();
      m_cancelled = true;
    }
    arrive_and_resume();
  }

  //! The side that ended the wait (a release or a stop) arrives; the second arrival
  //! resumes the coroutine. After this the awaiter may be gone.
  void arrive_and_resume() noexcept {
    if (!m_arrived.exchange(true, std::memory_order_acq_rel)) {
      return; // await_suspend has not finished: it sees the arrival and does not suspend
    }
    const std::coroutine_handle<> h = m_handle;
    if (executor* const ex = m_executor; ex != nullptr) {
      ex->post(h, m_priority);
    } else {
      ::cuawait::detail::resume(h);
    }
  }

  bool take_now() noexcept {
    if (auto s = m_pool->take_lowest(m_pool->m_groups[m_group])) {
      m_slot = *s;
      return true;
    }
    return false;
  }

  void unlink() noexcept { // caller holds the pool's mutex
    group& g = m_pool->m_groups[m_group];
    (m_prev ? m_prev->m_next : g.head) = m_next;
    (m_next ? m_next->m_prev : g.tail) = m_prev;
    m_prev = m_next = nullptr;
    m_queued = false;
    --g.waiting;
  }

  slot_pool* m_pool;
  int m_group;
  std::stop_token m_token;
  std::size_t m_slot = 0;
  std::coroutine_handle<> m_handle;
  executor* m_executor = nullptr;
  priority m_priority = priority::normal;
  acquire_awaiter* m_prev = nullptr;
  acquire_awaiter* m_next = nullptr;
  bool m_suspended = false; // written only by the awaiting coroutine
  bool m_queued = false;    // guarded by the pool's mutex
  bool m_cancelled = false; // guarded by the pool's mutex; read after the arrival
  bool m_resumed = false;
  std::atomic<bool> m_arrived{true};
  std::optional<std::stop_callback<on_stop>> m_stop;
};

inline slot_pool::acquire_awaiter slot_pool::acquire(priority p, std::stop_token token) noexcept {
  return acquire_awaiter(*this, group_for(p), std::move(token));
}

inline void slot_pool::release(std::size_t slot) noexcept {
  acquire_awaiter* granted = nullptr;
  {
    const std::lock_guard lock(m_mutex);
    group& g = m_groups[group_of(slot)];
    assert(!is_free(slot) && "slot_pool: slot released twice");
    if (acquire_awaiter* w = g.head) {
      w->unlink();
      w->m_slot = slot;
      granted = w;
    } else {
      set_free(slot, true);
      ++g.available;
    }
  }
  if (granted != nullptr) { // outside the lock: the resumed coroutine may acquire or release
    granted->arrive_and_resume();
  }
}

} // namespace cuawait::cuda::detail
