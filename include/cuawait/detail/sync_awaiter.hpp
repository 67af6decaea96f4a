// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The awaiter skeleton shared by the async primitives: fast path or enqueue under the
//! primitive's lock, optional stop callback, the arrival handshake (see sync_waiter.hpp)
//! and `operation_cancelled` on a stop request.

#include "cuawait/cancellation.hpp"
#include "cuawait/detail/sync_waiter.hpp"

#include <atomic>
#include <coroutine>
#include <mutex>
#include <optional>
#include <stop_token>
#include <utility>

namespace cuawait::detail {

//! CRTP base. `Derived` provides, all called by this class only:
//! - `bool try_complete_or_enqueue() noexcept`: under the primitive's lock, either finish
//!   the operation now (set `m_status`, return true) or push `*this` on its queue (return
//!   false). It may wake other waiters after unlocking, never itself.
//! - `std::mutex& sync_mutex() noexcept` and `waiter_queue& sync_queue() noexcept`: the
//!   lock and the queue this waiter sits on, for withdrawal on a stop request.
//! - optionally `void on_withdrawn_locked(wake_list&) noexcept`: called under the lock
//!   after a stop request withdrew this waiter, to serve waiters it held back.
template <class Derived>
class sync_awaiter : public sync_waiter {
public:
  sync_awaiter(const sync_awaiter&) = delete;
  sync_awaiter& operator=(const sync_awaiter&) = delete;

  [[nodiscard]] bool await_ready() const noexcept { return false; }

  bool await_suspend(std::coroutine_handle<> h) noexcept {
    m_handle = h;
    if (m_token.stop_requested()) {
      m_status = wait_status::cancelled;
      return false;
    }
    const bool cancellable = m_token.stop_possible();
    // Without a stop callback to register, await_suspend has nothing left to do once the
    // node is queued: it arrives up front and the waker alone resumes the coroutine.
    m_arrived.store(!cancellable, std::memory_order_relaxed);
    if (static_cast<Derived&>(*this).try_complete_or_enqueue()) {
      return false;
    }
    if (!cancellable) {
      return true; // the node may already be resumed elsewhere: touch nothing
    }
    m_stop.emplace(m_token, on_stop{this}); // may run cancel() inline
    return !m_arrived.exchange(true, std::memory_order_acq_rel);
  }

protected:
  explicit sync_awaiter(std::stop_token token) noexcept : m_token(std::move(token)) {}
  ~sync_awaiter() = default;

  //! Whether stop was requested on this wait's token (for lock-free `await_ready` paths,
  //! which must not complete a wait that `await_suspend` would cancel).
  [[nodiscard]] bool stop_requested() const noexcept { return m_token.stop_requested(); }

  //! For `await_resume`: drops the stop callback (waiting for it if it is running on
  //! another thread, where it lost the race) and throws if the wait was cancelled.
  //! @throws operation_cancelled naming `what`.
  wait_status finish(const char* what) {
    m_stop.reset();
    if (m_status == wait_status::cancelled) {
      throw operation_cancelled(what);
    }
    return m_status;
  }

private:
  struct on_stop {
    sync_awaiter* self;
    void operator()() const noexcept { self->cancel(); }
  };

  // The stop callback: withdraws the waiter unless the primitive already took it.
  void cancel() noexcept {
    wake_list woken;
    {
      Derived& d = static_cast<Derived&>(*this);
      const std::lock_guard lock(d.sync_mutex());
      if (!m_queued) {
        return;
      }
      d.sync_queue().erase(*this);
      m_status = wait_status::cancelled;
      if constexpr (requires { d.on_withdrawn_locked(woken); }) {
        d.on_withdrawn_locked(woken);
      }
    }
    arrive(*this);
    woken.wake_all(); // resumes this thread's ready list, this waiter first
  }

  std::stop_token m_token;
  std::optional<std::stop_callback<on_stop>> m_stop;
};

} // namespace cuawait::detail
