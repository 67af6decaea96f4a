// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The shared state and the two awaitables behind `when_any`. The first child to finish
//! is the winner; it asks the others to stop through a `std::stop_source` the state owns,
//! and the awaiting coroutine resumes once every child has finished.

#include "cuawait/detail/trampoline.hpp"
#include "cuawait/detail/when_all_awaitable.hpp"
#include "cuawait/detail/when_all_result.hpp"
#include "cuawait/detail/when_all_task.hpp"

#include <atomic>
#include <coroutine>
#include <cstddef>
#include <optional>
#include <stop_token>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

namespace cuawait {

//! What `when_any` yields: which child finished first (its position among the arguments
//! or in the range) and its result. A reference result stays a reference.
template <class T>
struct when_any_result {
  std::size_t index;
  T value;
};

//! `when_any` over children that yield `void`: only which one finished first.
template <>
struct when_any_result<void> {
  std::size_t index;
};

} // namespace cuawait

namespace cuawait::detail {

//! Counts running children (plus one while they are being started) and elects the first
//! to finish. Lock-free apart from `std::stop_source`; never moves once started.
class when_any_state {
public:
  explicit when_any_state(std::size_t children) noexcept : m_count(children + 1) {}
  when_any_state(const when_any_state&) = delete;
  when_any_state& operator=(const when_any_state&) = delete;

  void prepare(std::coroutine_handle<> continuation) noexcept { m_continuation = continuation; }
  [[nodiscard]] bool finish_starting() noexcept {
    return m_count.fetch_sub(1, std::memory_order_acq_rel) != 1;
  }

  std::coroutine_handle<> child_done(std::size_t index, bool /*failed*/) noexcept {
    std::size_t none = no_child;
    if (m_winner.compare_exchange_strong(none, index, std::memory_order_relaxed)) {
      // May run the losers' stop callbacks, and even losers, inline; our own count is
      // still held, so none of them can resume the awaiting coroutine.
      m_source.request_stop();
    }
    if (m_count.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      return transfer_to(m_continuation);
    }
    return std::noop_coroutine();
  }
  [[nodiscard]] std::stop_token get_stop_token() const noexcept { return m_source.get_token(); }
  [[nodiscard]] std::size_t winner() const noexcept {
    return m_winner.load(std::memory_order_relaxed);
  }
  //! Asks every child to stop (thread-safe). Through a copy of the source: the children may
  //! finish inline and resume the awaiting coroutine, which destroys this state, while the
  //! request is still running; the copy keeps the shared stop state alive until it returns.
  void request_stop() noexcept {
    std::stop_source keep = m_source;
    keep.request_stop();
  }

private:
  std::atomic<std::size_t> m_count;
  std::atomic<std::size_t> m_winner{no_child};
  std::coroutine_handle<> m_continuation;
  std::stop_source m_source;
};

//! Forwards a stop request of the coroutine awaiting `when_any` to its children, for as
//! long as it is alive.
class when_any_stop_forwarder {
public:
  template <class Promise>
  void attach(std::coroutine_handle<Promise> awaiting, when_any_state& state) noexcept {
    std::stop_token token = stop_token_of(awaiting);
    if (token.stop_possible()) {
      // Runs at once when stop was already requested: the children then start stopped.
      (void)m_callback.emplace(std::move(token), forward{&state}); // nodiscard under nvcc
    }
  }
  //! Blocks while the callback runs on another thread (it only requests a stop).
  void detach() noexcept { m_callback.reset(); }

private:
  struct forward {
    when_any_state* state;
    void operator()() const noexcept { state->request_stop(); }
  };
  std::optional<std::stop_callback<forward>> m_callback;
};

//! The variant `when_any(a, b, ...)` yields: alternative `I` is the result of argument `I`.
template <class... Rs>
using when_any_variant_t = std::variant<variant_alternative_t<Rs>...>;

//! `when_any(a, b, ...)`: awaitable once, as an rvalue.
template <class... Rs>
class when_any_tuple_awaitable {
  using children_t = std::tuple<when_all_task<Rs, when_any_state>...>;
  static constexpr std::size_t count = sizeof...(Rs);

public:
  using result_type = when_any_result<when_any_variant_t<Rs...>>;

  explicit when_any_tuple_awaitable(when_all_task<Rs, when_any_state>... children) noexcept
      : m_children(std::move(children)...) {}
  //! Only valid before it is awaited.
  when_any_tuple_awaitable(when_any_tuple_awaitable&& other) noexcept
      : m_children(std::move(other.m_children)) {}

  class awaiter {
  public:
    explicit awaiter(when_any_tuple_awaitable& self) noexcept : m_self(self) {}
    [[nodiscard]] bool await_ready() const noexcept { return false; }
    template <class Promise>
    bool await_suspend(std::coroutine_handle<Promise> h) noexcept {
      m_self.m_state.prepare(h);
      m_self.m_forwarder.attach(h, m_self.m_state);
      m_self.start_all(std::index_sequence_for<Rs...>{});
      return m_self.m_state.finish_starting();
    }
    result_type await_resume() {
      m_self.m_forwarder.detach();
      const std::size_t winner = m_self.m_state.winner();
      return result_type{winner, m_self.template take<0>(winner)};
    }

  private:
    when_any_tuple_awaitable& m_self;
  };

  awaiter operator co_await() && noexcept { return awaiter{*this}; }

private:
  template <std::size_t... I>
  void start_all(std::index_sequence<I...>) noexcept {
    (std::get<I>(m_children).start(m_state, I), ...);
  }
  // The winner's result as alternative `winner` (or its exception, rethrown).
  template <std::size_t I>
  when_any_variant_t<Rs...> take(std::size_t winner) {
    if constexpr (I + 1 < count) {
      if (I != winner) {
        return take<I + 1>(winner);
      }
    }
    return when_any_variant_t<Rs...>(std::in_place_index<I>,
                                     std::get<I>(m_children).promise().result());
  }

  when_any_state m_state{count};
  when_any_stop_forwarder m_forwarder;
  children_t m_children;
};

//! `when_any(range)`: awaitable once, as an rvalue.
template <class R>
class when_any_range_awaitable {
  using child_t = when_all_task<R, when_any_state>;

public:
  using result_type = when_any_result<R>;

  explicit when_any_range_awaitable(std::vector<child_t> children) noexcept
      : m_children(std::move(children)), m_state(m_children.size()) {}
  //! Only valid before it is awaited.
  when_any_range_awaitable(when_any_range_awaitable&& other) noexcept
      : m_children(std::move(other.m_children)), m_state(m_children.size()) {}

  class awaiter {
  public:
    explicit awaiter(when_any_range_awaitable& self) noexcept : m_self(self) {}
    [[nodiscard]] bool await_ready() const noexcept { return false; }
    template <class Promise>
    bool await_suspend(std::coroutine_handle<Promise> h) noexcept {
      m_self.m_state.prepare(h);
      m_self.m_forwarder.attach(h, m_self.m_state);
      for (std::size_t i = 0; i < m_self.m_children.size(); ++i) {
        m_self.m_children[i].start(m_self.m_state, i);
      }
      return m_self.m_state.finish_starting();
    }
    result_type await_resume() {
      m_self.m_forwarder.detach();
      const std::size_t winner = m_self.m_state.winner();
      if constexpr (std::is_void_v<R>) {
        m_self.m_children[winner].promise().rethrow_if_failed();
        return result_type{winner};
      } else {
        return result_type{winner, m_self.m_children[winner].promise().result()};
      }
    }

  private:
    when_any_range_awaitable& m_self;
  };

  awaiter operator co_await() && noexcept { return awaiter{*this}; }

private:
  std::vector<child_t> m_children;
  when_any_state m_state;
  when_any_stop_forwarder m_forwarder;
};

} // namespace cuawait::detail
