// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The waiter node every async primitive queues (it lives in the awaiter, so in the
//! coroutine frame: no allocation per wait), the intrusive FIFO that holds them, and the
//! per-thread list through which woken waiters are resumed.
//!
//! Two parties may finish a wait: the primitive (a grant, a close) or a stop request. Which
//! one wins is decided under the primitive's lock: whoever removes the node from the queue
//! (`m_queued` goes false) owns the outcome and sets `m_status`. The winner then "arrives";
//! so does `await_suspend` once it has stopped touching the awaiter. The second of the two
//! arrivals resumes the coroutine, so a wake-up can never race with an `await_suspend` that
//! is still registering its stop callback.
//!
//! Woken waiters are resumed on the waking thread through a per-thread FIFO: the outermost
//! wake on a thread drains it, a wake issued by a coroutine that such a drain is running
//! only appends. Without that, a mutex handed from waiter to waiter would nest one stack
//! frame set per hand-over and overflow the stack under contention.

#include "cuawait/detail/trampoline.hpp"

#include <atomic>
#include <coroutine>
#include <cstdint>

namespace cuawait::detail {

//! How a wait ended. Written by the winner under the primitive's lock, read by
//! `await_resume` after the arrival handshake.
enum class wait_status : std::uint8_t { pending, granted, cancelled, closed };

//! A coroutine waiting on a primitive. Fields other than `m_arrived` are guarded by the
//! owning primitive's mutex while the node is queued.
struct sync_waiter {
  sync_waiter* m_next = nullptr;
  sync_waiter* m_prev = nullptr;
  std::coroutine_handle<> m_handle;
  std::atomic<bool> m_arrived{false};
  bool m_queued = false;
  wait_status m_status = wait_status::pending;
};

//! Intrusive doubly linked FIFO of waiters; O(1) push, pop and erase (erase is what a stop
//! request needs). Not thread-safe: the owning primitive's mutex guards it.
class waiter_queue {
public:
  [[nodiscard]] bool empty() const noexcept { return m_head == nullptr; }

  void push_back(sync_waiter& w) noexcept {
    w.m_prev = m_tail;
    w.m_next = nullptr;
    (m_tail != nullptr ? m_tail->m_next : m_head) = &w;
    m_tail = &w;
    w.m_queued = true;
  }

  void erase(sync_waiter& w) noexcept {
    (w.m_prev != nullptr ? w.m_prev->m_next : m_head) = w.m_next;
    (w.m_next != nullptr ? w.m_next->m_prev : m_tail) = w.m_prev;
    w.m_next = nullptr;
    w.m_prev = nullptr;
    w.m_queued = false;
  }

  //! The oldest waiter; the queue must not be empty.
  [[nodiscard]] sync_waiter& front() const noexcept { return *m_head; }

  //! Removes and returns the oldest waiter; the queue must not be empty.
  sync_waiter& pop_front() noexcept {
    sync_waiter& w = *m_head;
    erase(w);
    return w;
  }

private:
  sync_waiter* m_head = nullptr;
  sync_waiter* m_tail = nullptr;
};

//! Waiters this thread must resume, oldest first, linked through `m_next`.
struct ready_waiters {
  sync_waiter* head = nullptr;
  sync_waiter* tail = nullptr;
  bool draining = false;
};

constinit inline thread_local ready_waiters tl_ready_waiters{};

//! The primitive's (or the stop callback's) arrival. Call it outside the primitive's lock,
//! after setting `m_status` under it. If `await_suspend` has already finished, the waiter
//! is appended to this thread's ready list; `resume_ready()` then resumes it. Otherwise
//! `await_suspend` will see the arrival and not suspend. Either way `w` may be gone once
//! this returns.
inline void arrive(sync_waiter& w) noexcept {
  if (!w.m_arrived.exchange(true, std::memory_order_acq_rel)) {
    return;
  }
  ready_waiters& r = tl_ready_waiters;
  w.m_next = nullptr;
  (r.tail != nullptr ? r.tail->m_next : r.head) = &w;
  r.tail = &w;
}

//! Resumes this thread's ready waiters in FIFO order, unless an outer call on this thread
//! is already doing so (then that call resumes them once the current one suspends).
inline void resume_ready() noexcept {
  ready_waiters& r = tl_ready_waiters;
  if (r.draining) {
    return;
  }
  r.draining = true;
  while (r.head != nullptr) {
    sync_waiter* const w = r.head;
    r.head = w->m_next;
    if (r.head == nullptr) {
      r.tail = nullptr;
    }
    // Read the handle first: once resumed, the coroutine may destroy the node.
    resume(w->m_handle);
  }
  r.draining = false;
}

//! Waiters removed from a queue under the lock, to be woken once it is released. Linked
//! through `m_next`, which the queue no longer uses.
class wake_list {
public:
  void push(sync_waiter& w) noexcept {
    w.m_next = nullptr;
    (m_tail != nullptr ? m_tail->m_next : m_head) = &w;
    m_tail = &w;
  }

  //! Pops every waiter of `q` into this list with status `s`.
  void take_all(waiter_queue& q, wait_status s) noexcept {
    while (!q.empty()) {
      sync_waiter& w = q.pop_front();
      w.m_status = s;
      push(w);
    }
  }

  //! Arrives for each waiter, then resumes this thread's ready list. Call without the lock.
  void wake_all() noexcept {
    sync_waiter* w = m_head;
    m_head = m_tail = nullptr;
    while (w != nullptr) {
      sync_waiter* const next = w->m_next; // arrive() relinks (or frees) w
      arrive(*w);
      w = next;
    }
    resume_ready();
  }

private:
  sync_waiter* m_head = nullptr;
  sync_waiter* m_tail = nullptr;
};

} // namespace cuawait::detail
