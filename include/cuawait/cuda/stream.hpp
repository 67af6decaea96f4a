// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! CUDA stream handles: `stream_ref` (non-owning, cheap to copy, wraps any `cudaStream_t`,
//! e.g. one owned by cuBLAS or PyTorch) and `stream` (owning, move-only).
//!
//! Use after move: a moved-from `stream` (or one whose handle was `release()`d) holds a
//! sentinel, never `nullptr` (which names the legacy default stream). Every operation on it,
//! `get()`, and every operation on a `stream_ref` copied from it after the move throws
//! `cuda_error` (`cudaErrorInvalidResourceHandle`, "use of a moved-from cuda::stream");
//! nothing is enqueued anywhere. Destroying it or move-assigning into it is fine.

#include "cuawait/cuda/detail/lane_registry.hpp"
#include "cuawait/cuda/detail/unique_handle.hpp"
#include "cuawait/cuda/error.hpp"
#include "cuawait/cuda/event.hpp"
#include "cuawait/cuda/library_status.hpp"
#include "cuawait/cuda/operation.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <ranges>
#include <source_location>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <utility>

namespace cuawait::cuda {

//! Grid, block and dynamic shared memory of a kernel launch.
struct launch_config {
  dim3 grid{1};
  dim3 block{1};
  std::size_t shared_bytes = 0;
};

class stream_ref;

namespace detail {
//! The owner traits of `stream` (see unique_handle.hpp). Sentinel 0 is a moved-from
//! `stream`, sentinel 1 a moved-from or reset `stream_lease`.
struct stream_traits {
  using handle_type = cudaStream_t;
  using base_type = stream_ref;
  static cudaStream_t& storage(stream_ref& s) noexcept;
  static cudaStream_t moved_from() noexcept { return sentinel_handle<cudaStream_t>(0); }
  static cudaStream_t forgotten_lease() noexcept { return sentinel_handle<cudaStream_t>(1); }
  static bool is_moved_from(cudaStream_t s) noexcept { return is_sentinel_handle(s); }
  static void destroy(cudaStream_t s) noexcept {
    forget_stream(s);
    check_noexcept("stream destroy", cudaStreamDestroy(s), "cudaStreamDestroy");
  }
  [[noreturn]] static void throw_moved_from(cudaStream_t s, std::source_location where) {
    throw cuda_error::moved_from(s == forgotten_lease() ? "cuda::stream_lease" : "cuda::stream",
                                 where);
  }
};
} // namespace detail

//! A non-owning view of a CUDA stream. Cheap to copy; the viewed stream must outlive every
//! use of the view. Default-constructed, it views the legacy default stream (0).
//!
//! Construction from `int` and `nullptr` is deleted so that `stream_ref{0}` cannot silently
//! name the default stream; write `stream_ref{cudaStream_t{}}` when that is meant.
//!
//! A view of a moved-from `stream` or of a moved-from or reset `stream_lease` refuses every
//! operation: each throws `cuda_error` naming the handle ("use of a moved-from
//! cuda::stream") before any CUDA call; the check is one compare.
class stream_ref {
public:
  //! Views the legacy default stream.
  constexpr stream_ref() noexcept = default;
  //! Views `s`; ownership stays with the caller.
  constexpr stream_ref(cudaStream_t s) noexcept : m_stream(s) {} // NOLINT: implicit on purpose
  stream_ref(int) = delete;
  stream_ref(std::nullptr_t) = delete;

  //! The native handle, for a call into CUDA or a stream-ordered library.
  //! @throws cuda_error ("use of a moved-from cuda::stream") for a view of a moved-from
  //! stream or of a moved-from or reset lease.
  [[nodiscard]] cudaStream_t get() const { return native(); }
  //! The device the stream's work runs on (`cudaStreamGetDevice`).
  //! @throws cuda_error (e.g. for a destroyed stream)
  [[nodiscard]] int device() const {
    int d = 0;
    CUAWAIT_CUDA_CHECK("stream device", cudaStreamGetDevice(native(), &d));
    return d;
  }

  //! True when all work enqueued so far has completed (`cudaStreamQuery`).
  //! @throws cuda_error on any error other than `cudaErrorNotReady`.
  [[nodiscard]] bool ready() const {
    const cudaError_t e = cudaStreamQuery(native());
    if (e == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    check("stream query", e, "cudaStreamQuery");
    return true;
  }

  //! Blocks the calling thread until the stream is idle. For tests and shutdown paths; a
  //! coroutine writes `co_await s` instead.
  //! @throws cuda_error when enqueued work failed.
  void sync() const {
    check("stream sync", cudaStreamSynchronize(native()), "cudaStreamSynchronize");
  }

  //! The stream's priority (lower numbers run first, CUDA's convention).
  //! @throws cuda_error
  [[nodiscard]] int priority() const {
    int p = 0;
    check("stream priority", cudaStreamGetPriority(native(), &p), "cudaStreamGetPriority");
    return p;
  }

  friend constexpr bool operator==(stream_ref a, stream_ref b) noexcept {
    return a.m_stream == b.m_stream;
  }

  // --- operations: each is enqueued now and returns its awaitable ------------------------
  // Every one throws cuda_error at the call when CUDA refuses to enqueue it.

  //! Copies `count` elements from `src` to `dst` (host or device pointers: the direction
  //! comes from unified addressing, `cudaMemcpyDefault`). Pageable host memory works but
  //! is staged by CUDA; use pinned memory for asynchronous copies.
  template <class T>
  operation copy(T* dst, const T* src, std::size_t count,
                 std::source_location where = std::source_location::current()) const {
    static_assert(std::is_trivially_copyable_v<T>, "copy: T must be trivially copyable");
    check("copy", cudaMemcpyAsync(dst, src, count * sizeof(T), cudaMemcpyDefault, native(where)),
          "cudaMemcpyAsync", where);
    detail::note_copy(count * sizeof(T));
    return {m_stream, "copy", where};
  }

  //! Copies the contiguous range `src` into the contiguous range `dst` (anything with
  //! `data()` and `size()`: vectors, spans, buffers). @throws std::invalid_argument when
  //! `dst` is smaller than `src`.
  template <class Dst, class Src>
  requires requires(Dst& d, const Src& s) {
    std::data(d);
    std::size(d);
    std::data(s);
    std::size(s);
  }
  operation copy(Dst&& dst, const Src& src,
                 std::source_location where = std::source_location::current()) const {
    if (std::size(dst) < std::size(src)) {
      throw std::invalid_argument(
          "cuawait::cuda::stream_ref::copy: destination smaller than source");
    }
    return copy(std::data(dst), std::data(src), std::size(src), where);
  }

  //! 2-D copy of `height` rows of `width` elements; pitches are in bytes.
  template <class T>
  operation copy_2d(T* dst, std::size_t dst_pitch, const T* src, std::size_t src_pitch,
                    std::size_t width, std::size_t height,
                    std::source_location where = std::source_location::current()) const {
    check("copy 2D",
          cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width * sizeof(T), height,
                            cudaMemcpyDefault, native(where)),
          "cudaMemcpy2DAsync", where);
    detail::note_copy(width * sizeof(T) * height);
    return {m_stream, "copy 2D", where};
  }

  //! Sets `count` elements at `dst` to the byte `value` (like `std::memset`).
  template <class T>
  operation memset(T* dst, int value, std::size_t count,
                   std::source_location where = std::source_location::current()) const {
    check("memset", cudaMemsetAsync(dst, value, count * sizeof(T), native(where)),
          "cudaMemsetAsync", where);
    return {m_stream, "memset", where};
  }

  //! Launches `kernel<<<cfg.grid, cfg.block, cfg.shared_bytes>>>(args...)`. Arguments are
  //! checked against the kernel's parameters at compile time and converted to them. Works
  //! from a .cpp file too (`cudaLaunchKernel`).
  template <class... Params, class... Args>
  requires(sizeof...(Params) == sizeof...(Args) &&
           (std::is_convertible_v<Args&&, Params> && ...)) operation
      launch(launch_config cfg, void (*kernel)(Params...), Args&&... args)
  const {
    return launch_impl(kernel, cfg.grid, cfg.block, cfg.shared_bytes,
                       std::source_location::current(), std::forward<Args>(args)...);
  }
  //! Launches `kernel<<<grid, block>>>(args...)`; with dynamic shared memory, pass a
  //! `launch_config`.
  template <class... Params, class... Args>
  requires(sizeof...(Params) == sizeof...(Args) &&
           (std::is_convertible_v<Args&&, Params> && ...)) operation
      launch(void (*kernel)(Params...), dim3 grid, dim3 block, Args&&... args)
  const {
    return launch_impl(kernel, grid, block, 0, std::source_location::current(),
                       std::forward<Args>(args)...);
  }

  //! Enqueues `f()` to run on a CUDA driver thread once the work before it finished. `f`
  //! must not call CUDA, must be quick (it blocks the stream) and must not throw.
  template <class F>
  operation host_func(F&& f, std::source_location where = std::source_location::current()) const {
    using fn_t = std::decay_t<F>;
    auto boxed = std::make_unique<fn_t>(std::forward<F>(f));
    check("host function",
          cudaLaunchHostFunc(
              native(where),
              [](void* p) {
                const std::unique_ptr<fn_t> fn(static_cast<fn_t*>(p));
                (*fn)();
              },
              boxed.get()),
          "cudaLaunchHostFunc", where);
    (void)boxed.release();
    return {m_stream, "host function", where};
  }

  //! Runs `f(native_stream)` now, for any stream-ordered library call (cuBLAS, cuFFT,
  //! NCCL, Thrust/CUB...), and checks what it returns: a `cudaError_t` failure throws
  //! `cuda_error`; a library status with a registered `status_checker` (`cublasStatus_t`,
  //! `ncclResult_t` where their headers are found, or your own: library_status.hpp) throws
  //! `library_error` naming the library and the status. `f` may return nothing; any other
  //! result type does not compile (a status must never be dropped silently: register its
  //! checker, or check it inside `f` and return nothing).
  //! @throws cuda_error, library_error (nothing is enqueued after the failing call's work)
  template <class F>
  requires std::is_invocable_v<F&, cudaStream_t>
      operation enqueue(F&& f, std::source_location where = std::source_location::current())
  const {
    using status_t = std::invoke_result_t<F&, cudaStream_t>;
    const cudaStream_t s = native(where);
    if constexpr (std::is_void_v<status_t>) {
      f(s);
    } else if constexpr (std::is_same_v<status_t, cudaError_t>) {
      check("enqueue", f(s), "library call", where);
    } else {
      static_assert(concepts::library_status<status_t>,
                    "stream_ref::enqueue: f returns a type that is neither void, cudaError_t nor "
                    "a library status with a cuawait::cuda::status_checker specialisation");
      check_status("enqueue", f(s), where);
    }
    return {m_stream, "enqueue", where};
  }

  //! Records `e` behind the work enqueued so far.
  void record(event_ref e) const {
    CUAWAIT_CUDA_CHECK("event record", cudaEventRecord(e.get(), native()));
  }
  //! Makes later work on this stream wait for what `e` recorded: a device-side
  //! dependency, no host round trip.
  void wait(event_ref e) const {
    CUAWAIT_CUDA_CHECK("stream wait", cudaStreamWaitEvent(native(), e.get(), 0));
  }
  //! Makes later work on this stream wait for all work enqueued on `other` so far.
  void wait(stream_ref other) const;

  //! `co_await s`: waits for all work enqueued on the stream so far.
  //! @throws cuda_error for a view of a moved-from stream or lease.
  operation operator co_await() const { return {native(), "stream"}; }
  //! `co_await s.drain()`: the same, ignoring stop requests. For cleanup after a
  //! cancellation: before memory that abandoned work may still touch is let go without
  //! stream order (an arena slot, a plain `cudaFree`), see docs/CANCELLATION.md.
  //! @throws cuda_error for a view of a moved-from stream or lease.
  [[nodiscard]] operation drain() const {
    return operation{native(), "stream drain"}.ignore_stop();
  }

private:
  template <class... Params, class... Args>
  operation launch_impl(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t shared_bytes,
                        std::source_location where, Args&&... args) const {
    std::tuple<std::remove_cvref_t<Params>...> converted(std::forward<Args>(args)...);
    void* argv[sizeof...(Params) + 1] = {};
    std::apply(
        [&](auto&... a) {
          std::size_t i = 0;
          ((argv[i++] = static_cast<void*>(&a)), ...);
        },
        converted);
    check("kernel launch",
          cudaLaunchKernel(reinterpret_cast<const void*>(kernel), grid, block, argv, shared_bytes,
                           native(where)),
          "cudaLaunchKernel", where);
    return {m_stream, "kernel launch", where};
  }

  friend struct detail::stream_traits;

  // The stream for an API call: one compare against the moved-from sentinels.
  [[nodiscard]] cudaStream_t
  native(std::source_location where = std::source_location::current()) const {
    return detail::checked<detail::stream_traits>(m_stream, where);
  }

  cudaStream_t m_stream = nullptr;
};

inline cudaStream_t& detail::stream_traits::storage(stream_ref& s) noexcept { return s.m_stream; }

inline void stream_ref::wait(stream_ref other) const {
  (void)native(); // refuse a moved-from stream before recording anything on `other`
  // A transient event: the wait captures the record at call time, so re-using or
  // destroying the event afterwards is safe.
  const event e;
  other.record(e);
  wait(e);
}

//! Options for creating an owning `stream`.
struct stream_options {
  //! `cudaStreamNonBlocking`: no implicit synchronisation with the legacy default stream.
  bool non_blocking = true;
  //! CUDA priority; lower numbers are higher priority. Clamped by CUDA to the device's
  //! range (`cudaDeviceGetStreamPriorityRange`).
  int priority = 0;
};

//! An owning CUDA stream, move-only. Being a `stream_ref`, it offers every stream
//! operation. The destructor destroys the stream without waiting: CUDA lets enqueued work
//! finish, and the reactor never touches a stream handle after its last wait resolves.
//! Never throws from the destructor.
class stream : public detail::unique_handle<detail::stream_traits> {
  using owner = detail::unique_handle<detail::stream_traits>;

public:
  //! Creates a non-blocking stream of default priority on the current device.
  //! @throws cuda_error
  stream() : stream(stream_options{}) {}
  //! Creates a stream with `options` on the current device.
  //! @throws cuda_error
  explicit stream(stream_options options) : owner(create(options)) {}
  stream(int) = delete;
  stream(std::nullptr_t) = delete;

  //! Moves the stream; `other` is left moved-from (see the file comment).
  stream(stream&& other) noexcept = default;
  //! Destroys this stream, then takes `other`'s; `other` is left moved-from.
  stream& operator=(stream&& other) noexcept = default;
  ~stream() = default;

  //! Takes ownership of `s` (it will be destroyed by this object).
  [[nodiscard]] static stream from_native_handle(cudaStream_t s) noexcept { return stream(s, 0); }

  //! Gives up ownership; the caller destroys the returned handle. This object is then
  //! moved-from.
  using owner::release;

private:
  stream(cudaStream_t s, int /*adopt*/) noexcept : owner(s) {}

  static cudaStream_t create(stream_options o) {
    cudaStream_t s = nullptr;
    CUAWAIT_CUDA_CHECK(
        "stream create",
        cudaStreamCreateWithPriority(&s, o.non_blocking ? cudaStreamNonBlocking : cudaStreamDefault,
                                     o.priority));
    return s;
  }
};

} // namespace cuawait::cuda
