// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Capturing what a coroutine (or a plain function) enqueues on a stream into a `graph`.
//!
//! @code
//! // Asynchronous region: the lambda is a coroutine that enqueues, never awaits GPU work.
//! cuda::graph g = co_await cuda::capture(s, [&](cuda::stream_ref s) -> task<void> {
//!   s.copy(dev, host, bytes);                 // recorded, not run
//!   s.launch(kernel_a, grid, block, dev, n);
//!   co_return;
//! });
//! // Synchronous region: a plain function, the graph is returned directly.
//! cuda::graph g2 = cuda::capture(s, [&](cuda::stream_ref s) { enqueue_job(s, job); });
//! cuda::graph_exec exec = g.instantiate();
//! exec.launch(s);
//! co_await s;
//! @endcode
//!
//! Rules of a region:
//! - Operations on the stream are recorded, not run. Awaiting one there (`co_await
//!   s.copy(...)`, `co_await s`) is an error naming the operation, thrown at once (see
//!   `detail::throw_if_capturing` in operation.hpp), never a hang.
//! - The region uses `cudaStreamCaptureModeRelaxed`: a coroutine that suspends on something
//!   else (a channel, a mutex) and resumes on another pool thread inside the region keeps
//!   working, and the region may end on a thread other than the one that began it (other
//!   modes forbid both). The price: CUDA does not stop other threads from making
//!   "unsafe" calls (cudaMalloc, a legacy-stream copy) while the region is open; they run
//!   immediately instead of being recorded.
//! - Everything enqueued on the stream while the region is open is captured, from any
//!   coroutine: give the region a stream of its own (a leased one), not a shared stream.
//! - The legacy default stream cannot be captured; use a created stream.
//! - Errors: an operation CUDA cannot capture, or a synchronizing call on the stream, fails
//!   with a `cuda_error` naming it; the region is then discarded (`cudaStreamEndCapture`),
//!   the error propagates, and the stream is usable again. A capture that CUDA invalidated
//!   silently fails when the region ends, naming the region's source location.

#include "cuawait/cuda/error.hpp"
#include "cuawait/cuda/graph.hpp"
#include "cuawait/cuda/operation.hpp"
#include "cuawait/cuda/stream.hpp"
#include "cuawait/task.hpp"

#include <cuda_runtime_api.h>

#include <concepts>
#include <functional>
#include <memory>
#include <source_location>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace cuawait::cuda {

//! A scoped capture: from construction to `end()`, what is enqueued on the stream is
//! recorded into a graph. Destroying an unfinished region discards the capture and leaves
//! the stream usable. Not movable (it stands for a state of the stream).
class capture_region {
public:
  //! Begins a relaxed-mode capture on `s`.
  //! @throws cuda_error ("graph capture begin"), e.g. when `s` is the legacy default stream
  //! or is already capturing.
  explicit capture_region(stream_ref s,
                          std::source_location where = std::source_location::current())
      : m_stream(s), m_where(where) {
    check("graph capture begin", cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeRelaxed),
          "cudaStreamBeginCapture", where);
    m_active = true;
    ::cuawait::cuda::detail::open_capture_regions.fetch_add(1, std::memory_order_relaxed);
  }
  capture_region(const capture_region&) = delete;
  capture_region& operator=(const capture_region&) = delete;
  ~capture_region() { abandon(); }

  //! The stream being captured.
  [[nodiscard]] stream_ref stream() const noexcept { return m_stream; }
  //! True until `end()` or `abandon()`.
  [[nodiscard]] bool active() const noexcept { return m_active; }

  //! Ends the capture and returns what was recorded.
  //! @throws cuda_error ("graph capture end: ..."), naming where the region began, when the
  //! capture was invalidated or left a forked stream unjoined. The stream is usable after.
  //! @throws std::logic_error when the region already ended.
  [[nodiscard]] graph end() {
    if (!m_active) {
      throw std::logic_error("cuawait::cuda::capture_region::end: the region already ended");
    }
    m_active = false;
    ::cuawait::cuda::detail::open_capture_regions.fetch_sub(1, std::memory_order_relaxed);
    cudaGraph_t g = nullptr;
    const cudaError_t e = cudaStreamEndCapture(m_stream.get(), &g);
    if (e != cudaSuccess) {
      if (g != nullptr) {
        (void)cudaGraphDestroy(g);
      }
      check(end_failure(e).c_str(), e, "cudaStreamEndCapture", m_where);
    }
    return graph::from_native_handle(g);
  }

  //! Ends the capture and throws the recording away. The stream is usable after. Never
  //! throws; a no-op when the region already ended.
  void abandon() noexcept {
    if (!m_active) {
      return;
    }
    m_active = false;
    ::cuawait::cuda::detail::open_capture_regions.fetch_sub(1, std::memory_order_relaxed);
    cudaGraph_t g = nullptr;
    // An invalidated capture reports an error here: expected, the work is discarded anyway.
    (void)try_check(cudaStreamEndCapture(m_stream.get(), &g));
    if (g != nullptr) {
      check_noexcept("graph capture abandon", cudaGraphDestroy(g), "cudaGraphDestroy");
    }
  }

private:
  std::string end_failure(cudaError_t e) const {
    std::string s = "graph capture end: ";
    switch (e) {
    case cudaErrorStreamCaptureInvalidated:
      s += "the capture was invalidated by an operation in the region that cannot be captured "
           "(a synchronizing call such as cudaStreamSynchronize or a non-Async cudaMemcpy, a "
           "legacy-stream operation, or a query of an event recorded in the region)";
      break;
    case cudaErrorStreamCaptureUnjoined:
      s += "a stream forked from the captured one was not joined back before the end";
      break;
    default:
      s += "the capture could not be completed";
      break;
    }
    const std::string file = m_where.file_name();
    s += "; region began at " + file.substr(file.find_last_of('/') + 1) + ":" +
         std::to_string(m_where.line());
    return s;
  }

  stream_ref m_stream;
  std::source_location m_where;
  bool m_active = false;
};

namespace detail {

template <class T>
inline constexpr bool is_task_v = false;
template <class T>
inline constexpr bool is_task_v<task<T>> = true;

//! The region around an already created, not yet started task. The callable that made the
//! task is kept alive by `keep` (type-erased, so that no lambda type becomes a member of
//! this coroutine's frame: g++ warns about that in .cu files, -Wsubobject-linkage).
template <class T>
task<graph> capture_task(stream_ref s, std::shared_ptr<void> keep, task<T> body,
                         std::source_location where) {
  // `keep` precedes `body`: on an exception the body's frame is destroyed first.
  capture_region region(s, where);
  co_await std::move(body); // an exception unwinds `region`, which discards the capture
  {                         // the body's frame dies before the callable it may refer to
    const task<T> finished = std::move(body);
  }
  keep.reset();
  co_return region.end();
}

} // namespace detail

//! Captures what `f(s)` enqueues on `s` into a graph.
//! - `f` returns void: runs it now and returns the `graph`.
//! - `f` returns a `task<T>` (a coroutine, lazily started): returns a `task<graph>`; the
//!   region begins when that task is awaited and spans the coroutine, which may suspend on
//!   non-GPU things and change threads. Nothing of `f`'s body runs before the region begins.
//! `f` is moved into the capture and lives until it finishes (lambdas capturing by
//! reference are fine while their referents live).
//! @throws cuda_error as `capture_region` does, or whatever `f` throws (the capture is then
//! discarded and the stream usable).
template <class F>
requires std::invocable<F&, stream_ref>
[[nodiscard]] auto capture(stream_ref s, F f,
                           std::source_location where = std::source_location::current()) {
  using result_t = std::invoke_result_t<F&, stream_ref>;
  if constexpr (std::is_void_v<result_t>) {
    capture_region region(s, where);
    std::invoke(f, s);
    return region.end();
  } else {
    static_assert(detail::is_task_v<result_t>,
                  "cuawait::cuda::capture: the function must return void or a cuawait::task "
                  "(an eager awaitable would enqueue its work before the region begins)");
    auto holder = std::make_shared<F>(std::move(f));
    result_t body = std::invoke(*holder, s); // lazy: nothing runs yet
    return detail::capture_task(s, std::shared_ptr<void>(std::move(holder)), std::move(body),
                                where);
  }
}

} // namespace cuawait::cuda
