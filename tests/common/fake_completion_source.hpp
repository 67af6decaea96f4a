// SPDX-License-Identifier: Apache-2.0
#pragma once

// A completion source the test drives by hand: it completes the work a token names
// whenever the test says so (any order), injects errors and a lost context, and counts
// what the reactor asks. Plus `fake_wait`, an awaiter for such work.

#include "cuawait/cancellation.hpp"
#include "cuawait/completion_reactor.hpp"
#include "cuawait/completion_source.hpp"

#include <atomic>
#include <coroutine>
#include <cstdint>
#include <functional>
#include <mutex>
#include <stop_token>
#include <unordered_map>
#include <utility>

namespace cuawait::test {

class fake_completion_source final : public completion_source {
public:
  //! `parallel`: the reactor may query from several idle threads at once, outside its lock
  //! (`completion_source::parallel_queries`); `unlocked`: only outside it, for a thread's
  //! own lane (`completion_source::unlocked_queries`); `query` is thread-safe either way.
  //! `costly`: every query is costly (`completion_source::costly_query`), as a driver call.
  explicit fake_completion_source(bool notifies = false, bool parallel = false,
                                  bool unlocked = false, bool costly = false)
      : m_notifies(notifies), m_parallel(parallel), m_unlocked(parallel || unlocked),
        m_costly(costly) {}

  //! Called at the start of every query, on the querying thread. Set before any wait.
  void set_query_hook(std::function<void()> hook) { m_hook = std::move(hook); }

  //! The reactor to notify on each completion (when constructed with notifies = true).
  void attach(completion_reactor* r) { m_reactor.store(r); }

  //! Marks `token`'s work finished (or failed with `error` when non-zero).
  void complete(std::uint64_t token, int error = 0) {
    {
      const std::lock_guard lock(m_mutex);
      m_status[token] = error == 0 ? completion_status{completion_state::done, 0}
                                   : completion_status{completion_state::failed, error};
    }
    ping();
  }
  //! From now on every query reports a lost context with `error`.
  void lose_context(int error) {
    {
      const std::lock_guard lock(m_mutex);
      m_lost_error = error;
    }
    ping();
  }

  completion_status query(const detail::wait_node& w) noexcept override {
    m_queries.fetch_add(1, std::memory_order_relaxed);
    if (m_hook) {
      m_hook();
    }
    const std::lock_guard lock(m_mutex);
    if (m_lost_error != 0) {
      return {completion_state::context_lost, m_lost_error};
    }
    const auto it = m_status.find(w.token);
    return it == m_status.end() ? completion_status{} : it->second;
  }
  void retire(detail::wait_node&) noexcept override {
    m_retired.fetch_add(1, std::memory_order_relaxed);
  }
  [[nodiscard]] bool notifies() const noexcept override { return m_notifies; }
  [[nodiscard]] bool parallel_queries() const noexcept override { return m_parallel; }
  [[nodiscard]] bool unlocked_queries() const noexcept override { return m_unlocked; }
  [[nodiscard]] bool costly_query(const detail::wait_node&) const noexcept override {
    return m_costly;
  }

  [[nodiscard]] std::uint64_t queries() const { return m_queries.load(); }
  [[nodiscard]] std::uint64_t retired() const { return m_retired.load(); }

private:
  void ping() {
    if (completion_reactor* r = m_reactor.load(); r != nullptr && m_notifies) {
      r->notify();
    }
  }

  bool m_notifies;
  bool m_parallel;
  bool m_unlocked;
  bool m_costly;
  std::function<void()> m_hook;
  std::atomic<completion_reactor*> m_reactor{nullptr};
  std::mutex m_mutex;
  std::unordered_map<std::uint64_t, completion_status> m_status;
  int m_lost_error = 0;
  std::atomic<std::uint64_t> m_queries{0};
  std::atomic<std::uint64_t> m_retired{0};
};

//! Rings a doorbell as finishing work does: a value never written to it before.
inline void ring(std::uint64_t& bell) {
  std::atomic_ref<std::uint64_t>(bell).fetch_add(1, std::memory_order_release);
}

//! `co_await fake_wait{reactor, lane, token}` suspends until the fake completes `token`
//! and yields the completion status. Like a GPU `operation`, it honours a stop token (the
//! one given, else the awaiting coroutine's): a stop request throws `operation_cancelled`.
class fake_wait {
public:
  //! `bell`: the doorbell the test rings (`ring`) after completing `token` (see
  //! `wait_node::bell`), or nullptr.
  fake_wait(completion_reactor& r, std::uintptr_t lane, std::uint64_t token,
            std::stop_token stop = {}, std::uint64_t* bell = nullptr)
      : m_reactor(&r), m_stop(std::move(stop)) {
    m_wait.node().lane_key = reinterpret_cast<const void*>(lane);
    m_wait.node().token = token;
    m_wait.node().bell = bell;
    m_wait.node().operation = "fake";
  }
  fake_wait(fake_wait&&) noexcept = default; // before it is awaited (when_any moves it)
  bool await_ready() const noexcept { return false; }
  template <class Promise>
  bool await_suspend(std::coroutine_handle<Promise> h) noexcept {
    return detail::with_wait_stop_token(h, m_stop, [&](const std::stop_token& t) {
      return !m_wait.stop_before_submit(t) && m_wait.suspend(*m_reactor, h, t);
    });
  }
  completion_status await_resume() {
    const completion_status st = m_wait.finish();
    if (m_wait.stopped()) {
      throw operation_cancelled("fake wait cancelled");
    }
    return st;
  }

private:
  completion_reactor* m_reactor;
  std::stop_token m_stop;
  detail::reactor_wait m_wait;
};

} // namespace cuawait::test
