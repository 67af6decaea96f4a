// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `mpi::request_awaiter`: what `co_await` on an MPI operation suspends on. Made by an
//! `mpi::reactor` (`wait`, `send`, `recv`, `start`); see reactor.hpp for the whole story.

#include "cuawait/executor.hpp"

#include <mpi.h>

#include <atomic>
#include <coroutine>
#include <cstddef>
#include <optional>
#include <stop_token>
#include <type_traits>
#include <utility>

namespace cuawait::mpi {

class reactor;

//! Awaits one MPI request and yields its `MPI_Status`.
//!
//! The operation starts (`MPI_Isend`, `MPI_Irecv`, the function given to `reactor::start`)
//! when the awaiter is awaited, not when it is made; a request made by the user
//! (`reactor::wait`) is adopted as it is. The coroutine suspends until the reactor's
//! `MPI_Testsome` reports the request complete, then resumes on the executor it suspended
//! on (with its priority), or on the polling thread when it has none.
//!
//! Cancellation: the stop token given to the reactor function, otherwise the token of the
//! awaiting coroutine (a `cuawait::task`'s, or the one `when_any` gives each child). A stop
//! request calls `MPI_Cancel` on the request; the coroutine resumes once MPI reports the
//! request complete (so MPI never touches the buffer afterwards): with
//! `operation_cancelled` if the cancellation took effect, with the normal result if the
//! operation had completed first. An operation not started yet when stop is requested is
//! never started. MPI cannot always cancel a send that has begun (Open MPI does not): such
//! a send resumes when it completes or fails.
//!
//! Movable until awaited (so `when_all` and `when_any` can hold it); awaited once.
class [[nodiscard]] request_awaiter {
public:
  request_awaiter(request_awaiter&& other) noexcept;
  request_awaiter(const request_awaiter&) = delete;
  request_awaiter& operator=(const request_awaiter&) = delete;
  request_awaiter& operator=(request_awaiter&&) = delete;
  ~request_awaiter() = default;

  //! Replaces the stop token (before the `co_await`).
  void set_stop_token(std::stop_token token) noexcept { m_token = std::move(token); }

  [[nodiscard]] bool await_ready() const noexcept { return false; }

  template <class Promise>
  bool await_suspend(std::coroutine_handle<Promise> h) {
    if (!m_token.stop_possible()) {
      if constexpr (requires { h.promise().get_stop_token(); }) {
        m_token = h.promise().get_stop_token();
      }
    }
    return suspend(h);
  }

  //! The status of the completed request (source, tag, `MPI_Get_count`).
  //! @throws mpi_error naming the operation and the MPI error, when starting it failed or
  //!         the request completed with an error.
  //! @throws operation_cancelled when stop was requested and MPI cancelled the request (or
  //!         it was never started), or the reactor was destroyed first.
  MPI_Status await_resume();

protected:
  //! Starts the operation into `*out`; returns an MPI error code.
  using start_fn = int (*)(request_awaiter& self, MPI_Request* out) noexcept;

  //! Arguments of a point-to-point operation.
  struct p2p_args {
    void* buffer = nullptr;
    int count = 0;
    MPI_Datatype type = MPI_DATATYPE_NULL;
    int peer = MPI_PROC_NULL;
    int tag = 0;
    MPI_Comm comm = MPI_COMM_NULL;
  };

  request_awaiter(reactor& r, const char* operation, const char* api, start_fn start,
                  MPI_Request* adopt, p2p_args args, std::stop_token token) noexcept
      : m_reactor(&r), m_operation(operation), m_api(api), m_start(start), m_user_request(adopt),
        m_args(args), m_token(std::move(token)) {}

  friend class reactor;

  [[nodiscard]] const p2p_args& args() const noexcept { return m_args; }

private:
  enum class outcome : unsigned char { pending, done, cancelled, failed, closed };
  struct on_stop {
    request_awaiter* self;
    void operator()() const noexcept;
  };

  bool suspend(std::coroutine_handle<> h);
  //! The completing side of the arrival handshake (outcome already set): resumes the
  //! coroutine on its executor, or inline, unless `suspend` has not returned yet.
  void arrive_and_resume() noexcept;

  reactor* m_reactor;
  const char* m_operation; //!< "cuawait::mpi::recv"...
  const char* m_api;       //!< "MPI_Irecv"...
  start_fn m_start;        //!< null: adopt `*m_user_request`
  MPI_Request* m_user_request;
  p2p_args m_args;
  std::stop_token m_token;
  std::optional<std::stop_callback<on_stop>> m_stop;

  std::coroutine_handle<> m_handle;
  executor* m_executor = nullptr;
  priority m_priority = priority::normal;
  std::atomic<bool> m_arrived{false};

  // Guarded by the reactor's mutex while queued.
  std::size_t m_index = 0;
  bool m_queued = false;
  bool m_cancel_requested = false;
  request_awaiter* m_next = nullptr; //!< completed list of one poll

  // Written before the arrival, read in await_resume.
  outcome m_outcome = outcome::pending;
  int m_error = MPI_SUCCESS;
  MPI_Status m_status{};
};

//! `reactor::start(name, f)`: a request made by `f(MPI_Request&)` when awaited (a
//! nonblocking collective, a persistent request's `MPI_Start`...), under the reactor's MPI
//! lock.
template <class F>
class [[nodiscard]] start_awaiter : public request_awaiter {
public:
  start_awaiter(reactor& r, const char* operation, F fn,
                std::stop_token token) noexcept(std::is_nothrow_move_constructible_v<F>)
      : request_awaiter(r, operation, operation, &start_awaiter::call, nullptr, {},
                        std::move(token)),
        m_fn(std::move(fn)) {}
  start_awaiter(start_awaiter&& other) noexcept(std::is_nothrow_move_constructible_v<F>)
      : request_awaiter(std::move(other)), m_fn(std::move(other.m_fn)) {}

private:
  static int call(request_awaiter& self, MPI_Request* out) noexcept {
    try {
      return static_cast<int>(static_cast<start_awaiter&>(self).m_fn(*out));
    } catch (...) {
      return MPI_ERR_OTHER;
    }
  }
  F m_fn;
};

} // namespace cuawait::mpi
