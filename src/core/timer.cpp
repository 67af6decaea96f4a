// SPDX-License-Identifier: Apache-2.0
#include "cuawait/timer.hpp"

#include "cuawait/detail/trampoline.hpp"

#include <algorithm>
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
  m_home = detail::tl_execution.worker;
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
      m_service->on_new_earliest_locked();
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
    throw operation_cancelled(
        "cuawait::sleep cancelled: its timer_service was closed or destroyed");
  }
}

void sleep_awaiter::cancel() noexcept {
  {
    const std::lock_guard lock(m_service->m_mutex);
    if (!m_queued) {
      return; // the timer (or the service's destruction) took it first
    }
    m_service->m_sleeps.erase(this);
    m_service->publish_earliest_locked();
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
    ex->post_near(h, m_priority, m_home);
  } else {
    detail::resume(h);
  }
}

// --- timer_service -------------------------------------------------------------------------

namespace {
[[nodiscard]] std::int64_t ticks(timer_service::clock::time_point t) noexcept {
  return t.time_since_epoch().count();
}
} // namespace

timer_service::timer_service() : m_thread([this] { run(); }) {}

timer_service::timer_service(polled_t) noexcept : m_polled(true) {}

timer_service::~timer_service() {
  close();
  if (m_thread.joinable()) {
    m_thread.join();
  }
}

void timer_service::close() noexcept {
  std::vector<sleep_awaiter*> left;
  {
    const std::lock_guard lock(m_mutex); // under the lock: the thread cannot miss it
    m_closed = true;
    // A vector may fail to grow: then the sleeps are completed one at a time below.
    try {
      left.assign(m_sleeps.begin(), m_sleeps.end());
      m_sleeps.clear();
    } catch (...) {
      left.clear();
    }
    for (sleep_awaiter* s : left) {
      s->m_queued = false;
      s->m_status = detail::wait_status::closed;
    }
    publish_earliest_locked();
  }
  m_cv.notify_all();
  for (sleep_awaiter* s : left) {
    s->arrive_and_resume();
  }
  for (;;) { // only when the vector could not be filled
    sleep_awaiter* s = nullptr;
    {
      const std::lock_guard lock(m_mutex);
      if (m_sleeps.empty()) {
        break;
      }
      s = take_first_locked(detail::wait_status::closed);
    }
    s->arrive_and_resume();
  }
}

timer_service& timer_service::global() {
  static timer_service* const service = new timer_service();
  return *service;
}

timer_service& timer_service::current() noexcept {
  if (const executor* const ex = current_executor(); ex != nullptr) {
    if (timer_service* const t = ex->timers(); t != nullptr) {
      return *t;
    }
  }
  return global();
}

std::size_t timer_service::pending() const {
  const std::lock_guard lock(m_mutex);
  return m_sleeps.size();
}

sleep_awaiter* timer_service::take_first_locked(detail::wait_status status) noexcept {
  sleep_awaiter* const first = *m_sleeps.begin();
  m_sleeps.erase(m_sleeps.begin());
  first->m_queued = false;
  first->m_status = status;
  publish_earliest_locked();
  return first;
}

void timer_service::publish_earliest_locked() noexcept {
  m_earliest_ns.store(m_sleeps.empty() ? no_deadline : ticks((*m_sleeps.begin())->m_deadline),
                      std::memory_order_release);
}

void timer_service::on_new_earliest_locked() noexcept {
  publish_earliest_locked();
  if (!m_polled) {
    m_cv.notify_one();
  } else if (m_waker != nullptr) {
    m_waker(m_waker_context);
  }
}

void timer_service::set_idle_waker(void (*fn)(void*) noexcept, void* context) noexcept {
  const std::lock_guard lock(m_mutex);
  m_waker = fn;
  m_waker_context = context;
}

bool timer_service::idle_keep_spinning() const noexcept {
  const std::int64_t earliest = m_earliest_ns.load(std::memory_order_acquire);
  if (earliest == no_deadline || !m_polled) {
    return false;
  }
  return earliest - ticks(clock::now()) <=
         std::chrono::duration_cast<clock::duration>(spin_window).count();
}

bool timer_service::idle_due() const noexcept {
  const std::int64_t earliest = m_earliest_ns.load(std::memory_order_acquire);
  return m_polled && earliest != no_deadline && earliest <= ticks(clock::now());
}

std::chrono::nanoseconds timer_service::idle_park_period() const noexcept {
  const std::int64_t earliest = m_earliest_ns.load(std::memory_order_acquire);
  if (earliest == no_deadline) {
    return std::chrono::seconds(1);
  }
  // Wake up `spin_window` early: a timed park typically ends 50-60 us late (the kernel's
  // timer slack); the spin covers the rest.
  const auto window = std::chrono::duration_cast<clock::duration>(spin_window).count();
  const clock::duration left{std::max<std::int64_t>(earliest - ticks(clock::now()) - window, 0)};
  return std::chrono::duration_cast<std::chrono::nanoseconds>(left);
}

std::size_t timer_service::poll_idle() noexcept {
  if (!m_polled) {
    return 0;
  }
  const std::int64_t earliest = m_earliest_ns.load(std::memory_order_acquire);
  if (earliest == no_deadline || earliest > ticks(clock::now()) ||
      m_polling.exchange(true, std::memory_order_acquire)) {
    return 0;
  }
  std::size_t n = 0;
  for (;;) {
    sleep_awaiter* first = nullptr;
    {
      const std::lock_guard lock(m_mutex);
      if (m_sleeps.empty() || (*m_sleeps.begin())->m_deadline > clock::now()) {
        break;
      }
      first = take_first_locked(detail::wait_status::granted);
    }
    first->arrive_and_resume(); // outside the lock: it may resume inline
    ++n;
  }
  m_polling.store(false, std::memory_order_release);
  return n;
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
    (void)take_first_locked(detail::wait_status::granted);
    lock.unlock();
    first->arrive_and_resume();
    lock.lock();
  }
}

} // namespace cuawait
