// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `shared_task<T>`: one lazily started result that any number of coroutines await.
//!
//! ```cpp
//! cuawait::shared_task<weights> load_once(path p) { co_return co_await read_weights(p); }
//!
//! auto w = load_once("model.bin");      // copies share one run and one result
//! const weights& a = co_await w;        // the first awaiter starts it
//! const weights& b = co_await w;        // later awaiters read the same result
//! auto s = cuawait::make_shared_task(fetch()); // any awaitable (a task<T>...) made shareable
//! ```

#include "cuawait/detail/awaitable_traits.hpp"
#include "cuawait/detail/shared_task_promise.hpp"

#include <coroutine>
#include <stop_token>
#include <type_traits>
#include <utility>

namespace cuawait {

//! A lazily started coroutine producing a `T` (or `void`) for every coroutine that awaits
//! it. Copies of a `shared_task` are handles to one shared frame, reference counted; the
//! frame (and the result in it) is destroyed with the last handle.
//!
//! Running: the body does not run until the first `co_await`, which starts it on the
//! awaiting thread by symmetric transfer. Coroutines that await it while it runs are queued
//! (lock-free); when the body finishes, they are resumed on the thread that finished it, in
//! the order they arrived, through that thread's queue of woken waiters (as
//! `async_event::set()` resumes its waiters). Awaiting a completed `shared_task` continues
//! at once, without suspending. Awaiting from many threads at once is safe.
//!
//! Results: `co_await` on an lvalue yields `const T&`, valid while some handle to the task
//! lives. `co_await` on an rvalue (`co_await std::move(s)`, `co_await make_shared_task(...)`)
//! consumes that handle and yields a `T`: moved out of the frame when no other handle is
//! left, copied otherwise (so a move-only `T` must be awaited as an lvalue).
//!
//! Errors: an exception escaping the body is rethrown to every awaiter (the same exception
//! object, shared through `std::exception_ptr`).
//!
//! Cancellation: the body does not inherit any awaiter's stop token (one awaiter giving up
//! must not cancel the result the others wait for); give it one with `with_stop_token`
//! before it starts. A waiting awaiter cannot be withdrawn: it resumes when the body ends.
//!
//! Thread safety: distinct handles may be copied, awaited and destroyed concurrently from
//! any threads; one handle object is not to be modified concurrently (like `shared_ptr`).
//! Lifetime: the last handle may be destroyed while the body is suspended mid-run only if
//! nothing will resume it, as for `task`. A handle awaited as an lvalue must outlive the
//! wait; an rvalue await keeps a reference of its own.
template <class T = void>
class [[nodiscard]] shared_task {
  static_assert(!std::is_reference_v<T>,
                "shared_task<T&> is not provided: use shared_task<std::reference_wrapper<U>>");

public:
  using promise_type = detail::shared_task_promise<T>;
  using value_type = T;

  //! An empty handle (awaiting it throws `std::logic_error`).
  shared_task() noexcept = default;
  //! Adopts one reference to the frame of `h` (as `get_return_object` hands out).
  explicit shared_task(std::coroutine_handle<promise_type> h) noexcept : m_handle(h) {}
  shared_task(const shared_task& other) noexcept : m_handle(other.m_handle) {
    if (m_handle) {
      m_handle.promise().add_ref();
    }
  }
  shared_task(shared_task&& other) noexcept : m_handle(std::exchange(other.m_handle, {})) {}
  shared_task& operator=(shared_task other) noexcept {
    std::swap(m_handle, other.m_handle);
    return *this;
  }
  //! Drops this reference; the last one destroys the frame.
  ~shared_task() {
    if (m_handle && m_handle.promise().release()) {
      m_handle.destroy();
    }
  }

  //! `co_await s`: yields `const T&` (see the class comment).
  //! @throws what the body threw; std::logic_error for an empty handle.
  [[nodiscard]] auto operator co_await() const& noexcept {
    return detail::shared_task_awaiter<T, false>{m_handle};
  }
  //! `co_await std::move(s)`: consumes this handle and yields a `T`.
  //! @throws what the body threw; std::logic_error for an empty handle.
  [[nodiscard]] auto operator co_await() && noexcept {
    return detail::shared_task_awaiter<T, true>{std::exchange(m_handle, {})};
  }

  //! Gives the body a stop token. Only before anything awaits it (not thread-safe).
  shared_task& with_stop_token(std::stop_token token) & noexcept {
    m_handle.promise().set_stop_token(std::move(token));
    return *this;
  }
  shared_task&& with_stop_token(std::stop_token token) && noexcept {
    m_handle.promise().set_stop_token(std::move(token));
    return std::move(*this);
  }

  //! True when the body has finished (returned or thrown): awaiting it will not suspend.
  [[nodiscard]] bool is_ready() const noexcept { return m_handle && m_handle.promise().is_ready(); }
  //! True when the handle refers to a frame.
  explicit operator bool() const noexcept { return static_cast<bool>(m_handle); }

  //! True when both handles refer to the same frame (or both are empty).
  friend bool operator==(const shared_task& a, const shared_task& b) noexcept {
    return a.m_handle == b.m_handle;
  }

private:
  std::coroutine_handle<promise_type> m_handle;
};

template <class T>
shared_task<T> detail::shared_task_promise<T>::get_return_object() noexcept {
  return shared_task<T>{std::coroutine_handle<shared_task_promise>::from_promise(*this)};
}
inline shared_task<void> detail::shared_task_promise<void>::get_return_object() noexcept {
  return shared_task<void>{std::coroutine_handle<shared_task_promise>::from_promise(*this)};
}

namespace detail {
//! What `make_shared_task(a)` stores: the awaited result by value.
template <class A>
using shared_result_t = std::remove_cvref_t<await_result_t<A&&>>;
} // namespace detail

//! Wraps `awaitable` (moved in: a `task<T>`, a `when_all`...) in a `shared_task` whose body
//! awaits it, so that many coroutines can await its one result. Lazy like any
//! `shared_task`: `awaitable` is not awaited until the result is. A reference result is
//! stored as a copy of the referred value. The awaitable sees the shared task's stop token
//! (see `with_stop_token`), not any awaiter's.
//! @throws std::bad_alloc when the frame cannot be allocated.
template <class A>
requires concepts::awaitable<A&&> shared_task<detail::shared_result_t<A>>
make_shared_task(A awaitable) {
  if constexpr (std::is_void_v<detail::shared_result_t<A>>) {
    co_await std::move(awaitable);
  } else {
    co_return co_await std::move(awaitable);
  }
}

} // namespace cuawait
