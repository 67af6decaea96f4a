// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `channel<T>`: a bounded multi-producer multi-consumer queue between coroutines.

#include "cuawait/cancellation.hpp"
#include "cuawait/detail/sync_awaiter.hpp"
#include "cuawait/detail/sync_ring_buffer.hpp"
#include "cuawait/detail/sync_waiter.hpp"

#include <cassert>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <type_traits>
#include <utility>

namespace cuawait {

//! Thrown by a send on a closed channel (including a send that was waiting when
//! `close()` was called). What is thrown is in fact a `channel_closed_with_value<T>`.
class channel_closed : public std::logic_error {
public:
  using std::logic_error::logic_error;
};

//! The `channel_closed` a `send` throws: it gives the unsent value back to the sender.
//! The value is kept in a shared allocation so that the exception stays copyable.
template <class T>
class channel_closed_with_value : public channel_closed {
public:
  //! @throws std::bad_alloc (then the value is destroyed).
  explicit channel_closed_with_value(T&& value)
      : channel_closed("cuawait::channel::send: the channel is closed"),
        m_value(std::make_shared<T>(std::move(value))) {}

  //! The value that was not sent.
  [[nodiscard]] T& value() const noexcept { return *m_value; }

private:
  std::shared_ptr<T> m_value;
};

//! A bounded MPMC channel of `T`. `co_await ch.send(v)` suspends while the channel is full;
//! `co_await ch.receive()` suspends while it is empty and yields `std::optional<T>`: a
//! value, or `std::nullopt` once the channel is closed and drained, so that
//! `while (auto v = co_await ch.receive())` ends a consumer cleanly. Senders and receivers
//! are each served FIFO, and values come out in the order their sends completed.
//!
//! Capacity 0 makes a rendezvous channel: a send completes only when a receiver takes the
//! value.
//!
//! Values are moved, never copied (`T` must be nothrow move-constructible, so a hand-over
//! under the lock cannot fail half-way). Values still buffered when the channel is
//! destroyed are destroyed with it.
//!
//! Closing: `close()` makes every later or waiting send throw `channel_closed` and wakes
//! every waiting receiver (they get `std::nullopt`: a receiver only waits on an empty
//! channel). Values already buffered stay receivable. The value of a send that fails
//! because of `close()` is not lost: the exception is a `channel_closed_with_value<T>`
//! carrying it. `try_send` leaves its argument untouched when it fails.
//!
//! Cancellation: `send(v, token)` and `receive(token)` throw `operation_cancelled` when stop
//! is requested before the operation completes; a cancelled receive takes no value, and a
//! cancelled send delivers nothing (its value is destroyed with the awaiter).
//!
//! Resumption: a waiter resumes on the thread whose operation completed it (the receiver
//! that made room, the sender that brought a value, `close()`), inside that call, unless
//! that thread is already resuming a waiter of a cuawait primitive further up its stack;
//! then on the same thread as soon as the running waiter suspends or finishes. A cancelled
//! waiter resumes on the thread that requested stop (inside `request_stop()`, or
//! deferred the same way when that thread is already resuming a waiter).
//!
//! Thread-safe. The channel must outlive every waiter.
template <class T>
class channel {
  static_assert(std::is_nothrow_move_constructible_v<T>,
                "cuawait::channel<T>: T must be nothrow move-constructible");

public:
  class receive_awaiter;

  //! Awaiter of `send()`: owns the value until a receiver or the buffer takes it.
  class [[nodiscard]] send_awaiter : public detail::sync_awaiter<send_awaiter> {
  public:
    send_awaiter(channel& ch, T&& value, std::stop_token token) noexcept
        : detail::sync_awaiter<send_awaiter>(std::move(token)), m_channel(ch),
          m_value(std::move(value)) {}
    //! @throws channel_closed_with_value<T> if the channel is or became closed first.
    //! @throws operation_cancelled if stop was requested first.
    void await_resume() {
      if (this->finish("cuawait::channel::send cancelled") == detail::wait_status::closed) {
        throw channel_closed_with_value<T>(std::move(m_value));
      }
    }

  private:
    friend class channel;
    friend class detail::sync_awaiter<send_awaiter>;
    bool try_complete_or_enqueue() noexcept { return m_channel.start_send(*this); }
    std::mutex& sync_mutex() noexcept { return m_channel.m_mutex; }
    detail::waiter_queue& sync_queue() noexcept { return m_channel.m_senders; }

    channel& m_channel;
    T m_value;
  };

  //! Awaiter of `receive()`.
  class [[nodiscard]] receive_awaiter : public detail::sync_awaiter<receive_awaiter> {
  public:
    receive_awaiter(channel& ch, std::stop_token token) noexcept
        : detail::sync_awaiter<receive_awaiter>(std::move(token)), m_channel(ch) {}
    //! A value, or `std::nullopt` when the channel is closed and empty.
    //! @throws operation_cancelled if stop was requested first.
    std::optional<T> await_resume() {
      this->finish("cuawait::channel::receive cancelled");
      return std::move(m_result);
    }

  private:
    friend class channel;
    friend class detail::sync_awaiter<receive_awaiter>;
    bool try_complete_or_enqueue() noexcept { return m_channel.start_receive(*this); }
    std::mutex& sync_mutex() noexcept { return m_channel.m_mutex; }
    detail::waiter_queue& sync_queue() noexcept { return m_channel.m_receivers; }

    channel& m_channel;
    std::optional<T> m_result;
  };

  //! A channel buffering up to `capacity` values (0: rendezvous).
  //! @throws std::bad_alloc.
  explicit channel(std::size_t capacity) : m_buffer(capacity) {}
  channel(const channel&) = delete;
  channel& operator=(const channel&) = delete;
  ~channel() {
    assert(m_senders.empty() && m_receivers.empty() && "channel destroyed with waiters");
  }

  //! `co_await send(v)` delivers `v`, suspending while the channel is full.
  send_awaiter send(T value) noexcept { return send_awaiter{*this, std::move(value), {}}; }
  //! As `send(value)`, cancellable through `token`.
  send_awaiter send(T value, std::stop_token token) noexcept {
    return send_awaiter{*this, std::move(value), std::move(token)};
  }
  //! `co_await receive()` takes the oldest value, suspending while the channel is empty.
  receive_awaiter receive() noexcept { return receive_awaiter{*this, {}}; }
  //! As `receive()`, cancellable through `token`.
  receive_awaiter receive(std::stop_token token) noexcept {
    return receive_awaiter{*this, std::move(token)};
  }

  //! Delivers `value` if that needs no waiting; moves from it only on success.
  //! @return false if the channel is full or closed (`value` is then untouched).
  [[nodiscard]] bool try_send(T&& value) noexcept {
    detail::wake_list woken;
    {
      const std::lock_guard lock(m_mutex);
      if (m_closed || !give_locked(value, woken)) {
        return false;
      }
    }
    woken.wake_all();
    return true;
  }

  //! Takes the oldest value if there is one; `std::nullopt` if the channel is empty.
  [[nodiscard]] std::optional<T> try_receive() noexcept {
    std::optional<T> out;
    detail::wake_list woken;
    {
      const std::lock_guard lock(m_mutex);
      take_locked(out, woken);
    }
    woken.wake_all();
    return out;
  }

  //! Closes the channel (idempotent): see the class comment. Wakes every waiter.
  void close() noexcept {
    detail::wake_list woken;
    {
      const std::lock_guard lock(m_mutex);
      if (m_closed) {
        return;
      }
      m_closed = true;
      woken.take_all(m_receivers, detail::wait_status::closed);
      woken.take_all(m_senders, detail::wait_status::closed);
    }
    woken.wake_all();
  }

  //! Whether `close()` was called.
  [[nodiscard]] bool is_closed() const noexcept {
    const std::lock_guard lock(m_mutex);
    return m_closed;
  }
  //! Values buffered now (a snapshot; waiting senders are not counted).
  [[nodiscard]] std::size_t size() const noexcept {
    const std::lock_guard lock(m_mutex);
    return m_buffer.size();
  }
  //! The capacity given at construction.
  [[nodiscard]] std::size_t capacity() const noexcept { return m_buffer.capacity(); }

private:
  // Hands `value` to the oldest waiting receiver or buffers it; false if full.
  bool give_locked(T& value, detail::wake_list& woken) noexcept {
    if (!m_receivers.empty()) {
      auto& r = static_cast<receive_awaiter&>(m_receivers.pop_front());
      r.m_result.emplace(std::move(value));
      r.m_status = detail::wait_status::granted;
      woken.push(r);
      return true;
    }
    if (m_buffer.full()) {
      return false;
    }
    m_buffer.push(std::move(value));
    return true;
  }

  // Takes the oldest value: from the buffer (refilled from the oldest waiting sender) or,
  // in a rendezvous channel, from the oldest waiting sender. False if there is none.
  bool take_locked(std::optional<T>& out, detail::wake_list& woken) noexcept {
    if (m_buffer.empty() && m_senders.empty()) {
      return false;
    }
    if (!m_buffer.empty()) {
      m_buffer.pop_into(out);
    }
    if (!m_senders.empty()) {
      auto& s = static_cast<send_awaiter&>(m_senders.pop_front());
      if (out.has_value()) {
        m_buffer.push(std::move(s.m_value));
      } else {
        out.emplace(std::move(s.m_value));
      }
      s.m_status = detail::wait_status::granted;
      woken.push(s);
    }
    return true;
  }

  bool start_send(send_awaiter& s) noexcept {
    detail::wake_list woken;
    {
      const std::lock_guard lock(m_mutex);
      if (m_closed) {
        s.m_status = detail::wait_status::closed;
        return true;
      }
      if (!give_locked(s.m_value, woken)) {
        m_senders.push_back(s);
        return false;
      }
      s.m_status = detail::wait_status::granted;
    }
    woken.wake_all();
    return true;
  }

  bool start_receive(receive_awaiter& r) noexcept {
    detail::wake_list woken;
    {
      const std::lock_guard lock(m_mutex);
      if (take_locked(r.m_result, woken)) {
        r.m_status = detail::wait_status::granted;
      } else if (m_closed) {
        r.m_status = detail::wait_status::closed;
      } else {
        m_receivers.push_back(r);
        return false;
      }
    }
    woken.wake_all();
    return true;
  }

  mutable std::mutex m_mutex;
  detail::sync_ring_buffer<T> m_buffer;
  detail::waiter_queue m_senders;
  detail::waiter_queue m_receivers;
  bool m_closed = false;
};

} // namespace cuawait
