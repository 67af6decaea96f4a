// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The promise behind `shared_task<T>`: a reference count, a lock-free stack of waiting
//! coroutines, the result or exception, and the awaiter that starts, joins or reads it.
//!
//! The state word is one atomic pointer: "not started", "completed" (two addresses inside
//! the promise that are never waiter nodes) or else the head of a stack of waiters linked
//! through `sync_waiter::m_next`. The first awaiter swaps "not started" for a stack holding
//! itself and transfers to the body; later awaiters push themselves; the body's final
//! suspension swaps in "completed" and resumes the stack it took, oldest first.

#include "cuawait/detail/sync_waiter.hpp"
#include "cuawait/detail/trampoline.hpp"

#include <atomic>
#include <concepts>
#include <coroutine>
#include <cstddef>
#include <exception>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <type_traits>
#include <utility>

namespace cuawait {

template <class T>
class shared_task;

} // namespace cuawait

namespace cuawait::detail {

class shared_task_promise_base {
public:
  struct final_awaiter {
    [[nodiscard]] bool await_ready() const noexcept { return false; }
    template <class Promise>
    void await_suspend(std::coroutine_handle<Promise> h) noexcept {
      h.promise().complete();
    }
    void await_resume() const noexcept {}
  };

  shared_task_promise_base() noexcept = default;
  shared_task_promise_base(const shared_task_promise_base&) = delete;
  shared_task_promise_base& operator=(const shared_task_promise_base&) = delete;

  std::suspend_always initial_suspend() const noexcept { return {}; }
  final_awaiter final_suspend() const noexcept { return {}; }
  void unhandled_exception() noexcept { m_exception = std::current_exception(); }

  //! The token the body sees; the body's own, never an awaiter's (see `shared_task`).
  [[nodiscard]] const std::stop_token& get_stop_token() const noexcept { return m_stop_token; }
  //! Only before the body starts.
  void set_stop_token(std::stop_token token) noexcept { m_stop_token = std::move(token); }

  [[nodiscard]] bool is_ready() const noexcept {
    return m_state.load(std::memory_order_acquire) == completed_tag();
  }

  void add_ref() noexcept { m_refs.fetch_add(1, std::memory_order_relaxed); }
  //! True when that was the last reference (the caller destroys the frame).
  [[nodiscard]] bool release() noexcept {
    return m_refs.fetch_sub(1, std::memory_order_acq_rel) == 1;
  }
  //! True when the calling handle is the only one (no other can appear meanwhile).
  [[nodiscard]] bool is_sole_owner() const noexcept {
    return m_refs.load(std::memory_order_acquire) == 1;
  }

  //! Registers `w` (for coroutine `awaiting`) as a waiter and returns what to transfer to:
  //! `body` when this awaiter starts it, `awaiting` itself when the body has completed
  //! meanwhile, else nothing (the completing thread will resume `awaiting`).
  std::coroutine_handle<> join(sync_waiter& w, std::coroutine_handle<> awaiting,
                               std::coroutine_handle<> body) noexcept {
    w.m_handle = awaiting;
    // No arrival handshake is needed (nothing else can end this wait), so the node counts
    // as already suspended: the completer's `arrive` queues it at once.
    w.m_arrived.store(true, std::memory_order_relaxed);
    void* old = m_state.load(std::memory_order_acquire);
    for (;;) {
      if (old == completed_tag()) {
        return transfer_to(awaiting);
      }
      const bool starting = old == not_started_tag();
      w.m_next = starting ? nullptr : static_cast<sync_waiter*>(old);
      if (m_state.compare_exchange_weak(old, &w, std::memory_order_acq_rel,
                                        std::memory_order_acquire)) {
        return starting ? transfer_to(body) : std::noop_coroutine();
      }
    }
  }

  void rethrow_if_failed() const {
    if (m_exception) {
      std::rethrow_exception(m_exception);
    }
  }

private:
  //! Publishes the result and resumes the waiters on this thread, oldest first, through the
  //! per-thread queue every primitive uses (so hand-overs never nest stack frames).
  void complete() noexcept {
    sync_waiter* stack =
        static_cast<sync_waiter*>(m_state.exchange(completed_tag(), std::memory_order_acq_rel));
    // An awaiter that finds the task completed may now drop the last reference and destroy
    // the frame: only the waiters (which live in their own frames) are touched from here.
    sync_waiter* fifo = nullptr;
    while (stack != nullptr) {
      sync_waiter* const next = stack->m_next;
      stack->m_next = fifo;
      fifo = stack;
      stack = next;
    }
    while (fifo != nullptr) {
      sync_waiter* const next = fifo->m_next; // arrive() relinks it
      arrive(*fifo);
      fifo = next;
    }
    resume_ready();
  }

  [[nodiscard]] const void* completed_tag() const noexcept { return &m_exception; }
  [[nodiscard]] void* completed_tag() noexcept { return &m_exception; }
  [[nodiscard]] void* not_started_tag() noexcept { return &m_refs; }

  std::atomic<std::size_t> m_refs{1};
  std::atomic<void*> m_state{not_started_tag()};
  std::exception_ptr m_exception;
  std::stop_token m_stop_token;
};

template <class T>
class shared_task_promise final : public shared_task_promise_base {
public:
  shared_task<T> get_return_object() noexcept;

  template <class U>
  requires std::is_constructible_v<T, U&&>
  void return_value(U&& v) noexcept(std::is_nothrow_constructible_v<T, U&&>) {
    m_value.emplace(std::forward<U>(v));
  }
  //! The result, or the body's exception rethrown; only once completed.
  const T& result() const {
    rethrow_if_failed();
    return *m_value;
  }
  //! The result for the sole owner, which may move it out.
  T& owned_result() {
    rethrow_if_failed();
    return *m_value;
  }

private:
  std::optional<T> m_value;
};

template <>
class shared_task_promise<void> final : public shared_task_promise_base {
public:
  shared_task<void> get_return_object() noexcept;
  void return_void() const noexcept {}
  void result() const { rethrow_if_failed(); }
};

//! Awaiter of a `shared_task`. `Owning` (from `co_await` on an rvalue) holds the reference
//! the awaited handle gave up and yields a `T` (moved out when no other handle remains);
//! otherwise it yields `const T&` into the shared frame.
template <class T, bool Owning>
class shared_task_awaiter {
public:
  using handle_type = std::coroutine_handle<shared_task_promise<T>>;

  explicit shared_task_awaiter(handle_type h) noexcept : m_handle(h) {}
  shared_task_awaiter(const shared_task_awaiter&) = delete;
  shared_task_awaiter& operator=(const shared_task_awaiter&) = delete;
  ~shared_task_awaiter() {
    if constexpr (Owning) {
      if (m_handle && m_handle.promise().release()) {
        m_handle.destroy();
      }
    }
  }

  [[nodiscard]] bool await_ready() const noexcept {
    return !m_handle || m_handle.promise().is_ready();
  }
  std::coroutine_handle<> await_suspend(std::coroutine_handle<> awaiting) noexcept {
    return m_handle.promise().join(m_node, awaiting, m_handle);
  }
  decltype(auto) await_resume() const {
    if (!m_handle) {
      throw std::logic_error("cuawait::shared_task: awaited a shared_task that holds no "
                             "coroutine");
    }
    if constexpr (std::is_void_v<T> || !Owning) {
      return m_handle.promise().result();
    } else {
      static_assert(std::is_copy_constructible_v<T>,
                    "co_await on an rvalue shared_task<T> yields a copy: for a move-only T, "
                    "await an lvalue (yields const T&)");
      if (m_handle.promise().is_sole_owner()) {
        return T(std::move(m_handle.promise().owned_result()));
      }
      return T(m_handle.promise().result());
    }
  }

private:
  handle_type m_handle;
  sync_waiter m_node;
};

} // namespace cuawait::detail
