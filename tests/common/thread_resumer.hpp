// SPDX-License-Identifier: Apache-2.0
#pragma once

// Test helpers for the async primitives: `thread_resumer`, a few std::threads that resume
// coroutines posted to them (`co_await r.schedule()` moves a coroutine onto one), and
// `task_group`, which starts tasks eagerly and blocks until all of them have finished.
// Deliberately minimal and independent of the library's thread_pool.

#include <cuawait/detail/trampoline.hpp>
#include <cuawait/task.hpp>

#include "detached.hpp"

#include <condition_variable>
#include <coroutine>
#include <cstddef>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace cuawait::test {

//! N threads resuming, in FIFO order, the coroutines posted to them. The destructor
//! resumes everything still queued, then joins.
class thread_resumer {
public:
  explicit thread_resumer(std::size_t threads) {
    for (std::size_t i = 0; i < threads; ++i) {
      m_threads.emplace_back([this] { run(); });
    }
  }
  thread_resumer(const thread_resumer&) = delete;
  thread_resumer& operator=(const thread_resumer&) = delete;
  ~thread_resumer() {
    {
      const std::lock_guard lock(m_mutex);
      m_stopping = true;
    }
    m_cv.notify_all();
    for (std::thread& t : m_threads) {
      t.join();
    }
  }

  void post(std::coroutine_handle<> h) {
    {
      const std::lock_guard lock(m_mutex);
      m_queue.push_back(h);
    }
    m_cv.notify_one();
  }

  //! `co_await schedule()` continues the coroutine on one of the threads.
  auto schedule() noexcept {
    struct awaiter {
      thread_resumer& self;
      bool await_ready() const noexcept { return false; }
      void await_suspend(std::coroutine_handle<> h) { self.post(h); }
      void await_resume() const noexcept {}
    };
    return awaiter{*this};
  }

private:
  void run() {
    for (;;) {
      std::coroutine_handle<> h;
      {
        std::unique_lock lock(m_mutex);
        m_cv.wait(lock, [this] { return m_stopping || !m_queue.empty(); });
        if (m_queue.empty()) {
          return;
        }
        h = m_queue.front();
        m_queue.pop_front();
      }
      cuawait::detail::resume(h);
    }
  }

  std::mutex m_mutex;
  std::condition_variable m_cv;
  std::deque<std::coroutine_handle<>> m_queue;
  bool m_stopping = false;
  std::vector<std::thread> m_threads;
};

//! Starts tasks at once on the calling thread (they run until their first suspension) and
//! lets a thread block until every one has finished. `wait()` rethrows the first exception
//! a task let escape. A task's frame is destroyed before it counts as finished, so what it
//! owned is gone when `wait()` returns.
class task_group {
public:
  task_group() = default;
  task_group(const task_group&) = delete;
  task_group& operator=(const task_group&) = delete;
  ~task_group() { wait_noexcept(); }

  void spawn(cuawait::task<void> t) {
    {
      const std::lock_guard lock(m_mutex);
      ++m_outstanding;
    }
    run(this, std::move(t));
  }

  //! Starts `make()` and keeps the callable alive until the task ends, so a lambda's
  //! captures outlive its coroutine (the closure of a coroutine lambda called in place dies
  //! at the end of the full expression, before the coroutine finishes).
  template <class F>
  void spawn_call(F make) {
    spawn(call_owned(std::move(make)));
  }

  void wait() {
    wait_noexcept();
    const std::lock_guard lock(m_mutex);
    if (m_error) {
      std::rethrow_exception(std::exchange(m_error, nullptr));
    }
  }

private:
  template <class F>
  static cuawait::task<void> call_owned(F make) {
    co_await make();
  }

  static detached run(task_group* g, cuawait::task<void> t) {
    std::exception_ptr error;
    {
      cuawait::task<void> owned = std::move(t);
      try {
        co_await std::move(owned);
      } catch (...) {
        error = std::current_exception();
      }
    }
    g->finish(std::move(error));
  }

  void finish(std::exception_ptr error) noexcept {
    // Notify under the lock: the waiter may destroy the group as soon as it sees zero.
    const std::lock_guard lock(m_mutex);
    if (error && !m_error) {
      m_error = std::move(error);
    }
    if (--m_outstanding == 0) {
      m_cv.notify_all();
    }
  }

  void wait_noexcept() noexcept {
    std::unique_lock lock(m_mutex);
    m_cv.wait(lock, [this] { return m_outstanding == 0; });
  }

  std::mutex m_mutex;
  std::condition_variable m_cv;
  std::size_t m_outstanding = 0;
  std::exception_ptr m_error;
};

} // namespace cuawait::test
