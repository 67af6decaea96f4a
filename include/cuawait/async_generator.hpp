// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `async_generator<T>`: a coroutine that `co_yield`s a stream of values and may
//! `co_await` between them (a GPU batch finishing, a channel receive, a thread hop).
//!
//! ```cpp
//! cuawait::async_generator<int> batches(cuawait::thread_pool& pool) {
//!   for (int i = 0; i < 3; ++i) {
//!     co_await pool.schedule(); // any awaiting between elements
//!     co_yield i;
//!   }
//! }
//!
//! cuawait::task<int> sum(cuawait::thread_pool& pool) {
//!   auto gen = batches(pool);
//!   int total = 0;
//!   while (int* x = co_await gen.next()) { // null at the end
//!     total += *x;
//!   }
//!   co_return total;
//! }
//! ```
//!
//! C++20 has no `for co_await`; the iterator form is
//! `for (auto it = co_await gen.begin(); it != gen.end(); co_await ++it) { use(*it); }`.

#include "cuawait/detail/async_generator_promise.hpp"

#include <coroutine>
#include <cstddef>
#include <iterator>
#include <stop_token>
#include <type_traits>
#include <utility>

namespace cuawait {

//! A lazily started coroutine producing a sequence of `T`, consumed by one coroutine at a
//! time through `co_await next()` or awaited iteration.
//!
//! Elements: `co_await next()` runs the generator until its next `co_yield` and yields a
//! pointer to that element, or `nullptr` once the body has returned. The element is the
//! yielded object itself (no copy, no allocation per element) and stays valid until the
//! generator is advanced again or destroyed. For a value type `T` the consumer owns the
//! element and may move it out (`std::move(*x)`); `co_yield` of an lvalue therefore yields
//! a copy kept in the generator's frame (`co_yield std::move(v)` avoids it). For a
//! reference type (`async_generator<const big&>`, `async_generator<X&>`) the yielded
//! object is referenced, never copied.
//!
//! Control passes between consumer and generator by symmetric transfer, bounded by the
//! trampoline: a generator yielding a million elements synchronously uses constant stack.
//! Where the generator `co_await`s something that completes on another thread, the
//! consumer continues on that thread after the next `co_yield`.
//!
//! Errors: an exception escaping the body is rethrown, once, from the `co_await` of the
//! `next()` (or `begin()` / `++it`) that was running it; the sequence has ended then.
//!
//! Cancellation: while it runs for a `next()`, the generator sees the stop token of the
//! coroutine awaiting that `next()` (as a `task` does: `co_await cuawait::get_stop_token()`,
//! and tasks it awaits inherit it), unless `with_stop_token` gave it one of its own. Stopping
//! is cooperative: the body decides what to do when `stop_requested()` (e.g. return, ending
//! the sequence, or throw `operation_cancelled`).
//!
//! Lifetime: destroying the generator destroys its frame (the body's locals are destroyed
//! as at a `return`), whether it never started, is suspended at a `co_yield` (the consumer
//! stopped early) or has finished. Destroying it while a `next()` is in flight (the body is
//! suspended in a `co_await` of its own) is not allowed.
template <class T>
class [[nodiscard]] async_generator {
public:
  using promise_type = detail::async_generator_promise<T>;
  using value_type = std::remove_cvref_t<T>;
  //! `*it`: `T&&` for a value type, else `T`.
  using reference = detail::generator_reference_t<T>;
  //! What `co_await next()` yields: a pointer to the element, null at the end.
  using pointer = detail::generator_pointer_t<T>;

  //! Awaiter of `next()`: yields `pointer`.
  class next_awaiter : public detail::generator_advance<T> {
  public:
    using detail::generator_advance<T>::generator_advance;
    //! @throws what the generator's body threw; std::logic_error for an empty generator.
    pointer await_resume() const { return this->element(); }
  };

  //! Input iterator over the elements; advancing it is awaited (`co_await ++it`).
  class iterator {
  public:
    using iterator_category = std::input_iterator_tag;
    using value_type = async_generator::value_type;
    using difference_type = std::ptrdiff_t;
    using reference = async_generator::reference;
    using pointer = async_generator::pointer;

    //! The end iterator.
    iterator() noexcept = default;

    //! The current element; precondition: not the end iterator.
    reference operator*() const noexcept {
      return static_cast<reference>(*m_handle.promise().value());
    }
    //! The current element's address; precondition: not the end iterator.
    pointer operator->() const noexcept { return m_handle.promise().value(); }

    //! Awaiter of `++it`: yields the iterator, advanced (equal to `end()` at the end).
    class increment_awaiter : public detail::generator_advance<T> {
    public:
      explicit increment_awaiter(iterator& it) noexcept
          : detail::generator_advance<T>(it.m_handle), m_it(it) {}
      //! @throws what the generator's body threw; std::logic_error on the end iterator.
      iterator& await_resume() const {
        if (this->element() == nullptr) {
          m_it.m_handle = {};
        }
        return m_it;
      }

    private:
      iterator& m_it;
    };

    //! `co_await ++it` runs the generator to its next element.
    [[nodiscard]] increment_awaiter operator++() noexcept { return increment_awaiter{*this}; }

    //! Equal when both are the end, or both at the current element of one generator.
    friend bool operator==(const iterator&, const iterator&) noexcept = default;

  private:
    friend class async_generator;
    explicit iterator(std::coroutine_handle<promise_type> h) noexcept : m_handle(h) {}
    std::coroutine_handle<promise_type> m_handle;
  };

  //! Awaiter of `begin()`: yields an iterator at the next element (or `end()`).
  class begin_awaiter : public detail::generator_advance<T> {
  public:
    using detail::generator_advance<T>::generator_advance;
    //! @throws what the generator's body threw; std::logic_error for an empty generator.
    iterator await_resume() const {
      return this->element() != nullptr ? iterator{this->m_handle} : iterator{};
    }
  };

  //! An empty generator (advancing it throws `std::logic_error`).
  async_generator() noexcept = default;
  //! Takes ownership of the coroutine `h` (as `get_return_object` hands it out).
  explicit async_generator(std::coroutine_handle<promise_type> h) noexcept : m_handle(h) {}
  async_generator(async_generator&& other) noexcept : m_handle(std::exchange(other.m_handle, {})) {}
  async_generator& operator=(async_generator&& other) noexcept {
    if (this != &other) {
      destroy();
      m_handle = std::exchange(other.m_handle, {});
    }
    return *this;
  }
  async_generator(const async_generator&) = delete;
  async_generator& operator=(const async_generator&) = delete;
  //! Destroys the frame (see the class comment for when that is allowed).
  ~async_generator() { destroy(); }

  //! `co_await next()` runs the generator to its next `co_yield` and yields a pointer to
  //! the element, or `nullptr` once the body has returned (and on every later call).
  [[nodiscard]] next_awaiter next() noexcept { return next_awaiter{m_handle}; }

  //! `co_await begin()` runs the generator to its next element and yields an iterator at
  //! it (`end()` if there is none). The first element if the generator has not run yet.
  [[nodiscard]] begin_awaiter begin() noexcept { return begin_awaiter{m_handle}; }
  //! The end iterator.
  [[nodiscard]] iterator end() const noexcept { return iterator{}; }

  //! Gives the body a stop token of its own instead of the consumer's.
  async_generator& with_stop_token(std::stop_token token) & noexcept {
    m_handle.promise().set_stop_token(std::move(token));
    return *this;
  }
  async_generator&& with_stop_token(std::stop_token token) && noexcept {
    m_handle.promise().set_stop_token(std::move(token));
    return std::move(*this);
  }

  //! True when the body has returned (or thrown).
  [[nodiscard]] bool is_done() const noexcept { return m_handle && m_handle.done(); }
  //! True when the generator holds a coroutine.
  explicit operator bool() const noexcept { return static_cast<bool>(m_handle); }

private:
  void destroy() noexcept {
    if (m_handle) {
      m_handle.destroy();
      m_handle = {};
    }
  }
  std::coroutine_handle<promise_type> m_handle;
};

template <class T>
async_generator<T> detail::async_generator_promise<T>::get_return_object() noexcept {
  return async_generator<T>{std::coroutine_handle<async_generator_promise>::from_promise(*this)};
}

} // namespace cuawait
