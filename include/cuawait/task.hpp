// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `task<T>`: a lazy, move-only coroutine that produces a `T` (or `void`, or a `T&`) for
//! the one coroutine that awaits it.

#include "cuawait/detail/move_or_copy.hpp"
#include "cuawait/detail/trampoline.hpp"

#include <cassert>
#include <coroutine>
#include <exception>
#include <memory>
#include <stdexcept>
#include <stop_token>
#include <type_traits>
#include <utility>

namespace cuawait {

template <class T = void>
class task;

namespace detail {

//! What every cuawait coroutine promise shares: a continuation and a stop token.
class task_promise_base {
public:
  struct final_awaiter {
    [[nodiscard]] bool await_ready() const noexcept { return false; }
    template <class Promise>
    std::coroutine_handle<> await_suspend(std::coroutine_handle<Promise> h) noexcept {
      return transfer_to(h.promise().m_continuation);
    }
    void await_resume() const noexcept {}
  };

  std::suspend_always initial_suspend() const noexcept { return {}; }
  final_awaiter final_suspend() const noexcept { return {}; }

  void set_continuation(std::coroutine_handle<> c) noexcept { m_continuation = c; }

  //! The token this coroutine was started with (see `get_stop_token()`).
  [[nodiscard]] const std::stop_token& get_stop_token() const noexcept { return *m_stop_token; }
  //! Gives this coroutine a token of its own.
  void set_stop_token(std::stop_token token) noexcept {
    m_own_stop_token = std::move(token);
    m_stop_token = &m_own_stop_token;
  }
  //! Shares the awaiting coroutine's token without copying it (a copy of a live token is an
  //! atomic reference-count round trip per await). The awaiting coroutine outlives this one's
  //! run, so the pointer stays valid for as long as the body can read it.
  void inherit_stop_token(const std::stop_token& token) noexcept { m_stop_token = &token; }
  [[nodiscard]] bool has_own_stop_token() const noexcept {
    return m_stop_token == &m_own_stop_token && m_own_stop_token.stop_possible();
  }

private:
  std::coroutine_handle<> m_continuation = std::noop_coroutine();
  const std::stop_token* m_stop_token = &m_own_stop_token;
  std::stop_token m_own_stop_token;
};

template <class T>
class task_promise final : public task_promise_base {
public:
  task_promise() noexcept {}
  task_promise(const task_promise&) = delete;
  task_promise& operator=(const task_promise&) = delete;
  ~task_promise() {
    if (m_state == state::value) {
      m_value.~T();
    } else if (m_state == state::exception) {
      m_exception.~exception_ptr();
    }
  }

  task<T> get_return_object() noexcept;

  //! `co_return v;`. The default argument lets a braced list deduce: `co_return {a, b};`.
  template <class U = T>
  requires std::is_constructible_v<T, U&&>
  void return_value(U&& v) noexcept(std::is_nothrow_constructible_v<T, U&&>) {
    ::new (static_cast<void*>(std::addressof(m_value))) T(std::forward<U>(v));
    m_state = state::value;
  }
  //! `co_return v;` for a copy-only `T` (move constructor deleted), which cannot be
  //! constructed from the rvalue the overload above takes: `v` is copied.
  void return_value(const T& v) requires(!std::is_move_constructible_v<T>) {
    ::new (static_cast<void*>(std::addressof(m_value))) T(v);
    m_state = state::value;
  }
  void unhandled_exception() noexcept {
    ::new (static_cast<void*>(std::addressof(m_exception)))
        std::exception_ptr(std::current_exception());
    m_state = state::exception;
  }

  T& result() & {
    rethrow_if_exception();
    return m_value;
  }
  moved_result_t<T> result() && {
    rethrow_if_exception();
    return move_or_copy(m_value);
  }

private:
  void rethrow_if_exception() const {
    if (m_state == state::exception) {
      std::rethrow_exception(m_exception);
    }
    assert(m_state == state::value && "task result read before the task completed");
  }

  enum class state : unsigned char { empty, value, exception };
  state m_state = state::empty;
  union {
    T m_value;
    std::exception_ptr m_exception;
  };
};

template <>
class task_promise<void> final : public task_promise_base {
public:
  task<void> get_return_object() noexcept;
  void return_void() const noexcept {}
  void unhandled_exception() noexcept { m_exception = std::current_exception(); }
  void result() const {
    if (m_exception) {
      std::rethrow_exception(m_exception);
    }
  }

private:
  std::exception_ptr m_exception;
};

template <class T>
class task_promise<T&> final : public task_promise_base {
public:
  task<T&> get_return_object() noexcept;
  void return_value(T& v) noexcept { m_value = std::addressof(v); }
  void unhandled_exception() noexcept { m_exception = std::current_exception(); }
  T& result() const {
    if (m_exception) {
      std::rethrow_exception(m_exception);
    }
    return *m_value;
  }

private:
  T* m_value = nullptr;
  std::exception_ptr m_exception;
};

//! Starts a task when awaited and resumes the awaiting coroutine when it finishes.
template <class T, bool Move>
class task_awaiter {
public:
  using handle_type = std::coroutine_handle<task_promise<T>>;
  explicit task_awaiter(handle_type h) noexcept : m_handle(h) {}

  [[nodiscard]] bool await_ready() const noexcept { return !m_handle || m_handle.done(); }

  template <class Promise>
  std::coroutine_handle<> await_suspend(std::coroutine_handle<Promise> awaiting) noexcept {
    task_promise<T>& p = m_handle.promise();
    p.set_continuation(awaiting);
    // The child inherits the awaiting coroutine's stop token unless it was given one.
    if constexpr (requires { awaiting.promise().get_stop_token(); }) {
      if (!p.has_own_stop_token()) {
        using token_ref = decltype(awaiting.promise().get_stop_token());
        if constexpr (std::is_lvalue_reference_v<token_ref>) {
          p.inherit_stop_token(awaiting.promise().get_stop_token());
        } else { // the awaiting promise hands out copies: keep one
          p.set_stop_token(awaiting.promise().get_stop_token());
        }
      }
    }
    return transfer_to(m_handle);
  }

  decltype(auto) await_resume() {
    if (!m_handle) {
      throw std::logic_error("cuawait::task: awaited a task that holds no coroutine");
    }
    if constexpr (std::is_void_v<T>) {
      m_handle.promise().result();
    } else if constexpr (Move && !std::is_reference_v<T>) {
      return std::move(m_handle.promise()).result();
    } else {
      return m_handle.promise().result();
    }
  }

private:
  handle_type m_handle;
};

} // namespace detail

//! A lazily started coroutine producing a `T`.
//!
//! The body does not run until the task is awaited (or passed to `sync_wait`,
//! `when_all`, `async_scope::spawn`...). Exactly one coroutine awaits it; an exception
//! escaping the body is rethrown there. Destroying a task frees its frame, whether or not
//! it ran; destroying one while it is suspended mid-body is allowed only when nothing
//! will resume it (see the CUDA layer's withdrawal rules).
//!
//! Awaiting an rvalue task yields `T` (moved out; copied when `T`'s move constructor is
//! deleted); awaiting an lvalue yields `T&`.
//! A task inherits the stop token of the coroutine that awaits it; read it with
//! `co_await cuawait::get_stop_token()`.
template <class T>
class [[nodiscard]] task {
public:
  using promise_type = detail::task_promise<T>;
  using value_type = T;

  task() noexcept = default;
  explicit task(std::coroutine_handle<promise_type> h) noexcept : m_handle(h) {}
  task(task&& other) noexcept : m_handle(std::exchange(other.m_handle, {})) {}
  task& operator=(task&& other) noexcept {
    if (this != &other) {
      destroy();
      m_handle = std::exchange(other.m_handle, {});
    }
    return *this;
  }
  task(const task&) = delete;
  task& operator=(const task&) = delete;
  ~task() { destroy(); }

  //! True when the task holds a coroutine that has run to completion.
  [[nodiscard]] bool is_ready() const noexcept { return m_handle && m_handle.done(); }
  //! True when the task holds a coroutine.
  explicit operator bool() const noexcept { return static_cast<bool>(m_handle); }

  auto operator co_await() & noexcept { return detail::task_awaiter<T, false>{m_handle}; }
  auto operator co_await() && noexcept { return detail::task_awaiter<T, true>{m_handle}; }

  //! Gives the stop token the body sees (instead of inheriting the awaiter's).
  task& with_stop_token(std::stop_token token) & noexcept {
    m_handle.promise().set_stop_token(std::move(token));
    return *this;
  }
  task&& with_stop_token(std::stop_token token) && noexcept {
    m_handle.promise().set_stop_token(std::move(token));
    return std::move(*this);
  }

  //! The underlying coroutine; ownership stays with the task.
  [[nodiscard]] std::coroutine_handle<promise_type> handle() const noexcept { return m_handle; }
  //! Gives up ownership of the coroutine.
  [[nodiscard]] std::coroutine_handle<promise_type> release() noexcept {
    return std::exchange(m_handle, {});
  }

private:
  void destroy() noexcept {
    if (m_handle) {
      m_handle.destroy();
      m_handle = {};
    }
  }
  std::coroutine_handle<promise_type> m_handle;
};

namespace detail {
template <class T>
task<T> task_promise<T>::get_return_object() noexcept {
  return task<T>{std::coroutine_handle<task_promise<T>>::from_promise(*this)};
}
inline task<void> task_promise<void>::get_return_object() noexcept {
  return task<void>{std::coroutine_handle<task_promise<void>>::from_promise(*this)};
}
template <class T>
task<T&> task_promise<T&>::get_return_object() noexcept {
  return task<T&>{std::coroutine_handle<task_promise<T&>>::from_promise(*this)};
}

//! Awaiter that completes at once with the awaiting coroutine's stop token.
class stop_token_awaiter {
public:
  [[nodiscard]] bool await_ready() const noexcept { return false; }
  template <class Promise>
  bool await_suspend(std::coroutine_handle<Promise> h) noexcept {
    if constexpr (requires { h.promise().get_stop_token(); }) {
      m_token = h.promise().get_stop_token();
    }
    return false;
  }
  std::stop_token await_resume() noexcept { return std::move(m_token); }

private:
  std::stop_token m_token;
};
} // namespace detail

//! `co_await get_stop_token()` inside a cuawait coroutine yields the token it was started
//! with: the one `when_any` or `task::with_stop_token` gave it, or else the token of the
//! coroutine that awaited it. A coroutine nobody asked to stop sees a token whose
//! `stop_possible()` is false.
[[nodiscard]] inline detail::stop_token_awaiter get_stop_token() noexcept { return {}; }

} // namespace cuawait
