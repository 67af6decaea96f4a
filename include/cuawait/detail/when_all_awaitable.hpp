// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The shared state (a completion counter) and the two awaitables behind `when_all`:
//! a fixed tuple of children and a runtime-sized vector of them.

#include "cuawait/detail/trampoline.hpp"
#include "cuawait/detail/when_all_result.hpp"
#include "cuawait/detail/when_all_task.hpp"

#include <atomic>
#include <coroutine>
#include <cstddef>
#include <limits>
#include <stop_token>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace cuawait::detail {

inline constexpr std::size_t no_child = std::numeric_limits<std::size_t>::max();

//! Counts children still running, plus one for the awaiting coroutine while it is still
//! starting them, so that whichever of them comes last resumes the awaiting coroutine,
//! exactly once, on whatever thread that is. Lock-free; never moves once started.
class when_all_state {
public:
  explicit when_all_state(std::size_t children) noexcept : m_count(children + 1) {}
  when_all_state(const when_all_state&) = delete;
  when_all_state& operator=(const when_all_state&) = delete;

  //! Before any child starts: who to resume, and the token the children inherit.
  void prepare(std::coroutine_handle<> continuation, std::stop_token token) noexcept {
    m_continuation = continuation;
    m_token = std::move(token);
  }
  //! After all children started: true when the awaiting coroutine must suspend (some
  //! child is still running and will resume it).
  [[nodiscard]] bool finish_starting() noexcept {
    return m_count.fetch_sub(1, std::memory_order_acq_rel) != 1;
  }

  std::coroutine_handle<> child_done(std::size_t index, bool failed) noexcept {
    if (failed) {
      // The first to fail in completion order wins; its result was written before the
      // release below, so the awaiting coroutine reads it after its acquire.
      std::size_t none = no_child;
      m_first_failed.compare_exchange_strong(none, index, std::memory_order_relaxed);
    }
    if (m_count.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      return transfer_to(m_continuation);
    }
    return std::noop_coroutine();
  }
  [[nodiscard]] std::stop_token get_stop_token() const noexcept { return m_token; }
  //! Index of the first child that threw, or `no_child`. Valid once all have finished.
  [[nodiscard]] std::size_t first_failed() const noexcept {
    return m_first_failed.load(std::memory_order_relaxed);
  }

private:
  std::atomic<std::size_t> m_count;
  std::atomic<std::size_t> m_first_failed{no_child};
  std::coroutine_handle<> m_continuation;
  std::stop_token m_token;
};

//! `when_all(a, b, ...)`: awaitable once, as an rvalue, yielding `std::tuple<...>`.
template <class... Rs>
class when_all_tuple_awaitable {
  using children_t = std::tuple<when_all_task<Rs, when_all_state>...>;
  static constexpr std::size_t count = sizeof...(Rs);

public:
  using result_type = std::tuple<tuple_element_t<Rs>...>;

  explicit when_all_tuple_awaitable(when_all_task<Rs, when_all_state>... children) noexcept
      : m_children(std::move(children)...) {}
  //! Only valid before it is awaited.
  when_all_tuple_awaitable(when_all_tuple_awaitable&& other) noexcept
      : m_children(std::move(other.m_children)) {}

  class awaiter {
  public:
    explicit awaiter(when_all_tuple_awaitable& self) noexcept : m_self(self) {}
    [[nodiscard]] bool await_ready() const noexcept { return count == 0; }
    template <class Promise>
    bool await_suspend(std::coroutine_handle<Promise> h) noexcept {
      m_self.m_state.prepare(h, stop_token_of(h));
      m_self.start_all(std::index_sequence_for<Rs...>{});
      return m_self.m_state.finish_starting();
    }
    result_type await_resume() { return m_self.result(std::index_sequence_for<Rs...>{}); }

  private:
    when_all_tuple_awaitable& m_self;
  };

  awaiter operator co_await() && noexcept { return awaiter{*this}; }

private:
  template <std::size_t... I>
  void start_all(std::index_sequence<I...>) noexcept {
    (std::get<I>(m_children).start(m_state, I), ...);
  }
  template <std::size_t... I>
  result_type result(std::index_sequence<I...>) {
    const std::size_t failed = m_state.first_failed();
    if (failed != no_child) {
      ((I == failed ? std::get<I>(m_children).promise().rethrow_if_failed() : void()), ...);
    }
    return result_type(std::get<I>(m_children).promise().result()...);
  }

  when_all_state m_state{count};
  children_t m_children;
};

//! `when_all(range)`: awaitable once, as an rvalue, yielding `std::vector<...>` in input
//! order (or `void` when the children yield `void`).
template <class R>
class when_all_range_awaitable {
  using child_t = when_all_task<R, when_all_state>;

public:
  using result_type = std::conditional_t<std::is_void_v<R>, void, std::vector<vector_element_t<R>>>;

  explicit when_all_range_awaitable(std::vector<child_t> children) noexcept
      : m_children(std::move(children)), m_state(m_children.size()) {}
  //! Only valid before it is awaited.
  when_all_range_awaitable(when_all_range_awaitable&& other) noexcept
      : m_children(std::move(other.m_children)), m_state(m_children.size()) {}

  class awaiter {
  public:
    explicit awaiter(when_all_range_awaitable& self) noexcept : m_self(self) {}
    [[nodiscard]] bool await_ready() const noexcept { return m_self.m_children.empty(); }
    template <class Promise>
    bool await_suspend(std::coroutine_handle<Promise> h) noexcept {
      m_self.m_state.prepare(h, stop_token_of(h));
      for (std::size_t i = 0; i < m_self.m_children.size(); ++i) {
        m_self.m_children[i].start(m_self.m_state, i);
      }
      return m_self.m_state.finish_starting();
    }
    result_type await_resume() { return m_self.result(); }

  private:
    when_all_range_awaitable& m_self;
  };

  awaiter operator co_await() && noexcept { return awaiter{*this}; }

private:
  result_type result() {
    const std::size_t failed = m_state.first_failed();
    if (failed != no_child) {
      m_children[failed].promise().rethrow_if_failed();
    }
    if constexpr (!std::is_void_v<R>) {
      result_type out;
      out.reserve(m_children.size());
      for (child_t& c : m_children) {
        out.emplace_back(c.promise().result());
      }
      return out;
    }
  }

  std::vector<child_t> m_children;
  when_all_state m_state;
};

} // namespace cuawait::detail
