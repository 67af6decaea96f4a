// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `nccl::operation`: the awaitable of an NCCL call enqueued on a stream. It is the GPU
//! awaitable of the CUDA layer (`cuda::operation`, so it composes with `when_all`,
//! `when_any` and stop tokens) plus what a communication needs on top of it: a wait that a
//! failed or silent peer can never hang.

#include "cuawait/cancellation.hpp"
#include "cuawait/completion_reactor.hpp"
#include "cuawait/cuda/library_status.hpp"
#include "cuawait/cuda/operation.hpp"

#include <nccl.h>

#include <atomic>
#include <coroutine>
#include <memory>
#include <optional>
#include <source_location>
#include <stop_token>
#include <utility>

namespace cuawait::nccl {

namespace detail {

//! A communicator's handle and health, shared by the `communicator` and the waits on its
//! work (so that a wait outliving a moved communicator still reads it). Defined in src/.
struct comm_state;

//! One pending wait, watched by the process's NCCL watchdog thread while it is linked.
struct watch_entry {
  std::shared_ptr<comm_state> state;
  std::stop_source inner;      //!< stops the wrapped `cuda::operation`
  watch_entry* prev = nullptr; //!< guarded by the watchdog's mutex
  watch_entry* next = nullptr; //!< likewise
  bool linked = false;         //!< likewise
};

//! Links `e` into the watchdog (starting its thread the first time).
void watch(watch_entry& e);
//! Unlinks `e`; returns once the watchdog no longer reads it. Idempotent.
void unwatch(watch_entry& e) noexcept;
//! Marks the communicator to be aborted; the watchdog thread calls `ncclCommAbort` (so that
//! a stop callback never blocks in it). Idempotent.
void request_abort(comm_state& s) noexcept;
//! True once the communicator failed or an abort was asked for: its waits are ended.
[[nodiscard]] bool failed(const comm_state& s) noexcept;

} // namespace detail

//! The awaitable of NCCL work on a stream: `co_await comm.all_reduce(...)`. The work is
//! enqueued when the call returns (a refused call throws there); awaiting suspends until
//! the stream reached the end of it, like `cuda::operation` (whose marker also waits for
//! anything enqueued on the stream later). Movable until awaited.
//!
//! While it is pending, the process's NCCL watchdog polls `ncclCommGetAsyncError` on its
//! communicator (every millisecond). An asynchronous error (a peer died, a network
//! failure) aborts the communicator and resumes every pending wait on it with
//! `cuda::library_error` naming the error.
//!
//! A stop request (the token given with `with_stop_token`, else the awaiting coroutine's)
//! resumes the coroutine at once with `operation_cancelled` and aborts the communicator
//! (`ncclCommAbort`, on the watchdog thread): the peers of an abandoned collective would
//! otherwise wait for it forever. Aborting is final: every later call on that communicator
//! throws, and the other waits pending on it resume with `library_error`. A stop request
//! already made when the operation is awaited aborts too (the work was enqueued).
class operation {
public:
  //! The awaitable of the work enqueued on `stream` so far, on the communicator `state`;
  //! `what` (a string literal) names it in errors.
  //! @throws std::bad_alloc
  operation(cudaStream_t stream, std::shared_ptr<detail::comm_state> state, const char* what,
            std::source_location where = std::source_location::current())
      : m_entry(std::make_unique<detail::watch_entry>()),
        m_op(cuda::operation(stream, what, where).with_stop_token(m_entry->inner.get_token())),
        m_operation(what), m_where(where) {
    m_entry->state = std::move(state);
  }
  operation(operation&& other) noexcept
      : m_entry(std::move(other.m_entry)), m_op(std::move(other.m_op)),
        m_operation(other.m_operation), m_where(other.m_where), m_token(std::move(other.m_token)) {}
  operation& operator=(operation&&) = delete;
  ~operation() {
    if (m_entry) {
      m_stop.reset(); // before unwatching: no stop callback may run any more
      detail::unwatch(*m_entry);
    }
  }

  //! The same wait, cancellable through `token` instead of the awaiting coroutine's.
  [[nodiscard]] operation with_stop_token(std::stop_token token) && noexcept {
    m_token = std::move(token);
    return std::move(*this);
  }

  [[nodiscard]] bool await_ready() const noexcept { return false; }

  template <class Promise>
  bool await_suspend(std::coroutine_handle<Promise> h) {
    return ::cuawait::detail::with_wait_stop_token(h, m_token, [&](const std::stop_token& t) {
      if (!arm(t)) {
        return false;
      }
      return m_op->await_suspend(h);
    });
  }

  //! @throws operation_cancelled after a stop request (the communicator is then aborted);
  //!         cuda::library_error naming the asynchronous NCCL error (or "communicator
  //!         aborted") when the communicator failed or was aborted while the work was
  //!         pending; cuda_error when the GPU work failed.
  void await_resume();

  //! The stream the work runs on.
  [[nodiscard]] cudaStream_t stream() const noexcept { return m_op->stream(); }

private:
  struct on_stop {
    operation* self;
    void operator()() const noexcept;
  };

  //! Watches the communicator and installs the stop callback; false when stop was already
  //! requested (the coroutine does not suspend).
  bool arm(const std::stop_token& outer);

  std::unique_ptr<detail::watch_entry> m_entry; //!< stable address while watched
  std::optional<cuda::operation> m_op;
  const char* m_operation;
  std::source_location m_where;
  std::stop_token m_token;
  std::optional<std::stop_callback<on_stop>> m_stop;
  std::atomic<bool> m_stopped{false}; //!< the outer token's stop request reached this wait
};

} // namespace cuawait::nccl
