// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Cached regions: a region of GPU work inside a coroutine becomes a CUDA graph, built on
//! first use, instantiated once, and on later uses updated in place (new pointers, new
//! kernel arguments) and replayed with one launch.
//!
//! @code
//! task<void> job(cuda::stream_ref s, float* x, int n, float a) {
//!   co_await cuda::cached_region(s, "job", [&](cuda::region_stream rs) {
//!     for (int k = 0; k < 32; ++k) {
//!       rs.launch(step, grid, block, x, n, a);   // recorded, not run
//!     }
//!   });                                           // one graph launch; resumes when it is done
//! }
//! @endcode
//!
//! - The body is a function or a coroutine (returning `task<void>`: it may `co_await` CPU
//!   work, a mutex, a channel, a pool hop). It enqueues through the `region_stream` it is
//!   given: `launch`, `copy`, `memset` are recorded (no CUDA call); `enqueue(f)` runs any
//!   stream-ordered call (cuBLAS, `<<<>>>`) on the stream under stream capture. A body that
//!   takes a `stream_ref` instead is always captured.
//! - Key: a name, or (without one) the call site. One key holds several shapes (the
//!   sequence of operation kinds), each with its executables; a replay whose shape is cached
//!   updates only the nodes whose parameters changed (`cudaGraphExec*NodeSetParams`), and
//!   one whose parameters did not change launches as it is. A new shape for a known key is
//!   instantiated and the reason kept (`last_reinstantiation_reason()`). A node update CUDA
//!   refuses falls back to instantiating again (counted in `update_failures`).
//! - Concurrency: each shape keeps up to `region_cache_options::replicas` executables; a
//!   replay takes one that is not in flight (preferring the one last launched on its
//!   stream), so replays of one shape on different streams run concurrently.
//! - The cache belongs to the device context: `current_context().regions()`.
//! - Errors: awaiting GPU work inside the body (`co_await rs.launch(...)`, `co_await rs`, or
//!   awaiting the captured stream) throws `cuda_error` naming the operation at once; a call
//!   CUDA cannot capture throws naming it; either way the region is discarded, nothing is
//!   launched, and the stream and the cache stay usable.

#include "cuawait/cuda/detail/region_cache_core.hpp"
#include "cuawait/cuda/detail/region_recorder.hpp"
#include "cuawait/cuda/device_context.hpp"
#include "cuawait/cuda/error.hpp"
#include "cuawait/cuda/graph_cache.hpp"
#include "cuawait/cuda/stream.hpp"
#include "cuawait/task.hpp"

#include <cuda_runtime_api.h>

#include <concepts>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <source_location>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

namespace cuawait::cuda {

using ::cuawait::region_cache_options;

//! What a `region_stream` operation returns. Awaiting it is an error (the operation is
//! recorded, not run): `co_await` throws `cuda_error` (cudaErrorStreamCaptureUnsupported)
//! naming the operation. Discard it.
class region_operation {
public:
  region_operation(const char* what, std::source_location where) noexcept
      : m_what(what), m_where(where) {}
  [[nodiscard]] bool await_ready() const noexcept { return true; }
  void await_suspend(std::coroutine_handle<>) const noexcept {}
  //! @throws cuda_error, always
  void await_resume() const {
    const std::string what = std::string("co_await ") + m_what +
                             " inside a cached region (operations there are recorded, not "
                             "run: await the cached_region instead)";
    throw cuda_error(cudaErrorStreamCaptureUnsupported, what.c_str(), "cached_region", m_where);
  }

private:
  const char* m_what;
  std::source_location m_where;
};

//! The stream a cached region's body enqueues on. Cheap to copy; valid while the body
//! runs. Not convertible to `stream_ref` on purpose: work enqueued on the region's stream
//! behind the recorder's back would run now instead of in the graph.
class region_stream {
public:
  explicit region_stream(detail::region_recorder& r) noexcept : m_rec(&r) {}

  //! Records `kernel<<<grid, block>>>(args...)`; arguments are checked and converted like
  //! `stream_ref::launch`.
  template <class... Params, class... Args>
  requires(sizeof...(Params) == sizeof...(Args) &&
           (std::is_convertible_v<Args&&, Params> && ...)) region_operation
      launch(void (*kernel)(Params...), dim3 grid, dim3 block, Args&&... args)
  const {
    return launch_impl(kernel, grid, block, 0, std::source_location::current(),
                       std::forward<Args>(args)...);
  }
  //! Records a launch with dynamic shared memory.
  template <class... Params, class... Args>
  requires(sizeof...(Params) == sizeof...(Args) &&
           (std::is_convertible_v<Args&&, Params> && ...)) region_operation
      launch(launch_config cfg, void (*kernel)(Params...), Args&&... args)
  const {
    return launch_impl(kernel, cfg.grid, cfg.block, cfg.shared_bytes,
                       std::source_location::current(), std::forward<Args>(args)...);
  }

  //! Records a 1-D copy of `count` elements (direction from the addresses; use pinned host
  //! memory, as for any asynchronous copy). 2-D copies go through `enqueue`.
  template <class T>
  region_operation copy(T* dst, const T* src, std::size_t count,
                        std::source_location where = std::source_location::current()) const {
    static_assert(std::is_trivially_copyable_v<T>, "copy: T must be trivially copyable");
    m_rec->copy(dst, src, count * sizeof(T), where);
    return {"copy", where};
  }

  //! Records a memset of `count` elements of device memory at `dst` to the byte `value`.
  template <class T>
  region_operation memset(T* dst, int value, std::size_t count,
                          std::source_location where = std::source_location::current()) const {
    m_rec->memset(dst, value, count * sizeof(T), where);
    return {"memset", where};
  }

  //! Runs `f(native_stream)` under stream capture, for any stream-ordered call the region
  //! cannot record (cuBLAS, `<<<>>>`, a library's enqueue). Checked like
  //! `stream_ref::enqueue`. The region (and every later replay of its key) is then
  //! captured and updated as a whole graph: slower than recorded operations.
  //! @throws cuda_error, library_error
  template <class F>
  requires std::is_invocable_v<F&, cudaStream_t>
      region_operation enqueue(F&& f, std::source_location where = std::source_location::current())
  const {
    (void)m_rec->to_capture().enqueue(std::forward<F>(f), where);
    return {"enqueue", where};
  }

  //! `co_await rs` is an error, like awaiting an operation.
  region_operation operator co_await() const noexcept {
    return {"stream", std::source_location::current()};
  }

private:
  template <class... Params, class... Args>
  region_operation launch_impl(void (*kernel)(Params...), dim3 grid, dim3 block,
                               std::size_t shared_bytes, std::source_location where,
                               Args&&... args) const {
    std::tuple<std::remove_cvref_t<Params>...> converted(std::forward<Args>(args)...);
    void* argv[sizeof...(Params) + 1] = {};
    std::uint32_t sizes[sizeof...(Params) + 1] = {};
    std::apply(
        [&](auto&... a) {
          std::size_t i = 0;
          ((argv[i] = static_cast<void*>(&a), sizes[i] = static_cast<std::uint32_t>(sizeof(a)),
            ++i),
           ...);
        },
        converted);
    m_rec->kernel(reinterpret_cast<const void*>(kernel), grid, block, shared_bytes, argv, sizes,
                  static_cast<std::uint32_t>(sizeof...(Params)), where);
    return {"kernel launch", where};
  }

  detail::region_recorder* m_rec;
};

namespace concepts {
//! A body of a cached region: called with a `region_stream` (recorded) or a `stream_ref`
//! (captured), returning void or `task<void>`.
template <class F>
concept region_body = std::invocable<F&, region_stream> || std::invocable<F&, stream_ref>;
} // namespace concepts

namespace detail {

template <class F>
inline constexpr bool region_recorded_v = std::invocable<F&, region_stream>;

template <class F>
using region_body_result_t =
    std::invoke_result_t<F&, std::conditional_t<region_recorded_v<F>, region_stream, stream_ref>>;

//! The region coroutine proper (src/cuda/region.cpp): begins the region on the current
//! context's cache, runs `body`, launches, and awaits the launch.
task<graph_cache_outcome> run_cached_region(std::unique_ptr<region_recorder> rec,
                                            std::shared_ptr<void> keep, task<void> body,
                                            bool must_capture);
//! A task that runs `f` (a synchronous body).
task<void> run_region_function(std::function<void()> f);

} // namespace detail

//! The graphs of cached regions, per device context (`device_context::regions()`). Bounded
//! (LRU), thread-safe.
class region_cache {
public:
  //! @throws std::invalid_argument when a bound is 0
  explicit region_cache(region_cache_options options = {});
  region_cache(const region_cache&) = delete;
  region_cache& operator=(const region_cache&) = delete;
  ~region_cache();

  //! Runs the synchronous `body` as a cached region under `key` and launches it on `s`,
  //! without waiting (await `s`, or an event recorded after, for completion). For code that
  //! is not a coroutine, e.g. a `batcher`'s enqueue function. Executables are then kept one
  //! per stream (up to `replicas`), since their completion is not tracked.
  //! @throws cuda_error as `cached_region` does
  template <class F>
  requires concepts::region_body<F> && std::is_void_v<detail::region_body_result_t<F>>
      graph_cache_outcome launch(stream_ref s, const graph_key& key, F&& body,
                                 std::source_location where = std::source_location::current()) {
    detail::region_recorder rec(s, key.str(), where);
    rec.begin(*this, !detail::region_recorded_v<F>);
    try {
      if constexpr (detail::region_recorded_v<F>) {
        std::invoke(body, region_stream(rec));
      } else {
        std::invoke(body, s);
      }
    } catch (...) {
      rec.abandon();
      throw;
    }
    return rec.launch(false);
  }

  //! Counters: hits, misses, in-place updates, re-instantiations (with `update_failures`
  //! among them), replicas, evictions, node updates, captures, and the shapes held.
  [[nodiscard]] graph_cache_stats stats() const { return m_core.stats(); }
  //! Why the last re-instantiation happened, e.g. "graph cache: key "job" re-instantiated:
  //! the shape changed: 12 operations instead of 32"; empty when none happened.
  [[nodiscard]] std::string last_reinstantiation_reason() const { return m_core.last_reason(); }
  //! Executables held for `key` (all its shapes and replicas).
  [[nodiscard]] std::size_t executables(const graph_key& key) const {
    return m_core.executables(key.str());
  }
  //! Drops every cached graph (replays in flight finish normally). Counters stay.
  void clear() { m_core.clear(); }

  //! The cache proper (for the region machinery).
  [[nodiscard]] detail::region_core& core() noexcept { return m_core; }

private:
  detail::region_core m_core;
};

//! `co_await cached_region(s, key, body)`: runs `body` as a cached region under `key`,
//! launches the region's graph on `s` (one launch) and resumes when all of its work
//! finished. Yields what the cache did. The cache is the current device context's.
//! `body` is moved into the region and lives until the body finished.
//! @throws cuda_error naming the operation when the body awaits GPU work, when a call
//! cannot be captured, when building, instantiating or launching the graph fails, or when
//! the region's work failed on the GPU ("cached region"); whatever `body` throws;
//! no_device_context without a context. Nothing is launched when the body fails.
template <class F>
requires concepts::region_body<F>
[[nodiscard]] task<graph_cache_outcome>
cached_region(stream_ref s, graph_key key, F body,
              std::source_location where = std::source_location::current()) {
  using result_t = detail::region_body_result_t<F>;
  static_assert(std::is_void_v<result_t> || std::is_same_v<result_t, task<void>>,
                "cuawait::cuda::cached_region: the body must return void or task<void>");
  auto rec = std::make_unique<detail::region_recorder>(s, key.str(), where);
  auto holder = std::make_shared<F>(std::move(body));
  constexpr bool recorded = detail::region_recorded_v<F>;
  task<void> t = [&] {
    if constexpr (std::is_void_v<result_t>) {
      if constexpr (recorded) {
        return detail::run_region_function(
            [holder, rs = region_stream(*rec)] { std::invoke(*holder, rs); });
      } else {
        return detail::run_region_function([holder, s] { std::invoke(*holder, s); });
      }
    } else if constexpr (recorded) {
      return std::invoke(*holder, region_stream(*rec)); // lazy: nothing runs yet
    } else {
      return std::invoke(*holder, s);
    }
  }();
  return detail::run_cached_region(std::move(rec), std::shared_ptr<void>(std::move(holder)),
                                   std::move(t), !recorded);
}

//! The same, keyed by the call site.
template <class F>
requires concepts::region_body<F>
[[nodiscard]] task<graph_cache_outcome>
cached_region(stream_ref s, F body, std::source_location where = std::source_location::current()) {
  return cached_region(s, graph_key::here(0, where), std::move(body), where);
}

} // namespace cuawait::cuda
