// SPDX-License-Identifier: Apache-2.0
#pragma once

// A deterministic executor for tests: post() only queues; the test decides when, and in
// which order, each queued coroutine resumes, so it can force any interleaving.

#include <cuawait/detail/trampoline.hpp>
#include <cuawait/executor.hpp>

#include <coroutine>
#include <cstddef>
#include <mutex>
#include <stdexcept>
#include <utility>
#include <vector>

namespace cuawait::test {

class manual_executor final : public executor {
public:
  struct entry {
    std::coroutine_handle<> handle;
    priority prio;
  };

  //! Queues `h`; thread-safe, so completions from other threads can land here too.
  void post(std::coroutine_handle<> h, priority p) noexcept override {
    const std::lock_guard lock(m_mutex);
    m_queue.push_back({h, p});
  }

  //! Awaiter: `co_await ex.schedule()` queues the coroutine here.
  struct schedule_awaiter {
    manual_executor& ex;
    priority prio;
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h) const noexcept { ex.post(h, prio); }
    void await_resume() const noexcept {}
  };
  schedule_awaiter schedule(priority p = priority::normal) noexcept { return {*this, p}; }

  [[nodiscard]] std::size_t size() const {
    const std::lock_guard lock(m_mutex);
    return m_queue.size();
  }
  [[nodiscard]] bool empty() const { return size() == 0; }

  //! A copy of what is queued, oldest first.
  [[nodiscard]] std::vector<entry> snapshot() const {
    const std::lock_guard lock(m_mutex);
    return m_queue;
  }

  //! Resumes the oldest queued coroutine; false when nothing is queued.
  bool run_one() { return run_at(0); }

  //! Resumes the newest queued coroutine (LIFO); false when nothing is queued.
  bool run_newest() {
    std::size_t n = size();
    return n != 0 && run_at(n - 1);
  }

  //! Resumes the queued coroutine at `index` (0 = oldest); false when there is none.
  bool run_at(std::size_t index) {
    entry e;
    {
      const std::lock_guard lock(m_mutex);
      if (index >= m_queue.size()) {
        return false;
      }
      e = m_queue[index];
      m_queue.erase(m_queue.begin() + static_cast<std::ptrdiff_t>(index));
    }
    const executor_scope scope(this, e.prio);
    detail::resume(e.handle);
    return true;
  }

  //! Resumes queued coroutines, oldest first, until none is queued (including those
  //! queued meanwhile). Returns the number of resumptions.
  std::size_t run_all() {
    std::size_t n = 0;
    while (run_one()) {
      ++n;
    }
    return n;
  }

private:
  mutable std::mutex m_mutex;
  std::vector<entry> m_queue;
};

} // namespace cuawait::test
