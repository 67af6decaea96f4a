// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The wrapper coroutine that `when_all` and `when_any` put around each child: it awaits
//! the child, keeps its result or exception, gives it the combinator's stop token, and
//! tells the combinator's shared state when it has finished.
//!
//! A `State` provides:
//!   std::coroutine_handle<> child_done(std::size_t index, bool failed) noexcept;
//!   std::stop_token get_stop_token() const noexcept;
//! `child_done` returns what the finished wrapper transfers to (the awaiting coroutine when
//! it was the last child, else `noop_coroutine()`).

#include "cuawait/detail/move_or_copy.hpp"
#include "cuawait/detail/trampoline.hpp"
#include "cuawait/detail/when_all_result.hpp"

#include <coroutine>
#include <cstddef>
#include <exception>
#include <memory>
#include <optional>
#include <stop_token>
#include <type_traits>
#include <utility>

namespace cuawait::detail {

//! The stop token of the coroutine behind `h`, or an empty token when its promise has none.
template <class Promise>
std::stop_token stop_token_of(std::coroutine_handle<Promise> h) noexcept {
  if constexpr (requires { h.promise().get_stop_token(); }) {
    return h.promise().get_stop_token();
  } else {
    return {};
  }
}

template <class R, class State>
class when_all_task;

template <class State>
class when_all_promise_base {
public:
  struct final_awaiter {
    [[nodiscard]] bool await_ready() const noexcept { return false; }
    template <class Promise>
    std::coroutine_handle<> await_suspend(std::coroutine_handle<Promise> h) noexcept {
      when_all_promise_base& p = h.promise();
      return p.m_state->child_done(p.m_index, p.m_exception != nullptr);
    }
    void await_resume() const noexcept {}
  };

  std::suspend_always initial_suspend() const noexcept { return {}; }
  final_awaiter final_suspend() const noexcept { return {}; }
  void unhandled_exception() noexcept { m_exception = std::current_exception(); }

  //! What a child awaiting through this wrapper inherits (see `task_awaiter`).
  [[nodiscard]] std::stop_token get_stop_token() const noexcept {
    return m_state->get_stop_token();
  }

  void attach(State& state, std::size_t index) noexcept {
    m_state = &state;
    m_index = index;
  }
  void rethrow_if_failed() const {
    if (m_exception) {
      std::rethrow_exception(m_exception);
    }
  }

private:
  State* m_state = nullptr;
  std::size_t m_index = 0;
  std::exception_ptr m_exception;
};

template <class R, class State>
class when_all_promise final : public when_all_promise_base<State> {
public:
  when_all_task<R, State> get_return_object() noexcept;

  template <class U = R>
  void return_value(U&& v) {
    // (void): libstdc++'s emplace is [[nodiscard]] under nvcc
    if constexpr (std::is_constructible_v<R, U&&>) {
      (void)m_value.emplace(std::forward<U>(v));
    } else { // a copy-only R (move constructor deleted)
      (void)m_value.emplace(v);
    }
  }
  //! The child's result, moved out, or as an lvalue to copy from when `R` is copy-only
  //! (or its exception, rethrown).
  auto&& result() {
    this->rethrow_if_failed();
    return move_or_copy(*m_value);
  }

private:
  std::optional<R> m_value;
};

template <class T, class State>
class when_all_promise<T&, State> final : public when_all_promise_base<State> {
public:
  when_all_task<T&, State> get_return_object() noexcept;
  void return_value(T& v) noexcept { m_value = std::addressof(v); }
  T& result() const {
    this->rethrow_if_failed();
    return *m_value;
  }

private:
  T* m_value = nullptr;
};

template <class State>
class when_all_promise<void, State> final : public when_all_promise_base<State> {
public:
  when_all_task<void, State> get_return_object() noexcept;
  void return_void() const noexcept {}
  void_value result() const {
    this->rethrow_if_failed();
    return {};
  }
};

//! Owns one wrapper coroutine; destroying it frees the frame and the child it holds.
template <class R, class State>
class when_all_task {
public:
  using promise_type = when_all_promise<R, State>;

  explicit when_all_task(std::coroutine_handle<promise_type> h) noexcept : m_handle(h) {}
  when_all_task(when_all_task&& other) noexcept : m_handle(std::exchange(other.m_handle, {})) {}
  when_all_task& operator=(when_all_task&&) = delete;
  when_all_task(const when_all_task&) = delete;
  when_all_task& operator=(const when_all_task&) = delete;
  ~when_all_task() {
    if (m_handle) {
      m_handle.destroy();
    }
  }

  //! Runs the child on the calling thread until it first suspends (or finishes).
  void start(State& state, std::size_t index) noexcept {
    m_handle.promise().attach(state, index);
    resume(m_handle);
  }
  [[nodiscard]] promise_type& promise() const noexcept { return m_handle.promise(); }

private:
  std::coroutine_handle<promise_type> m_handle;
};

template <class R, class State>
when_all_task<R, State> when_all_promise<R, State>::get_return_object() noexcept {
  return when_all_task<R, State>{std::coroutine_handle<when_all_promise>::from_promise(*this)};
}
template <class T, class State>
when_all_task<T&, State> when_all_promise<T&, State>::get_return_object() noexcept {
  return when_all_task<T&, State>{std::coroutine_handle<when_all_promise>::from_promise(*this)};
}
template <class State>
when_all_task<void, State> when_all_promise<void, State>::get_return_object() noexcept {
  return when_all_task<void, State>{std::coroutine_handle<when_all_promise>::from_promise(*this)};
}

//! The wrapper coroutine: `A` is `child_param_t<...>`, so an lvalue child is referenced and
//! an rvalue child lives in the wrapper's frame.
template <class R, class State, class A>
when_all_task<R, State> make_when_all_task(A awaitable) {
  if constexpr (std::is_void_v<R>) {
    co_await static_cast<A&&>(awaitable);
  } else {
    co_return co_await static_cast<A&&>(awaitable);
  }
}

} // namespace cuawait::detail
