// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The machinery of `async_scope`: a count of live spawned tasks with a "joiner waiting"
//! bit in one atomic word, the first exception, the stop source, and the self-destroying
//! wrapper coroutine each spawned awaitable runs in.

#include "cuawait/detail/trampoline.hpp"

#include <atomic>
#include <coroutine>
#include <cstdint>
#include <exception>
#include <mutex>
#include <stop_token>
#include <utility>

namespace cuawait::detail {

//! Word layout: live tasks << 1 | joiner-waiting bit. Completing the last task and
//! clearing the bit happen in one compare-exchange, so a joiner is resumed exactly once
//! even while other threads spawn and finish tasks.
class async_scope_state {
public:
  async_scope_state() = default;
  async_scope_state(const async_scope_state&) = delete;
  async_scope_state& operator=(const async_scope_state&) = delete;

  [[nodiscard]] std::uint64_t live_tasks() const noexcept {
    return m_word.load(std::memory_order_acquire) >> 1;
  }
  void task_added() noexcept { m_word.fetch_add(2, std::memory_order_relaxed); }

  //! A task finished (after its frame was freed). Returns the joiner to resume when this
  //! was the last task and a joiner waits, else a null handle. After this call the scope
  //! may be destroyed by another thread unless a joiner was returned.
  [[nodiscard]] std::coroutine_handle<> task_done() noexcept {
    std::uint64_t old = m_word.load(std::memory_order_relaxed);
    std::uint64_t next = 0;
    do {
      next = old - 2;
      if (next == joiner_bit) {
        next = 0; // we claim the joiner
      }
    } while (!m_word.compare_exchange_weak(old, next, std::memory_order_acq_rel,
                                           std::memory_order_relaxed));
    return old == (2 | joiner_bit) ? m_joiner : std::coroutine_handle<>{};
  }

  //! Registers `joiner`; false when no task is live (the joiner must not suspend).
  [[nodiscard]] bool join_suspend(std::coroutine_handle<> joiner) noexcept {
    m_joiner = joiner;
    std::uint64_t old = m_word.load(std::memory_order_acquire);
    do {
      if ((old >> 1) == 0) {
        return false;
      }
    } while (!m_word.compare_exchange_weak(old, old | joiner_bit, std::memory_order_acq_rel,
                                           std::memory_order_acquire));
    return true;
  }

  void record_exception(std::exception_ptr e) noexcept {
    const std::lock_guard lock(m_exception_mutex);
    if (!m_exception) {
      m_exception = std::move(e);
    }
  }
  //! Rethrows (and forgets) the first exception recorded since the last join.
  void rethrow_exception() {
    std::exception_ptr e;
    {
      const std::lock_guard lock(m_exception_mutex);
      e = std::exchange(m_exception, nullptr);
    }
    if (e) {
      std::rethrow_exception(e);
    }
  }

  [[nodiscard]] std::stop_token get_stop_token() const noexcept { return m_stop.get_token(); }
  //! Through a copy of the source: spawned work may finish inline and let the owner destroy
  //! the scope while the request is still running; the copy keeps the stop state alive.
  void request_stop() noexcept {
    std::stop_source keep = m_stop;
    keep.request_stop();
  }

private:
  static constexpr std::uint64_t joiner_bit = 1;

  std::atomic<std::uint64_t> m_word{0};
  std::coroutine_handle<> m_joiner;
  std::mutex m_exception_mutex; // only taken when a task throws and at join
  std::exception_ptr m_exception;
  std::stop_source m_stop;
};

//! The coroutine a spawned awaitable runs in. It frees its own frame when it finishes.
class async_scope_task {
public:
  struct promise_type {
    async_scope_state* scope = nullptr;

    struct final_awaiter {
      [[nodiscard]] bool await_ready() const noexcept { return false; }
      std::coroutine_handle<> await_suspend(std::coroutine_handle<promise_type> h) noexcept {
        async_scope_state* const s = h.promise().scope;
        h.destroy(); // the spawned work and its frame go before the scope learns of it
        if (const std::coroutine_handle<> joiner = s->task_done()) {
          return transfer_to(joiner);
        }
        return std::noop_coroutine();
      }
      void await_resume() const noexcept {}
    };

    async_scope_task get_return_object() noexcept {
      return async_scope_task{std::coroutine_handle<promise_type>::from_promise(*this)};
    }
    std::suspend_always initial_suspend() const noexcept { return {}; }
    final_awaiter final_suspend() const noexcept { return {}; }
    void return_void() const noexcept {}
    void unhandled_exception() noexcept { scope->record_exception(std::current_exception()); }
    //! Spawned cuawait tasks inherit the scope's token.
    [[nodiscard]] std::stop_token get_stop_token() const noexcept {
      return scope->get_stop_token();
    }
  };

  explicit async_scope_task(std::coroutine_handle<promise_type> h) noexcept : m_handle(h) {}
  [[nodiscard]] std::coroutine_handle<promise_type> handle() const noexcept { return m_handle; }

private:
  std::coroutine_handle<promise_type> m_handle;
};

template <class A>
async_scope_task make_async_scope_task(A awaitable) {
  co_await std::move(awaitable);
}

} // namespace cuawait::detail
