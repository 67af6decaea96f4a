// SPDX-License-Identifier: Apache-2.0
#include "cuawait/timer.hpp"

#include "cuawait/detail/trampoline.hpp"

#include <vector>

namespace cuawait {

// --- sleep_awaiter -------------------------------------------------------------------------
// The arrival handshake of detail::sync_waiter: whichever of await_suspend and the
// completing side (the timer, a stop request, the service's destruction) sets m_arrived
// second resumes the coroutine; await_suspend, if second, just does not suspend.

bool sleep_awaiter::suspend(std::coroutine_handle<> h) {
  if (m_token.stop_requested()) {
    m_status = detail::wait_status::cancelled;
    return false;
  }
  if (m_deadline <= clock::now()) {
    m_status = detail::wait_status::granted;
    return false;
  }
  m_handle = h;
  m_executor = current_executor();
  m_priority = current_priority();
  const bool cancellable = m_token.stop_possible();
  m_arrived.store(!cancellable, std::memory_order_relaxed);
  {
    const std::lock_guard lock(m_service->m_mutex);
    if (m_service->m_closed) {
      m_status = detail::wait_status::closed;
      return false;
    }
    m_seq = m_service->m_next_seq++;
    const bool earliest =
        m_service->m_sleeps.empty() || earlier{}(this, *m_service->m_sleeps.begin());
    m_service->m_sleeps.insert(this); // may throw std::bad_alloc: nothing registered then
    m_queued = true;
    if (earliest) {
      m_service->m_cv.notify_one();
    }
  }
  if (!cancellable) {
    return true; // the timer may already be resuming us: touch nothing
  }
  m_stop.emplace(m_token, on_stop{this}); // may run cancel() inline
  return !m_arrived.exchange(true, std::memory_order_acq_rel);
}

void sleep_awaiter::await_resume() {
  m_stop.reset(); // waits for a stop callback running on another thread
  if (m_status == detail::wait_status::cancelled) {
    throw operation_cancelled("cuawait::sleep cancelled");
  }
  if (m_status == detail::wait_status::closed) {
    throw operation_cancelled("cuawait::sleep cancelled: its timer_service was destroyed");
  }
}

void sleep_awaiter::cancel() noexcept {
  {
    const std::lock_guard lock(m_service->m_mutex);
    if (!m_queued) {
      return; // the timer (or the service's destruction) took it first
    }
    m_service->m_sleeps.erase(this);
    m_queued = false;
    m_status = detail::wait_status::cancelled;
  }
  arrive_and_resume();
}

void sleep_awaiter::arrive_and_resume() noexcept {
  if (!m_arrived.exchange(true, std::memory_order_acq_rel)) {
    return; // await_suspend has not finished: it sees the arrival and does not suspend
  }
  // Ours until resumed: read what we need first, the coroutine may free us at once.
  const std::coroutine_handle<> h = m_handle;
  if (executor* const ex = m_executor; ex != nullptr) {
    ex->post(h, m_priority);
  } else {
    detail::resume(h);
  }
}

// --- timer_service -------------------------------------------------------------------------

timer_service::timer_service() : m_thread([this] { run(); }) {}

timer_service::~timer_service() {
  {
    const std::lock_guard lock(m_mutex); // under the lock: the thread cannot miss it
    m_closed = true;
  }
  m_cv.notify_all();
  m_thread.join();
  std::vector<sleep_awaiter*> left;
  {
    const std::lock_guard lock(m_mutex);
    left.assign(m_sleeps.begin(), m_sleeps.end());
    m_sleeps.clear();
    for (sleep_awaiter* s : left) {
      s->m_queued = false;
      s->m_status = detail::wait_status::closed;
    }
  }
  for (sleep_awaiter* s : left) {
    s->arrive_and_resume();
  }
}

timer_service& timer_service::global() {
  static timer_service* const service = new timer_service();
  return *service;
}

std::size_t timer_service::pending() const {
  const std::lock_guard lock(m_mutex);
  return m_sleeps.size();
}

void timer_service::run() {
  std::unique_lock lock(m_mutex);
  while (!m_closed) {
    if (m_sleeps.empty()) {
      m_cv.wait(lock);
      continue;
    }
    sleep_awaiter* const first = *m_sleeps.begin();
    // A copy: wait_until reads its argument again after waking, and by then the sleep may
    // have been cancelled and its coroutine frame (which holds m_deadline) freed.
    if (const clock::time_point deadline = first->m_deadline; deadline > clock::now()) {
      m_cv.wait_until(lock, deadline);
      continue;
    }
    // Due: one at a time, in deadline order, resumed outside the lock (no allocation here).
    m_sleeps.erase(m_sleeps.begin());
    first->m_queued = false;
    first->m_status = detail::wait_status::granted;
    lock.unlock();
    first->arrive_and_resume();
    lock.lock();
  }
}

} // namespace cuawait
