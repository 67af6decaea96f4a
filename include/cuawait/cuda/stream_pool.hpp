// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `stream_pool`: streams created up front, leased to coroutines. `co_await pool.acquire()`
//! yields a `stream_lease` (a `stream_ref`, so every stream operation works on it) that
//! gives the stream back when it goes out of scope; when every stream of the requested
//! priority is leased, the coroutine suspends until one comes back. Leasing makes no CUDA
//! call. A returned stream may still run the work its last holder enqueued: the next holder
//! sees it in stream order, behind that work.

#include "cuawait/cuda/stream.hpp"

#include "cuawait/cuda/detail/slot_pool.hpp"
#include "cuawait/executor.hpp"

#include <cstddef>
#include <optional>
#include <stop_token>
#include <utility>
#include <vector>

namespace cuawait::cuda {

class stream_pool;

//! How many streams of each priority a `stream_pool` creates.
struct stream_pool_options {
  std::size_t normal = 8;   //!< streams for `priority::normal` (and priorities without any)
  std::size_t high = 0;     //!< streams for `priority::high`
  std::size_t low = 0;      //!< streams for `priority::low`
  bool non_blocking = true; //!< `cudaStreamNonBlocking` (no sync with the legacy stream)
  int device = -1;          //!< device ordinal; -1: the current device
};

//! A leased stream: a `stream_ref` that gives the stream back to its pool on destruction.
//! Move-only. The pool must outlive the lease.
//!
//! A moved-from or reset lease forgets its stream (which may be leased to another coroutine
//! by then): every stream operation on it, `get()`, and the same on a `stream_ref` copied
//! from it afterwards throw `cuda_error` ("use of a moved-from cuda::stream_lease") before
//! any CUDA call. Destroying it, resetting it again or move-assigning into it is fine.
class stream_lease : public stream_ref {
public:
  //! Takes `other`'s stream; `other` is left empty (see the class comment).
  stream_lease(stream_lease&& other) noexcept
      : stream_ref(other.forget()), m_pool(std::exchange(other.m_pool, nullptr)),
        m_slot(other.m_slot) {}
  //! Gives this lease's stream back, then takes `other`'s; `other` is left empty.
  stream_lease& operator=(stream_lease&& other) noexcept {
    if (this != &other) {
      reset();
      static_cast<stream_ref&>(*this) = other.forget();
      m_pool = std::exchange(other.m_pool, nullptr);
      m_slot = other.m_slot;
    }
    return *this;
  }
  stream_lease(const stream_lease&) = delete;
  stream_lease& operator=(const stream_lease&) = delete;
  //! Gives the stream back. Never throws.
  ~stream_lease() { reset(); }

  //! The stream's index in its pool.
  [[nodiscard]] std::size_t index() const noexcept { return m_slot; }
  //! True while the lease holds a stream.
  [[nodiscard]] bool holds() const noexcept { return m_pool != nullptr; }
  //! Gives the stream back now (may resume a coroutine waiting for it); the lease becomes
  //! empty and refuses to be used as a stream (see the class comment).
  void reset() noexcept;

private:
  friend class stream_pool;
  stream_lease(stream_pool& pool, std::size_t slot, stream_ref s) noexcept
      : stream_ref(s), m_pool(&pool), m_slot(slot) {}

  // This lease's view, replaced by the lease sentinel (see stream.hpp).
  stream_ref forget() noexcept {
    return std::exchange(static_cast<stream_ref&>(*this),
                         stream_ref(detail::stream_traits::forgotten_lease()));
  }

  stream_pool* m_pool = nullptr;
  std::size_t m_slot = 0;
};

//! A fixed set of streams in three priority groups, leased to coroutines. Thread-safe.
//! Priorities map onto the device's range (`cudaDeviceGetStreamPriorityRange`): `low`
//! gets the least priority (CUDA's default), `high` the greatest, `normal` the middle.
//!
//! Lifetime: destroy the pool only when no lease and no waiting coroutine remains; its
//! destructor destroys the streams without waiting (CUDA finishes their work).
class stream_pool {
public:
  //! The awaitable `acquire()` returns; yields a `stream_lease`.
  class acquire_awaiter {
  public:
    [[nodiscard]] bool await_ready() const noexcept { return m_inner.await_ready(); }
    template <class Promise>
    bool await_suspend(std::coroutine_handle<Promise> h) noexcept {
      return m_inner.await_suspend(h);
    }
    //! @throws operation_cancelled when a stop request ended the wait (no stream leased).
    [[nodiscard]] stream_lease await_resume() { return m_pool->make_lease(m_inner.await_resume()); }

  private:
    friend class stream_pool;
    acquire_awaiter(stream_pool& pool, priority p, std::stop_token token) noexcept
        : m_pool(&pool), m_inner(pool.m_slots.acquire(p, std::move(token))) {}
    stream_pool* m_pool;
    cuawait::cuda::detail::slot_pool::acquire_awaiter m_inner;
  };

  //! Creates the streams.
  //! @throws cuda_error (no device, stream creation); std::invalid_argument with 0 streams.
  explicit stream_pool(stream_pool_options options = {});
  //! `count` normal-priority streams.
  explicit stream_pool(std::size_t count) : stream_pool(stream_pool_options{count}) {}
  stream_pool(const stream_pool&) = delete;
  stream_pool& operator=(const stream_pool&) = delete;
  ~stream_pool();

  //! `co_await pool.acquire(p)`: a lease on a stream of priority `p` (or of normal priority
  //! when the pool has none of `p`), suspending while all are leased; the waiter resumes on
  //! its executor, first come first served. Destroying a waiting coroutine withdraws it.
  //! Cancellable through `token`, else the awaiting coroutine's token: a stop request
  //! before a stream is handed over resumes the coroutine at once with
  //! `operation_cancelled` and leases nothing (see `detail::slot_pool::acquire`).
  [[nodiscard]] acquire_awaiter acquire(priority p = priority::normal,
                                        std::stop_token token = {}) noexcept {
    return acquire_awaiter(*this, p, std::move(token));
  }
  //! As `acquire(priority::normal, token)`.
  [[nodiscard]] acquire_awaiter acquire(std::stop_token token) noexcept {
    return acquire_awaiter(*this, priority::normal, std::move(token));
  }
  //! A lease now, or nothing when every stream of that priority is leased.
  [[nodiscard]] std::optional<stream_lease> try_acquire(priority p = priority::normal) noexcept {
    if (auto s = m_slots.try_acquire(p)) {
      return make_lease(*s);
    }
    return std::nullopt;
  }

  //! Number of streams.
  [[nodiscard]] std::size_t size() const noexcept { return m_streams.size(); }
  //! Streams of priority `p` not leased now.
  [[nodiscard]] std::size_t available(priority p = priority::normal) const noexcept {
    return m_slots.available(p);
  }
  //! Coroutines waiting for a stream of priority `p`.
  [[nodiscard]] std::size_t waiting(priority p = priority::normal) const noexcept {
    return m_slots.waiting(p);
  }
  //! The CUDA priority the streams of `p` were created with.
  [[nodiscard]] int cuda_priority(priority p) const noexcept {
    return m_cuda_priority[m_slots.group_for(p)];
  }
  //! Stream `i` (0 <= i < size()), leased or not; for diagnostics and shutdown.
  [[nodiscard]] stream_ref at(std::size_t i) const noexcept { return m_streams[i]; }

private:
  friend class stream_lease;
  stream_lease make_lease(std::size_t slot) noexcept {
    return stream_lease(*this, slot, m_streams[slot]);
  }

  cuawait::cuda::detail::slot_pool m_slots;
  std::vector<stream> m_streams;
  int m_cuda_priority[priority_count] = {};
};

inline void stream_lease::reset() noexcept {
  if (m_pool != nullptr) {
    (void)forget(); // before the slot can be leased again
    std::exchange(m_pool, nullptr)->m_slots.release(m_slot);
  }
}

} // namespace cuawait::cuda
