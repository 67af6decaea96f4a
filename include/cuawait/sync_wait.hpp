// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `sync_wait(awaitable)`: run an awaitable to completion from ordinary (non-coroutine)
//! code, blocking the calling thread until it completes.

#include "cuawait/detail/awaitable_traits.hpp"
#include "cuawait/detail/move_or_copy.hpp"
#include "cuawait/detail/trampoline.hpp"

#include <condition_variable>
#include <coroutine>
#include <exception>
#include <memory>
#include <mutex>
#include <type_traits>
#include <utility>

namespace cuawait::detail {

//! Blocks one thread until another signals. The signalling side holds the mutex while it
//! notifies, so the waiter may destroy this object as soon as `wait()` returns.
class blocking_signal {
public:
  void set() noexcept {
    const std::lock_guard lock(m_mutex);
    m_set = true;
    m_cv.notify_one();
  }
  void wait() noexcept {
    std::unique_lock lock(m_mutex);
    m_cv.wait(lock, [this] { return m_set; });
  }

private:
  std::mutex m_mutex;
  std::condition_variable m_cv;
  bool m_set = false;
};

//! What every sync_wait_task promise shares, whatever it stores: the signal that `run()`
//! blocks on, set at the final suspension point, and the exception the awaitable threw.
class sync_wait_promise_base {
public:
  std::suspend_always initial_suspend() const noexcept { return {}; }
  auto final_suspend() const noexcept {
    struct awaiter {
      blocking_signal* signal;
      bool await_ready() const noexcept { return false; }
      // The waiter may destroy the frame as soon as the signal is set: touch nothing after.
      void await_suspend(std::coroutine_handle<>) const noexcept { signal->set(); }
      void await_resume() const noexcept {}
    };
    return awaiter{m_signal};
  }
  void unhandled_exception() noexcept { m_exception = std::current_exception(); }

  //! Runs the suspended coroutine `h` (whose promise is `*this`) to its end and blocks until
  //! it has finished, on whatever thread; rethrows what it threw.
  void run_to_end(std::coroutine_handle<> h) {
    blocking_signal signal;
    m_signal = &signal;
    resume(h);
    signal.wait();
    if (m_exception) {
      std::rethrow_exception(m_exception);
    }
  }

private:
  blocking_signal* m_signal = nullptr;
  std::exception_ptr m_exception;
};

//! The promise's result: the address of what the awaitable yielded. The coroutine yields
//! it (`co_yield co_await awaitable`) and stays suspended there, so a temporary result
//! lives in its frame until `result()` has taken it, and is never moved into the promise.
template <class R>
class sync_wait_promise : public sync_wait_promise_base {
public:
  //! Keeps the result's address and ends the wait, like reaching the final suspension.
  auto yield_value(R&& v) noexcept {
    m_value = std::addressof(v);
    return final_suspend();
  }
  //! Never reached: the coroutine is destroyed at its `co_yield`.
  void return_void() const noexcept {}
  //! The result, moved out (copied when copy-only), or the reference; call once, after a
  //! normal return.
  R result() {
    if constexpr (std::is_reference_v<R>) {
      return static_cast<R>(*m_value);
    } else {
      return move_or_copy(*m_value);
    }
  }

private:
  std::add_pointer_t<R> m_value = nullptr;
};

//! No result to store.
template <>
class sync_wait_promise<void> : public sync_wait_promise_base {
public:
  void return_void() const noexcept {}
  void result() const noexcept {}
};

//! The coroutine `sync_wait` blocks on: it starts suspended, `run()` resumes it on the
//! calling thread and blocks until it ends.
template <class R>
class sync_wait_task {
public:
  struct promise_type : sync_wait_promise<R> {
    sync_wait_task get_return_object() noexcept {
      return sync_wait_task{std::coroutine_handle<promise_type>::from_promise(*this)};
    }
  };

  explicit sync_wait_task(std::coroutine_handle<promise_type> h) noexcept : m_handle(h) {}
  sync_wait_task(sync_wait_task&& o) noexcept : m_handle(std::exchange(o.m_handle, {})) {}
  sync_wait_task(const sync_wait_task&) = delete;
  sync_wait_task& operator=(sync_wait_task&&) = delete;
  ~sync_wait_task() {
    if (m_handle) {
      m_handle.destroy();
    }
  }

  //! Runs the awaitable to its end; returns its result or rethrows its exception.
  R run() {
    m_handle.promise().run_to_end(m_handle);
    return m_handle.promise().result();
  }

private:
  std::coroutine_handle<promise_type> m_handle;
};

template <class R, class A>
sync_wait_task<R> make_sync_wait_task(A&& awaitable) {
  if constexpr (std::is_void_v<R>) {
    co_await static_cast<A&&>(awaitable);
  } else {
    co_yield co_await static_cast<A&&>(awaitable);
  }
}

} // namespace cuawait::detail

namespace cuawait {

//! Runs `awaitable` to completion and returns its result (a reference result stays a
//! reference), or rethrows its exception. Blocks the calling thread; the awaitable may
//! complete on any thread. Do not call it from a coroutine running on a single-threaded
//! executor that the awaitable needs: that deadlocks, like any blocking wait.
template <concepts::awaitable A>
decltype(auto) sync_wait(A&& awaitable) {
  using result_t = await_result_t<A>;
  using stored_t = std::conditional_t<std::is_rvalue_reference_v<result_t>,
                                      std::remove_reference_t<result_t>, result_t>;
  auto wrapper = detail::make_sync_wait_task<stored_t>(static_cast<A&&>(awaitable));
  return wrapper.run();
}

} // namespace cuawait
