// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `sync_wait(awaitable)`: run an awaitable to completion from ordinary (non-coroutine)
//! code, blocking the calling thread until it completes.

#include "cuawait/detail/awaitable_traits.hpp"
#include "cuawait/detail/trampoline.hpp"

#include <condition_variable>
#include <coroutine>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
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

template <class R>
class sync_wait_task {
public:
  struct promise_type {
    blocking_signal* signal = nullptr;
    std::exception_ptr exception;
    std::conditional_t<std::is_reference_v<R>, std::add_pointer_t<R>, std::optional<R>> value{};

    sync_wait_task get_return_object() noexcept {
      return sync_wait_task{std::coroutine_handle<promise_type>::from_promise(*this)};
    }
    std::suspend_always initial_suspend() const noexcept { return {}; }
    auto final_suspend() const noexcept {
      struct awaiter {
        bool await_ready() const noexcept { return false; }
        void await_suspend(std::coroutine_handle<promise_type> h) const noexcept {
          h.promise().signal->set();
        }
        void await_resume() const noexcept {}
      };
      return awaiter{};
    }
    template <class U>
    void return_value(U&& v) {
      if constexpr (std::is_reference_v<R>) {
        value = std::addressof(v);
      } else {
        value.emplace(std::forward<U>(v));
      }
    }
    void unhandled_exception() noexcept { exception = std::current_exception(); }
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

  R run() {
    blocking_signal signal;
    m_handle.promise().signal = &signal;
    resume(m_handle);
    signal.wait();
    promise_type& p = m_handle.promise();
    if (p.exception) {
      std::rethrow_exception(p.exception);
    }
    if constexpr (std::is_reference_v<R>) {
      return static_cast<R>(*p.value);
    } else {
      return std::move(*p.value);
    }
  }

private:
  std::coroutine_handle<promise_type> m_handle;
};

template <>
struct sync_wait_task<void>::promise_type {
  blocking_signal* signal = nullptr;
  std::exception_ptr exception;
  sync_wait_task get_return_object() noexcept {
    return sync_wait_task{std::coroutine_handle<promise_type>::from_promise(*this)};
  }
  std::suspend_always initial_suspend() const noexcept { return {}; }
  auto final_suspend() const noexcept {
    struct awaiter {
      bool await_ready() const noexcept { return false; }
      void await_suspend(std::coroutine_handle<promise_type> h) const noexcept {
        h.promise().signal->set();
      }
      void await_resume() const noexcept {}
    };
    return awaiter{};
  }
  void return_void() const noexcept {}
  void unhandled_exception() noexcept { exception = std::current_exception(); }
};

template <>
inline void sync_wait_task<void>::run() {
  blocking_signal signal;
  m_handle.promise().signal = &signal;
  resume(m_handle);
  signal.wait();
  if (m_handle.promise().exception) {
    std::rethrow_exception(m_handle.promise().exception);
  }
}

template <class R, class A>
sync_wait_task<R> make_sync_wait_task(A&& awaitable) {
  if constexpr (std::is_void_v<R>) {
    co_await static_cast<A&&>(awaitable);
  } else {
    co_return co_await static_cast<A&&>(awaitable);
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
