// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The promise behind `async_generator<T>` and the awaiter that resumes the generator for
//! its next element. The promise is a `task_promise_base`: it hands control back to its
//! continuation (the consumer awaiting `next()`) at each `co_yield` and at the end, and it
//! carries a stop token that `co_await cuawait::get_stop_token()` and awaited tasks see.

#include "cuawait/detail/trampoline.hpp"
#include "cuawait/task.hpp"

#include <concepts>
#include <coroutine>
#include <exception>
#include <memory>
#include <stdexcept>
#include <type_traits>
#include <utility>

namespace cuawait {

template <class T>
class async_generator;

} // namespace cuawait

namespace cuawait::detail {

//! What `*it` returns: `T&&` for a value type (the consumer may move the element out),
//! the reference itself for a reference type.
template <class T>
using generator_reference_t = std::conditional_t<std::is_reference_v<T>, T, T&&>;

//! What `co_await gen.next()` yields: a pointer to the element, null at the end.
template <class T>
using generator_pointer_t = std::add_pointer_t<generator_reference_t<T>>;

template <class T>
class async_generator_promise final : public task_promise_base {
  using reference = generator_reference_t<T>;
  using pointer = generator_pointer_t<T>;
  using value_type = std::remove_cvref_t<T>;

  //! Keeps a copy of an lvalue yielded into an rvalue-reference generator in the
  //! generator's frame (the awaiter lives there while the generator is suspended).
  class copy_awaiter : public final_awaiter {
  public:
    template <class U>
    explicit copy_awaiter(U&& v) : m_copy(std::forward<U>(v)) {}
    template <class Promise>
    std::coroutine_handle<> await_suspend(std::coroutine_handle<Promise> h) noexcept {
      h.promise().m_value = std::addressof(m_copy);
      return final_awaiter::await_suspend(h);
    }

  private:
    value_type m_copy;
  };

public:
  async_generator<T> get_return_object() noexcept;

  //! `co_yield v`: the element is `v` itself, referenced until the generator resumes.
  final_awaiter yield_value(reference v) noexcept {
    m_value = std::addressof(v);
    return {};
  }
  //! `co_yield lvalue` into a generator of values: the element is a copy, so that a
  //! consumer moving it out leaves the generator's variable intact.
  copy_awaiter yield_value(const value_type& v) requires(
      std::is_rvalue_reference_v<reference>&& std::is_copy_constructible_v<value_type>) {
    return copy_awaiter{v};
  }

  void return_void() const noexcept {}
  void unhandled_exception() noexcept { m_exception = std::current_exception(); }

  //! Forgets the element the consumer has seen, before the generator runs again.
  void prepare_resume() noexcept { m_value = nullptr; }
  [[nodiscard]] pointer value() const noexcept { return m_value; }
  //! Rethrows (once) what escaped the body.
  void rethrow_if_failed() {
    if (m_exception) {
      std::rethrow_exception(std::exchange(m_exception, nullptr));
    }
  }

private:
  pointer m_value = nullptr;
  std::exception_ptr m_exception;
};

//! Resumes a generator until its next `co_yield` (or its end), with the awaiting coroutine
//! as the continuation that it transfers back to. The generator inherits the awaiting
//! coroutine's stop token for that stretch, unless it was given one of its own. `Derived`
//! supplies `await_resume`.
template <class T>
class generator_advance {
public:
  using handle_type = std::coroutine_handle<async_generator_promise<T>>;

  explicit generator_advance(handle_type h) noexcept : m_handle(h) {}

  [[nodiscard]] bool await_ready() const noexcept { return !m_handle || m_handle.done(); }

  template <class Promise>
  std::coroutine_handle<> await_suspend(std::coroutine_handle<Promise> awaiting) noexcept {
    async_generator_promise<T>& p = m_handle.promise();
    p.set_continuation(awaiting);
    p.prepare_resume();
    if (!p.has_own_stop_token()) {
      if constexpr (requires { awaiting.promise().get_stop_token(); }) {
        using token_ref = decltype(awaiting.promise().get_stop_token());
        if constexpr (std::is_lvalue_reference_v<token_ref>) {
          // The consumer stays suspended while the generator runs, so its token outlives
          // every read the body makes before handing control back.
          p.inherit_stop_token(awaiting.promise().get_stop_token());
        } else {
          p.set_stop_token(awaiting.promise().get_stop_token());
        }
      } else {
        // A token inherited from an earlier consumer may be gone by now.
        p.set_stop_token({});
      }
    }
    return transfer_to(m_handle);
  }

protected:
  //! After the resumption: the new element, or null at the end (after rethrowing what the
  //! body threw, if it threw).
  generator_pointer_t<T> element() const {
    if (!m_handle) {
      throw std::logic_error("cuawait::async_generator: advanced a generator that holds no "
                             "coroutine");
    }
    if (m_handle.done()) {
      m_handle.promise().rethrow_if_failed();
      return nullptr;
    }
    return m_handle.promise().value();
  }

  handle_type m_handle;
};

} // namespace cuawait::detail
