// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `device_context`: everything cuawait keeps for one GPU — its completion reactor (the
//! lanes GPU waits are queued on and the strategy that finds finished work), its pinned
//! host memory pool, its device memory pool and its cache of region graphs — owned by a
//! `runtime` (one per device it serves) or by the user.
//!
//! GPU awaitables find the context of the thread they suspend on: a `runtime`'s pool
//! workers and its `run` loop have the runtime's context; any thread can be given one with
//! `context_scope`, and `default_context_scope` names the context of threads that have none
//! of their own. Nothing is created behind the user's back: awaiting GPU work on a thread
//! without a context is a `no_device_context` error that says what to do.
//!
//! ```cpp
//! cuawait::cuda::device_context ctx;              // device 0's reactor and pools
//! cuawait::cuda::context_scope here(ctx);         // this thread awaits through ctx
//! cuawait::sync_wait(job(stream));
//! ```

#include "cuawait/cuda/detail/graph_cache_core.hpp"
#include "cuawait/cuda/event_pool.hpp"
#include "cuawait/cuda/memory_pool.hpp"
#include "cuawait/cuda/pinned_pool.hpp"
#include "cuawait/cuda/reactor.hpp"
#include "cuawait/cuda/strategy.hpp"
#include "cuawait/cuda/stream_pool.hpp"

#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <vector>

namespace cuawait::cuda {

class device_context;
class region_cache;

namespace detail {
class release_thread;
class gate_template_pool;
//! The release thread of `ctx` (see `cuawait/cuda/detail/deferred_release.hpp`).
[[nodiscard]] release_thread* release_thread_of(device_context& ctx) noexcept;
//! Makes `ctx` one of the contexts in `peers` (a runtime serving several devices): a wait
//! on a stream of another device then goes to that device's context. nullptr: alone again.
void set_context_peers(device_context& ctx, const std::vector<device_context*>* peers) noexcept;
} // namespace detail

//! `device_context_options::device` (and `runtime_options::device`) for a context without a
//! GPU: its reactor and pinned pool exist (so a `runtime` runs coroutines, timers and other
//! idle sources such as MPI on a machine without a GPU or driver), no CUDA device is
//! touched, and GPU work is not to be awaited through it (without a driver that fails with
//! `cuda_error`).
inline constexpr int no_device = -2;

//! How a `device_context` is created.
struct device_context_options {
  //! Device ordinal; -1 means the creating thread's current device; `no_device`: none.
  int device = -1;
  //! How completions are detected. Unset: the environment variable `CUAWAIT_STRATEGY`
  //! when set (a name it does not know is refused with std::invalid_argument), else
  //! `default_strategy`.
  std::optional<strategy> completion{};
  //! How the reactor polls and parks.
  reactor_options reactor{};
  //! The pinned host memory pool's options.
  pinned_pool_options pinned{};
  //! Bounds of the cache of region graphs (`regions()`, cuda/region.hpp).
  ::cuawait::region_cache_options regions{};
  //! The streams of `streams()` (created on first use, on the context's device; `device`
  //! is ignored).
  stream_pool_options streams{};
};

//! Thrown when GPU work is awaited (or a default pool is asked for) on a thread that has
//! no device context: no runtime's thread, no `context_scope`, no `default_context_scope`.
class no_device_context : public std::logic_error {
public:
  no_device_context();
};

//! One device's reactor and pools. Not movable (awaiting coroutines and pools point at
//! it). Destruction cancels the waits still pending (see `completion_reactor`), so drain
//! or finish the work first (a `runtime` does); buffers taken from its pools must be
//! released before it (device memory is then returned by CUDA; a pinned block still in
//! use is a bug).
//!
//! Releases that block (`cudaFree`, `cudaFreeHost`, the pinned pool's frees past its cache
//! limit or in `trim()`, a `mapped_buffer` or `arena_pair` dying, fallbacks that must wait
//! for a stream) are handed to the context's *release thread* when they happen on a thread
//! that uses the context, so they never block a thread that resumes coroutines. The thread
//! starts with the first such release; the destructor runs every release still queued
//! before it returns.
class device_context {
public:
  //! Makes the device current on the calling thread while it sets things up (and restores
  //! the previous one).
  //! @throws cuda_error when the device, its reactor or its pools cannot be set up;
  //! std::invalid_argument for an unknown `CUAWAIT_STRATEGY`.
  explicit device_context(device_context_options options = {});
  device_context(const device_context&) = delete;
  device_context& operator=(const device_context&) = delete;
  ~device_context();

  //! The device ordinal.
  [[nodiscard]] int device() const noexcept { return m_device; }
  //! The completion reactor GPU waits on this device go to.
  [[nodiscard]] gpu_reactor& reactor() noexcept { return *m_reactor; }
  //! The pool `pinned_buffer` uses when given none.
  [[nodiscard]] pinned_pool& pinned() noexcept { return *m_pinned; }
  //! The pool `device_buffer` uses when given none.
  //! @throws std::logic_error for a context made with `no_device`.
  [[nodiscard]] device_memory_pool& memory() {
    if (!m_memory) {
      throw std::logic_error("cuawait::cuda::device_context::memory: a context made with "
                             "cuda::no_device has no device memory pool");
    }
    return *m_memory;
  }
  //! The graphs of `cached_region`s awaited on this device (cuda/region.hpp).
  [[nodiscard]] region_cache& regions() noexcept { return *m_regions; }
  //! Idle graphs of `gate`s on this device (cuda/gate.hpp), kept for the next gate.
  [[nodiscard]] detail::gate_template_pool& gate_templates() noexcept { return *m_gates; }
  //! Returns once every release handed to the release thread before the call has run (the
  //! memory is back with CUDA). Blocks: not for a coroutine's thread.
  void drain_releases() noexcept;

  //! The device's stream pool (`device_context_options::streams`), created on first use.
  //! `co_await ctx.acquire_stream()` leases one and makes the context current.
  //! @throws cuda_error when the streams cannot be created.
  [[nodiscard]] stream_pool& streams();
  //! Events created on this context's device (whatever device is current when one is).
  [[nodiscard]] event_pool& events() noexcept { return m_events; }

  //! Makes this context the calling thread's context and its device the current device.
  //! Unlike `context_scope` nothing is restored: for a coroutine that moves between a
  //! runtime's threads and continues on this device after an await that is not GPU work
  //! of it (a mutex, a channel, `pool.schedule()`): see docs/MULTI_GPU.md. A thread that
  //! has no context of its own (it uses the default context) only gets the device: it
  //! would otherwise keep a context that may die before it; name one with `context_scope`.
  //! @throws cuda_error when the device cannot be made current.
  void make_current();

  class acquire_stream_awaiter;
  //! `co_await ctx.acquire_stream(p)`: a lease on a stream of `streams()`, then (on the
  //! thread the coroutine resumes on) `make_current()`. Cancellable as
  //! `stream_pool::acquire` is. @throws cuda_error when the pool cannot be created.
  [[nodiscard]] acquire_stream_awaiter acquire_stream(priority p = priority::normal,
                                                      std::stop_token token = {});

private:
  friend detail::release_thread* detail::release_thread_of(device_context& ctx) noexcept;
  friend void detail::set_context_peers(device_context& ctx,
                                        const std::vector<device_context*>* peers) noexcept;
  friend gpu_reactor& detail::reactor_for_stream(cudaStream_t s, device_context** entered);

  int m_device = 0;
  //! Destroyed after the release thread, which returns gates' graphs to it.
  std::unique_ptr<detail::gate_template_pool> m_gates;
  std::unique_ptr<detail::release_thread> m_release; // first made, last destroyed
  std::unique_ptr<gpu_reactor> m_reactor;
  std::unique_ptr<pinned_pool> m_pinned;
  std::unique_ptr<device_memory_pool> m_memory;
  std::unique_ptr<region_cache> m_regions;
  event_pool m_events;
  stream_pool_options m_stream_options;
  std::once_flag m_streams_once;
  std::unique_ptr<stream_pool> m_streams;
  //! The contexts of the runtime serving several devices, this one included; else nullptr.
  const std::vector<device_context*>* m_peers = nullptr;
};

//! What `device_context::acquire_stream` returns; yields a `stream_lease`.
class device_context::acquire_stream_awaiter {
public:
  [[nodiscard]] bool await_ready() const noexcept { return m_inner.await_ready(); }
  template <class Promise>
  bool await_suspend(std::coroutine_handle<Promise> h) noexcept {
    return m_inner.await_suspend(h);
  }
  //! @throws operation_cancelled (no stream leased); cuda_error from `make_current`.
  [[nodiscard]] stream_lease await_resume() {
    stream_lease lease = m_inner.await_resume();
    m_context->make_current();
    return lease;
  }

private:
  friend class device_context;
  acquire_stream_awaiter(device_context& ctx, stream_pool::acquire_awaiter inner) noexcept
      : m_context(&ctx), m_inner(std::move(inner)) {}
  device_context* m_context;
  stream_pool::acquire_awaiter m_inner;
};

inline device_context::acquire_stream_awaiter
device_context::acquire_stream(priority p, std::stop_token token) {
  return acquire_stream_awaiter(*this, streams().acquire(p, std::move(token)));
}

//! The context of the calling thread: its `context_scope`, else the one its runtime set,
//! else the `default_context_scope`'s; nullptr when none.
[[nodiscard]] device_context* current_context_or_null() noexcept;

//! As `current_context_or_null`. @throws no_device_context when there is none.
[[nodiscard]] device_context& current_context();

//! Makes `ctx` the calling thread's context until destroyed (then the previous one is
//! restored). Scopes nest; destroy them in reverse order on the thread that made them.
class context_scope {
public:
  explicit context_scope(device_context& ctx) noexcept;
  context_scope(const context_scope&) = delete;
  context_scope& operator=(const context_scope&) = delete;
  ~context_scope();

private:
  device_context* m_previous;
};

//! Makes `ctx` the context of every thread that has none of its own, until destroyed
//! (then the previous default is restored). For programs that await GPU work from threads
//! of their own without a runtime; a `runtime` installs its first context this way when no
//! default exists. Destroy it before `ctx`, and before no thread can await through it.
class default_context_scope {
public:
  explicit default_context_scope(device_context& ctx) noexcept;
  default_context_scope(const default_context_scope&) = delete;
  default_context_scope& operator=(const default_context_scope&) = delete;
  ~default_context_scope();

private:
  device_context* m_previous;
};

namespace detail {
//! Sets the calling thread's context without restoring it (for threads a runtime starts).
void set_thread_context(device_context* ctx) noexcept;
//! Restores the calling thread's current device when destroyed, if `active` (a thread that
//! ran coroutines of several devices, e.g. in `runtime::run`, gets its device back).
class restore_device {
public:
  explicit restore_device(bool active) noexcept;
  restore_device(const restore_device&) = delete;
  restore_device& operator=(const restore_device&) = delete;
  ~restore_device();

private:
  int m_device = -1;
};
//! Installs `ctx` as the default only when there is none; true when it did.
bool install_default_context_if_none(device_context* ctx) noexcept;
//! Removes `ctx` as the default when it still is.
void remove_default_context(device_context* ctx) noexcept;
} // namespace detail

} // namespace cuawait::cuda
