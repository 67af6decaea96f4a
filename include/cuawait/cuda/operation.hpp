// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The awaitables of GPU work. A stream operation is enqueued when it is called and
//! returns an `operation`; `co_await op` suspends until the work finished. Discarding the
//! `operation` is fine: the work still runs, in stream order.
//!
//! One completion per `co_await`, not per operation: the completion marker (event, ticket
//! or callback, depending on the strategy) is enqueued when the operation is awaited, so
//! enqueuing several operations and awaiting the last costs one marker. The marker sits
//! behind everything enqueued on the stream by then: awaiting an operation after more work
//! was enqueued on its stream also waits for that work. To wait for an earlier point
//! exactly, `record` an event there and `co_await` the event.
//!
//! Every GPU await honours a stop token: the one given with `with_stop_token`, else the
//! awaiting coroutine's (a cuawait task inherits its awaiter's; `when_any` and
//! `async_scope` give their children theirs). A stop request withdraws the wait from the
//! reactor and resumes the coroutine at once with `operation_cancelled`; the GPU work runs
//! on in the background, in stream order (see docs/CANCELLATION.md for what that means
//! for the buffers it touches).

#include "cuawait/cancellation.hpp"
#include "cuawait/completion_reactor.hpp"
#include "cuawait/cuda/error.hpp"
#include "cuawait/cuda/event.hpp"
#include "cuawait/cuda/reactor.hpp"
#include "cuawait/result.hpp"

#include <cuda_runtime_api.h>

#include <atomic>
#include <coroutine>
#include <source_location>
#include <stop_token>
#include <string>
#include <utility>

namespace cuawait::cuda {

namespace detail {

// --- capture guard: the check every awaitable stream operation makes before it suspends.
// Inside a graph capture region the operation was recorded, not run, so waiting for it
// would never end.

//! Capture regions open in the process (cuawait's `capture_region`s). While it is zero,
//! awaitables skip the driver query below: the check costs nothing outside captures.
//! Captures begun with the raw CUDA API are not counted and not detected.
inline std::atomic<int> open_capture_regions{0};

//! True when `s` is capturing into a graph (`cudaStreamIsCapturing`). A capture that was
//! invalidated counts as capturing: the region is still open.
//! @throws cuda_error ("stream capture query")
[[nodiscard]] inline bool stream_is_capturing(cudaStream_t s) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  ::cuawait::cuda::check("stream capture query", cudaStreamIsCapturing(s, &st),
                         "cudaStreamIsCapturing");
  return st != cudaStreamCaptureStatusNone;
}

//! Throws when `s` is capturing, naming `operation`: "co_await copy H2D inside a graph
//! capture region: ...". Awaitables call it in `await_suspend` (or before registering with
//! the reactor), so a wait inside a region fails at once instead of hanging. Does not
//! disturb the capture: the region can still end cleanly.
//! @throws cuda_error with `cudaErrorStreamCaptureUnsupported`
inline void throw_if_capturing(cudaStream_t s, const char* operation,
                               std::source_location where = std::source_location::current()) {
  if (open_capture_regions.load(std::memory_order_relaxed) != 0 && stream_is_capturing(s)) {
    const std::string what = std::string("co_await ") + (operation ? operation : "operation") +
                             " inside a graph capture region (operations there are recorded, "
                             "not run: await the graph's launch after the region ends)";
    throw ::cuawait::cuda::cuda_error(cudaErrorStreamCaptureUnsupported, what.c_str(),
                                      "cudaStreamIsCapturing", where);
  }
}

// --- the awaiter

//! Turns a resolved wait into `cuda_error` (or nothing on success).
[[nodiscard]] inline result<void, cuda_error>
to_result(const completion_status& st, const char* operation, const std::source_location& where) {
  switch (st.state) {
  case completion_state::done:
    return {};
  case completion_state::cancelled:
    return {error_tag, cuda_error(cudaErrorCudartUnloading, operation,
                                  "completion reactor shut down before the work finished", where)};
  default:
    return {error_tag,
            cuda_error(static_cast<cudaError_t>(st.error), operation, "GPU work awaited", where)};
  }
}

//! What `operation` and `event_wait` share: the wait node and its submission.
template <bool Throwing>
class gpu_awaiter_base {
public:
  [[nodiscard]] bool await_ready() const noexcept { return false; }

  //! @throws operation_cancelled when a stop request ended the wait (also from the
  //! non-throwing form: a cancellation is not an outcome of the GPU work).
  auto await_resume() {
    if (m_entered != nullptr) {
      detail::reenter_context(*m_entered); // a runtime serving several devices routed the wait
    }
    const completion_status st = m_wait.finish();
    if (m_wait.stopped()) {
      throw operation_cancelled("cuawait::cuda: GPU wait cancelled by a stop request");
    }
    if constexpr (Throwing) {
      if (st.state != completion_state::done) {
        throw to_result(st, m_wait.node().operation, m_where).error();
      }
    } else {
      return to_result(st, m_wait.node().operation, m_where);
    }
  }

protected:
  gpu_awaiter_base(const void* lane, const char* what, std::source_location where,
                   std::stop_token token = {}) noexcept
      : m_where(where), m_token(std::move(token)) {
    m_wait.node().lane_key = lane;
    m_wait.node().operation = what;
  }

  //! The token the wait honours: `m_token` when given, none after `ignore_stop`, else
  //! the awaiting coroutine's.
  template <class Promise, class F>
  bool with_token(std::coroutine_handle<Promise> h, F&& f) {
    if (m_ignore_stop) {
      return static_cast<F&&>(f)(std::stop_token{});
    }
    return ::cuawait::detail::with_wait_stop_token(h, m_token, static_cast<F&&>(f));
  }

  ::cuawait::detail::reactor_wait m_wait;
  std::source_location m_where;
  std::stop_token m_token; //!< given with `with_stop_token`; else the awaiter's is used
  //! The context a routed wait made current (a runtime serving several devices).
  device_context* m_entered = nullptr;
  bool m_ignore_stop = false;
};

} // namespace detail

//! The awaitable of work enqueued on a stream. Move-only until awaited; awaiting it
//! enqueues the completion marker and suspends (unless it finished already), then resumes
//! on the executor the coroutine suspended on. `co_await op` throws `cuda_error` naming
//! the operation when the work failed (and says so when the context is lost);
//! `co_await op.try_await()` yields `result<void, cuda_error>` instead.
//!
//! Destroying a coroutine suspended on it withdraws the wait: it is never resumed.
//! A stop request on its token (see the file comment) resumes it at once with
//! `operation_cancelled`; a token already stopped when it is awaited enqueues no marker.
//! @throws cuda_error from `co_await` also when the marker cannot be enqueued.
class operation : public detail::gpu_awaiter_base<true> {
public:
  //! An awaitable for all work enqueued on `stream` so far, named `what` in errors.
  operation(cudaStream_t stream, const char* what,
            std::source_location where = std::source_location::current()) noexcept
      : gpu_awaiter_base(stream, what, where), m_stream(stream) {}
  operation(operation&&) noexcept = default;
  operation& operator=(operation&&) = delete;

  //! Enqueues the marker and submits the wait; false when the work had already finished
  //! (or stop was requested). @throws cuda_error when the marker cannot be enqueued (then
  //! the coroutine resumes with that exception).
  template <class Promise>
  bool await_suspend(std::coroutine_handle<Promise> h) {
    return with_token(h, [&](const std::stop_token& t) { return submit(h, t); });
  }

  //! The same wait, cancellable through `token` instead of the awaiting coroutine's.
  [[nodiscard]] operation with_stop_token(std::stop_token token) && noexcept {
    m_token = std::move(token);
    m_ignore_stop = false;
    return std::move(*this);
  }
  //! The same wait, not cancellable at all: it ends only when the work has finished. For
  //! cleanup after a cancellation, when memory the abandoned work touches must outlive it
  //! (see docs/CANCELLATION.md and `stream_ref::drain`).
  [[nodiscard]] operation ignore_stop() && noexcept {
    m_token = {};
    m_ignore_stop = true;
    return std::move(*this);
  }

  //! The non-throwing form: `co_await op.try_await()` yields `result<void, cuda_error>`.
  class try_awaiter;
  [[nodiscard]] try_awaiter try_await() && noexcept;

  //! The stream the work runs on.
  [[nodiscard]] cudaStream_t stream() const noexcept { return m_stream; }

protected:
  bool submit(std::coroutine_handle<> h, const std::stop_token& token) {
    ::cuawait::cuda::detail::throw_if_capturing(m_stream, m_wait.node().operation, m_where);
    if (m_wait.stop_before_submit(token)) {
      return false;
    }
    gpu_reactor& r = detail::reactor_for_stream(m_stream, &m_entered);
    r.source().arm(m_stream, m_wait.node());
    return m_wait.suspend(r.reactor(), h, token);
  }

private:
  cudaStream_t m_stream;
};

//! `co_await op.try_await()`: like awaiting `op`, yielding `result<void, cuda_error>`
//! instead of throwing (an error enqueuing the marker is returned too).
class operation::try_awaiter : public detail::gpu_awaiter_base<false> {
public:
  explicit try_awaiter(operation&& op) noexcept
      : gpu_awaiter_base(op.m_stream, op.m_wait.node().operation, op.m_where,
                         std::move(op.m_token)),
        m_stream(op.m_stream) {
    m_ignore_stop = op.m_ignore_stop;
  }
  //! @throws no_device_context (misuse, not a GPU failure) when the thread has no context.
  template <class Promise>
  bool await_suspend(std::coroutine_handle<Promise> h) {
    return with_token(h, [&](const std::stop_token& t) { return submit(h, t); });
  }
  //! @throws operation_cancelled when a stop request ended the wait.
  result<void, cuda_error> await_resume() {
    if (m_arm_error != 0) {
      (void)m_wait.finish();
      return {error_tag, cuda_error(static_cast<cudaError_t>(m_arm_error), m_wait.node().operation,
                                    "enqueue completion marker", m_where)};
    }
    return gpu_awaiter_base::await_resume();
  }

private:
  bool submit(std::coroutine_handle<> h, const std::stop_token& token) {
    // no_device_context propagates: misuse, not GPU
    gpu_reactor& r = detail::reactor_for_stream(m_stream, &m_entered);
    try {
      ::cuawait::cuda::detail::throw_if_capturing(m_stream, m_wait.node().operation, m_where);
      if (m_wait.stop_before_submit(token)) {
        return false;
      }
      r.source().arm(m_stream, m_wait.node());
      return m_wait.suspend(r.reactor(), h, token);
    } catch (const cuda_error& e) {
      m_arm_error = static_cast<int>(e.code());
      return false;
    } catch (...) {
      m_arm_error = static_cast<int>(cudaErrorMemoryAllocation);
      return false;
    }
  }

  cudaStream_t m_stream;
  int m_arm_error = 0;
};

inline operation::try_awaiter operation::try_await() && noexcept {
  return try_awaiter(std::move(*this));
}

//! `co_await ev`: waits for the work `ev` last recorded (on whatever stream), polled with
//! `cudaEventQuery` whatever the strategy. The event must stay alive and not be
//! re-recorded until the wait resumes. Honours a stop token as `operation` does (given
//! here, else the awaiting coroutine's). @throws cuda_error when that work failed;
//! operation_cancelled when a stop request ended the wait.
class event_wait : public detail::gpu_awaiter_base<true> {
public:
  event_wait(cudaEvent_t e, std::source_location where = std::source_location::current(),
             std::stop_token token = {}) noexcept
      : gpu_awaiter_base(e, "event wait", where, std::move(token)) {
    m_wait.node().token = reinterpret_cast<std::uintptr_t>(e);
    m_wait.node().source_data = nullptr; // "token is a foreign event"
  }
  template <class Promise>
  bool await_suspend(std::coroutine_handle<Promise> h) {
    return ::cuawait::detail::with_wait_stop_token(h, m_token, [&](const std::stop_token& t) {
      if (m_wait.stop_before_submit(t)) {
        return false;
      }
      return m_wait.suspend(current_reactor().reactor(), h, t);
    });
  }
};

//! `co_await ev` for an `event_ref` (or `event`): see `event_wait`.
//! @throws cuda_error for a moved-from event.
inline event_wait operator co_await(event_ref e) { return event_wait(e.get()); }

} // namespace cuawait::cuda
