// SPDX-License-Identifier: Apache-2.0
#include "cuawait/run_loop.hpp"

#include "busy_poll.hpp"

#include "cuawait/detail/cpu_relax.hpp"
#include "cuawait/detail/trampoline.hpp"

#include <cstdlib>
#include <string_view>

namespace cuawait {

run_loop::run_loop() : m_busy_poll_ns(detail::busy_poll_period_ns()) {}

run_loop::~run_loop() { poll(); }

void run_loop::post(std::coroutine_handle<> h, priority p) noexcept {
  // Notify under the lock: once the item is visible the driver may run it, finish and
  // destroy the loop, so nothing here may touch the loop after the unlock.
  const std::lock_guard lock(m_mutex);
  m_queue.push(h, p);
  m_posts.fetch_add(1, std::memory_order_relaxed);
  m_cv.notify_one(); // one driver at a time
}

void run_loop::execute(std::coroutine_handle<> h, priority p) noexcept {
  // Its waits are counted (and it spins for them) only when it polls a source itself.
  const executor_scope scope(this, p, m_source != nullptr ? &m_waits : nullptr);
  detail::resume(h);
}

bool run_loop::spin_for_all() noexcept {
  static const bool all = [] {
    const char* v = std::getenv("CUAWAIT_LOOP_SPIN");
    return v != nullptr && std::string_view(v) == "all";
  }();
  return all;
}

bool run_loop::posted_since(const void* context) noexcept {
  const auto& p = *static_cast<const posts_seen*>(context);
  return p.loop->m_posts.load(std::memory_order_relaxed) != p.seen;
}

template <class Stop>
void run_loop::poll_source(std::unique_lock<std::mutex>& lock, Stop&& stop) {
  idle_source* const src = m_source;
  if (src == nullptr) {
    return;
  }
  // Spins only while one of its own coroutines waits on the source: completions of other
  // executors' coroutines are found by those (a pool's idle workers); spinning for them here
  // would only take a core from them. CUAWAIT_LOOP_SPIN=all spins for any pending work.
  while (m_queue.empty() && !stop() && src->idle_pending() &&
         (m_waits.load(std::memory_order_relaxed) > 0 || spin_for_all())) {
    const posts_seen seen{this, m_posts.load(std::memory_order_relaxed)};
    lock.unlock();
    // A completion for this loop is posted to it (under m_mutex, not held here).
    detail::tl_idle_poller = {&posted_since, &seen, &m_waits};
    const bool progress = src->poll_idle() != 0;
    detail::tl_idle_poller = {};
    if (!progress && !src->idle_keep_spinning()) {
      lock.lock();
      return;
    }
    detail::cpu_relax();
    lock.lock();
  }
}

template <class Ready>
void run_loop::wait(std::unique_lock<std::mutex>& lock, Ready&& ready) {
  if (idle_source* const src = m_source; src != nullptr && src->idle_pending()) {
    // Work pending that only polling finds: nap, then poll again (a post wakes it early).
    // Work known to be ready when the nap ends (a sleep of a polled timer service, which is
    // not counted among this loop's waits) is polled for here, whoever it belongs to.
    if (!m_cv.wait_for(lock, src->idle_park_period(), ready) && src->idle_due()) {
      lock.unlock();
      (void)src->poll_idle();
      lock.lock();
    }
  } else {
    m_cv.wait(lock, ready);
  }
}

void run_loop::run() { drive(m_finish, true); }

bool run_loop::busy_poll_due(std::uint64_t& since) const noexcept {
  if (m_busy_poll_ns == 0 || m_source == nullptr ||
      (m_waits.load(std::memory_order_relaxed) <= 0 && !spin_for_all())) {
    return false; // only for its own waits, as when it runs dry (see poll_source)
  }
  const std::uint64_t now = detail::steady_ns();
  if (now - since < m_busy_poll_ns) {
    return false;
  }
  since = now;
  return m_source->idle_pending();
}

void run_loop::drive(bool& stop, bool consume) {
  std::uint64_t busy_since = m_busy_poll_ns != 0 ? detail::steady_ns() : 0;
  for (;;) {
    std::unique_lock lock(m_mutex);
    const auto ready = [&] { return stop || !m_queue.empty(); };
    if (m_busy_poll_ns != 0 && m_source != nullptr && m_queue.empty()) {
      busy_since = detail::steady_ns(); // ran dry: it polls below if it has waits
    }
    poll_source(lock, ready);
    wait(lock, ready);
    if (!ready()) {
      continue; // a nap ended: poll again
    }
    if (stop) {
      if (consume) {
        stop = false;
      }
      return;
    }
    if (busy_poll_due(busy_since)) {
      // Never ran dry for a period: poll once, nothing spun on, then look again (the poll
      // may have posted, finished or stopped the loop).
      lock.unlock();
      detail::tl_idle_poller = detail::busy_poller;
      (void)m_source->poll_busy();
      detail::tl_idle_poller = {};
      continue;
    }
    const auto [h, p] = m_queue.pop();
    lock.unlock();
    execute(h, p);
  }
}

bool run_loop::run_one() {
  std::unique_lock lock(m_mutex);
  m_cv.wait(lock, [this] { return m_finish || m_wake_pending || !m_queue.empty(); });
  if (m_queue.empty()) {
    m_wake_pending = false;
    return false;
  }
  const auto [h, p] = m_queue.pop();
  lock.unlock();
  execute(h, p);
  return true;
}

std::size_t run_loop::poll() {
  std::size_t n = 0;
  for (;;) {
    std::unique_lock lock(m_mutex);
    if (m_queue.empty()) {
      return n;
    }
    const auto [h, p] = m_queue.pop();
    lock.unlock();
    execute(h, p);
    ++n;
  }
}

void run_loop::mark_done(bool& done) noexcept {
  // Notify under the lock: once the driver sees `done` it may destroy the loop.
  const std::lock_guard lock(m_mutex);
  done = true;
  m_cv.notify_all();
}

void run_loop::finish() noexcept {
  const std::lock_guard lock(m_mutex);
  m_finish = true;
  m_cv.notify_all();
}

void run_loop::wake() noexcept {
  const std::lock_guard lock(m_mutex);
  m_wake_pending = true;
  m_cv.notify_all();
}

std::size_t run_loop::pending() const noexcept {
  const std::lock_guard lock(m_mutex);
  return m_queue.size();
}

} // namespace cuawait
