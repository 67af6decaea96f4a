// SPDX-License-Identifier: Apache-2.0
// The NCCL watchdog: one thread per process that, while NCCL waits are pending, polls their
// communicators' `ncclCommGetAsyncError`, runs the aborts that stop requests ask for, and
// ends the waits of a failed or aborted communicator. It parks when nothing is pending.

#include "comm_state.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace cuawait::nccl::detail {

namespace {

//! How often pending communicators are checked.
constexpr std::chrono::milliseconds check_period{1};

class watchdog {
public:
  watchdog() = default;
  watchdog(const watchdog&) = delete;
  watchdog& operator=(const watchdog&) = delete;
  ~watchdog() {
    {
      const std::lock_guard lock(m_mutex);
      m_quit = true;
    }
    m_cv.notify_all();
    if (m_thread.joinable()) {
      m_thread.join();
    }
  }

  void link(watch_entry& e) {
    const std::lock_guard lock(m_mutex);
    if (e.linked) {
      return;
    }
    if (!m_thread.joinable()) {
      m_thread = std::thread([this] { run(); });
    }
    e.prev = nullptr;
    e.next = m_head;
    if (m_head != nullptr) {
      m_head->prev = &e;
    }
    m_head = &e;
    e.linked = true;
    m_cv.notify_all();
  }

  void unlink(watch_entry& e) noexcept {
    const std::lock_guard lock(m_mutex);
    if (!e.linked) {
      return;
    }
    (e.prev != nullptr ? e.prev->next : m_head) = e.next;
    if (e.next != nullptr) {
      e.next->prev = e.prev;
    }
    e.prev = e.next = nullptr;
    e.linked = false;
  }

  //! Queues an abort for the thread; false when that was impossible (out of memory, or
  //! the thread never started): the caller aborts itself.
  bool queue_abort(comm_state& s) noexcept {
    try {
      const std::lock_guard lock(m_mutex);
      if (!m_thread.joinable()) {
        m_thread = std::thread([this] { run(); });
      }
      m_aborts.push_back(s.shared_from_this());
    } catch (...) {
      return false;
    }
    m_cv.notify_all();
    return true;
  }

private:
  void run() {
    std::vector<std::shared_ptr<comm_state>> states;
    std::unique_lock lock(m_mutex);
    while (!m_quit) {
      if (m_head == nullptr && m_aborts.empty()) {
        m_cv.wait(lock, [&] { return m_quit || m_head != nullptr || !m_aborts.empty(); });
        continue;
      }
      // Waits on a communicator being aborted end first: ncclCommAbort may block until
      // work already on the GPU lets go, and no coroutine should wait for that.
      stop_failed(lock);
      states.assign(m_aborts.begin(), m_aborts.end());
      m_aborts.clear();
      for (watch_entry* e = m_head; e != nullptr; e = e->next) {
        if (std::find(states.begin(), states.end(), e->state) == states.end()) {
          states.push_back(e->state);
        }
      }
      lock.unlock();
      for (const auto& s : states) {
        check(*s);
      }
      states.clear();
      lock.lock();
      stop_failed(lock); // those an asynchronous error just failed
      m_cv.wait_for(lock, check_period, [&] { return m_quit || !m_aborts.empty(); });
    }
  }

  //! Requests stop on every linked wait whose communicator failed or is being aborted.
  //! Called and returns with `lock` held; releases it meanwhile (a stop may resume a
  //! coroutine inline, which unlinks its entry).
  void stop_failed(std::unique_lock<std::mutex>& lock) {
    for (watch_entry* e = m_head; e != nullptr; e = e->next) {
      if (e->state->abort_requested.load(std::memory_order_acquire) && !e->inner.stop_requested()) {
        m_to_stop.push_back(e->inner); // a copy keeps the stop state alive after unlock
      }
    }
    if (m_to_stop.empty()) {
      return;
    }
    lock.unlock();
    for (auto& s : m_to_stop) {
      s.request_stop();
    }
    m_to_stop.clear();
    lock.lock();
  }

  //! Runs an abort asked for, or looks for an asynchronous error (and then aborts).
  static void check(comm_state& s) noexcept {
    const std::lock_guard lock(s.mutex);
    if (s.comm == nullptr) {
      return;
    }
    if (s.abort_requested.load(std::memory_order_acquire)) {
      s.abort_locked();
      return;
    }
    ncclResult_t async = ncclSuccess;
    if (ncclCommGetAsyncError(s.comm, &async) != ncclSuccess) {
      return; // nothing better to report than what the next call will say
    }
    if (async != ncclSuccess && async != ncclInProgress) {
      s.error.store(async, std::memory_order_release);
      s.abort_locked(); // NCCL's advice after an asynchronous error; also stops its kernels
    }
  }

  std::mutex m_mutex;
  std::condition_variable m_cv;
  watch_entry* m_head = nullptr;
  std::vector<std::shared_ptr<comm_state>> m_aborts;
  std::vector<std::stop_source> m_to_stop; // the thread's only
  bool m_quit = false;
  std::thread m_thread; // last
};

watchdog& the_watchdog() {
  static watchdog w;
  return w;
}

} // namespace

void watch(watch_entry& e) { the_watchdog().link(e); }

void unwatch(watch_entry& e) noexcept { the_watchdog().unlink(e); }

void request_abort(comm_state& s) noexcept {
  if (s.abort_requested.exchange(true, std::memory_order_acq_rel)) {
    return;
  }
  if (!the_watchdog().queue_abort(s)) {
    const std::lock_guard lock(s.mutex);
    s.abort_locked();
  }
}

bool failed(const comm_state& s) noexcept {
  return s.abort_requested.load(std::memory_order_acquire);
}

} // namespace cuawait::nccl::detail
