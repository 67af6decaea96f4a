// SPDX-License-Identifier: Apache-2.0
#pragma once

// What the coroutines of a running random program share: the executor, the timer, the
// records, the failures the synchronisation groups saw, and a count of live objects.

#include "program.hpp"

#include <cuawait/task.hpp>
#include <cuawait/thread_pool.hpp>
#include <cuawait/timer.hpp>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

namespace cuawait::stress {

//! Counts the objects alive: one in each node's coroutine frame, in each exception a
//! failing leaf throws, in each channel value. Zero again once a program is over.
class tracked {
public:
  tracked() noexcept { s_live.fetch_add(1, std::memory_order_relaxed); }
  tracked(const tracked&) noexcept : tracked() {}
  tracked& operator=(const tracked&) noexcept = default;
  ~tracked() { s_live.fetch_sub(1, std::memory_order_relaxed); }
  [[nodiscard]] static long live() noexcept { return s_live.load(std::memory_order_relaxed); }

private:
  static inline std::atomic<long> s_live{0};
};

//! What a failing leaf throws: its node id.
struct test_error {
  int id;
  tracked alive;
};

//! A value sent through a channel group: its number in the group.
struct payload {
  int id;
  tracked alive;
};

class context {
public:
  explicit context(const program& p)
      : prog(p), records(p.nodes.size()), pool(static_cast<std::size_t>(p.threads)) {}
  context(const context&) = delete;
  context& operator=(const context&) = delete;
  ~context() { join_cancellers(); }

  //! Notes a violated invariant (thread-safe).
  void fail(std::string what) {
    const std::lock_guard lock(m_mutex);
    if (m_failures.size() < 20) {
      m_failures.push_back(std::move(what));
    }
  }

  //! Requests stop on `source` from a plain thread after `delay_us`.
  void start_canceller(std::stop_source source, int delay_us) {
    const std::lock_guard lock(m_mutex);
    m_cancellers.emplace_back([source, delay_us]() mutable {
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(delay_us);
      while (std::chrono::steady_clock::now() < until) {
        std::this_thread::yield(); // a random point in time, not a wait for a result
      }
      source.request_stop();
    });
  }

  void join_cancellers() {
    std::vector<std::thread> threads;
    {
      const std::lock_guard lock(m_mutex);
      threads.swap(m_cancellers);
    }
    for (auto& t : threads) {
      t.join();
    }
  }

  [[nodiscard]] std::vector<std::string> failures() {
    const std::lock_guard lock(m_mutex);
    return m_failures;
  }

  const program& prog;
  std::vector<record> records; //!< written by each node's coroutine, read once it is over
  thread_pool pool;
  timer_service timers; //!< after the pool: sleepers resume on it

private:
  std::mutex m_mutex;
  std::vector<std::string> m_failures;
  std::vector<std::thread> m_cancellers;
};

//! The synchronisation groups (program_groups.cpp). Each returns `n.value` whatever the
//! interleaving or cancellation, and reports broken invariants through `ctx.fail`.
task<std::uint64_t> channel_group(context& ctx, const node& n);
task<std::uint64_t> mutex_group(context& ctx, const node& n);
task<std::uint64_t> semaphore_group(context& ctx, const node& n);
task<std::uint64_t> event_group(context& ctx, const node& n);
task<std::uint64_t> latch_group(context& ctx, const node& n);

} // namespace cuawait::stress
