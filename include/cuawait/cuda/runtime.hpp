// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `cuawait::runtime` (target cuawait::cuda): a thread pool, a device context (the GPU's
//! completion reactor and memory pools) and the loop of the thread that calls `run`, joined.
//!
//! ```cpp
//! cuawait::runtime rt;                   // pool + reactor (default strategy)
//! rt.spawn(background_job());            // runs on the pool
//! auto out = rt.run(main_task());        // runs here; resumptions come back here
//! ```

// Layer 3 (runtime): part of target cuawait::cuda, not of the CUDA-free core.

#include "cuawait/async_scope.hpp"
#include "cuawait/completion_reactor.hpp"
#include "cuawait/cuda/device_context.hpp"
#include "cuawait/cuda/reactor.hpp"
#include "cuawait/cuda/strategy.hpp"
#include "cuawait/detail/awaitable_traits.hpp"
#include "cuawait/doctor.hpp"
#include "cuawait/idle_source_set.hpp"
#include "cuawait/observability.hpp"
#include "cuawait/reactor_stats.hpp"
#include "cuawait/run_loop.hpp"
#include "cuawait/task.hpp"
#include "cuawait/thread_pool.hpp"
#include "cuawait/timer.hpp"

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace cuawait {

//! Configuration of a `runtime`.
struct runtime_options {
  //! Worker threads of the pool (at least 1).
  std::size_t threads = std::thread::hardware_concurrency();
  //! The device served (its context is created by the runtime); -1: the constructing
  //! thread's current device. The pool's workers make it their current device.
  //! `cuda::no_device`: no GPU at all (a machine without one, an MPI-only program): the
  //! runtime runs coroutines and polls `idle_sources`; GPU work is not awaited through it.
  int device = -1;
  //! Several devices served: one `cuda::device_context` each (reactor, pools, streams), all
  //! polled by the same pool workers; a wait on a stream goes to its device's context.
  //! Empty (default): the one device `device` names. `cuda::all_devices()` lists every
  //! visible device. A device may appear twice: two contexts on one GPU, each with its own
  //! reactor and pools (how the several-device paths are tested on one GPU). The workers
  //! start with the first device current; see docs/MULTI_GPU.md.
  std::vector<int> devices{};
  //! How GPU completions are detected. Unset: the strategy named by the environment
  //! variable `CUAWAIT_STRATEGY` (event_poll, host_callback, blocking_sync, timeline, stream_poll)
  //! when it is set, else `cuda::default_strategy`. A name it does not know is refused
  //! (std::invalid_argument naming the variable) rather than silently ignored.
  std::optional<cuda::strategy> strategy{};
  //! How the reactor polls and parks (`reactor.start_thread` is set from
  //! `reactor_thread`).
  reactor_options reactor{};
  //! false (default): the pool's idle workers poll the reactor themselves, so a finished
  //! job resumes on the worker that found it, with no thread woken and no reactor thread.
  //! true: a dedicated reactor thread polls and posts each resumption to the pool (the
  //! first design; kept for comparison and for pools that are never idle). The environment
  //! variable `CUAWAIT_REACTOR_THREAD` (1 or 0), when set, overrides it.
  bool reactor_thread = false;
  //! Bounds of the context's cache of region graphs (`cuda::cached_region`).
  region_cache_options regions{};
  //! Other sources of completions the pool's idle workers poll, beside the GPU reactor:
  //! e.g. `{&mpi_reactor}` (an `mpi::reactor`), so that the same workers find GPU and MPI
  //! completions with no plumbing. With the runtime's own sources (one reactor per device
  //! and its timer service), at most `idle_source_set::max_sources` in all; none null.
  //! The runtime gives each its waker (`idle_source::set_idle_waker`) and takes it back at
  //! destruction; they must outlive the runtime.
  std::vector<idle_source*> idle_sources{};
  //! The streams of each context's `streams()` pool (made on first use; `device` ignored).
  cuda::stream_pool_options streams{};
};

//! Owns a `cuda::device_context` (the device's completion reactor, pinned and device
//! memory pools), a `thread_pool` whose workers use that context, and a `run_loop` for the
//! thread calling `run` (which uses it too while in `run`). A coroutine resumes on the
//! executor it suspended on (the pool, or the thread in `run`), with its priority; never
//! on a CUDA callback thread.
//!
//! Several runtimes may live at once, each with its own context: GPU work awaited on a
//! runtime's threads goes to that runtime's reactor. The first runtime created while no
//! `cuda::default_context_scope` is in place also becomes the default context of other
//! threads (e.g. `sync_wait` on `main`'s thread) until it is destroyed.
//!
//! Serving several devices (`runtime_options::devices`), it owns one context per device;
//! the pool's workers poll all their reactors, a wait goes to its stream's device's context
//! and leaves that device current (docs/MULTI_GPU.md); `cuda::device_scheduler` spreads jobs.
//!
//! Completions are found by the pool's idle workers (`thread_pool::set_idle_source`): a
//! worker with nothing to run polls the reactor and runs what finished itself. A wait with
//! no executor (a plain thread awaiting) is resumed on the worker that finds it.
//!
//! Timers: `sleep_for` / `sleep_until` (and `with_deadline`) on the pool or in `run` use
//! the runtime's polled `timer_service` (`timers()`), another source its idle workers poll:
//! no timer thread, and a sleep ends within microseconds of its deadline when a worker is
//! idle. Outside the runtime's threads they use the process-wide service.
//!
//! Shutdown (destructor): waits for spawned tasks, lets every pending GPU wait finish
//! (in-flight GPU work is waited for, never abandoned), completes the sleeps still pending
//! with `operation_cancelled` (their coroutines run before the pool stops), stops the
//! reactor, then the pool.
//!
//! Observability (docs/OBSERVABILITY.md): `CUAWAIT_TRACE=path.json`, `CUAWAIT_LOG=level` and
//! `CUAWAIT_NVTX=1`, read at construction, install a trace recorder, a lifecycle log and
//! NVTX ranges on the reactor; the trace is written at destruction. `CUAWAIT_DOCTOR=1` prints
//! `report()` to stderr at destruction (docs/DOCTOR.md).
//! @throws std::invalid_argument (constructor) for a value of those it does not know.
class runtime {
public:
  //! @throws cuda_error when the strategy cannot be set up.
  explicit runtime(runtime_options options = {});
  runtime(const runtime&) = delete;
  runtime& operator=(const runtime&) = delete;
  ~runtime();

  //! Runs `a` on the calling thread (its resumptions come back here) and returns its result
  //! or rethrows its exception. Blocks until it completes.
  template <concepts::awaitable A>
  decltype(auto) run(A&& a) {
    const cuda::context_scope here(m_context);
    const cuda::detail::restore_device keep(!m_more.empty());
    return m_loop.run(static_cast<A&&>(a));
  }

  //! Starts `t` on the pool; its result is dropped. Its exception, if any, is kept and
  //! rethrown by `join_spawned()` (the first one only). Spawned tasks see the stop token of
  //! `spawned().get_stop_token()`. Thread-safe.
  template <class T>
  void spawn(task<T> t) {
    m_spawned.spawn(on_pool(m_pool, std::move(t)));
  }

  //! Blocks until every spawned task finished; rethrows the first exception one threw
  //! since the previous join. Drives the runtime's loop meanwhile (like `run`). One thread
  //! at a time: a second concurrent `join_spawned()` is not allowed (`async_scope` takes one
  //! join at a time); tasks may still be spawned while it waits, and it waits for them too.
  void join_spawned() {
    const cuda::context_scope here(m_context);
    const cuda::detail::restore_device keep(!m_more.empty());
    m_loop.run(m_spawned.join());
  }

  //! Stops everything in flight: asks every spawned task to stop (their stop token) and
  //! ends every pending GPU wait of this runtime at once, each awaiting coroutine resuming
  //! with `operation_cancelled` (GPU work already enqueued runs on, in stream order: free
  //! what it uses in stream order, see docs/CANCELLATION.md). Work awaited afterwards is not
  //! affected unless its task saw the stop request. Thread-safe; returns the number of GPU
  //! waits it ended, through the tasks' stop tokens or directly (a wait that another thread
  //! stopped at the same moment may be counted too). The destructor then only waits for
  //! what is still running.
  std::size_t stop() {
    std::size_t before = 0;
    for (cuda::device_context* c : m_slots) {
      const reactor_stats st = c->reactor().stats();
      before += static_cast<std::size_t>(st.stopped + st.cancelled);
    }
    m_spawned.request_stop(); // ends the waits of spawned tasks that carry their token
    std::size_t after = 0;
    for (cuda::device_context* c : m_slots) {
      c->reactor().reactor().stop_all(); // and every other pending wait
      const reactor_stats st = c->reactor().stats();
      after += static_cast<std::size_t>(st.stopped + st.cancelled);
    }
    return after - before;
  }

  //! The scope spawned tasks run in (for `request_stop()`).
  [[nodiscard]] async_scope& spawned() noexcept { return m_spawned; }

  [[nodiscard]] thread_pool& pool() noexcept { return m_pool; }
  [[nodiscard]] run_loop& loop() noexcept { return m_loop; }
  //! The polled timer service of the pool and the run loop.
  [[nodiscard]] timer_service& timers() noexcept { return m_timers; }
  //! The device context the runtime's threads await through (the first device's).
  [[nodiscard]] cuda::device_context& context() noexcept { return m_context; }
  //! The context of the `i`-th device served (`devices()[i]`); `context(0)` is `context()`.
  //! @throws std::out_of_range for `i >= devices().size()`.
  [[nodiscard]] cuda::device_context& context(std::size_t i) { return *m_slots.at(i); }
  //! Every context, in the order of `devices()` (for `cuda::device_scheduler`).
  [[nodiscard]] const std::vector<cuda::device_context*>& contexts() const noexcept {
    return m_slots;
  }
  //! The device ordinals served, in the order given (one element unless
  //! `runtime_options::devices` named several).
  [[nodiscard]] const std::vector<int>& devices() const noexcept { return m_devices; }
  [[nodiscard]] cuda::gpu_reactor& reactor() noexcept { return m_context.reactor(); }
  //! The reactor's statistics (waits pending per stream, completions, resume latency...)
  //! of the first device; `stats(i)` for the `i`-th.
  [[nodiscard]] reactor_stats stats() const { return m_context.reactor().stats(); }
  //! The statistics of the `i`-th device's reactor. @throws std::out_of_range
  [[nodiscard]] reactor_stats stats(std::size_t i) const {
    return m_slots.at(i)->reactor().stats();
  }

  //! What the doctor reads (docs/DOCTOR.md): the reactor's and the pool's statistics since
  //! construction, the strategy, waits on the default streams, the pinned pool's counters.
  //! Add graph caches and batchers to it, then `doctor{}.examine(s)`.
  [[nodiscard]] doctor_snapshot snapshot() const;
  //! The doctor's report on this runtime so far: findings with advice and evidence.
  [[nodiscard]] doctor_report report(const doctor_thresholds& thresholds = {}) const {
    return doctor{thresholds}.examine(snapshot());
  }

  //! Starts recording a trace of every GPU wait (replacing one started before). Call while
  //! no coroutine awaits GPU work (e.g. before `run`): the reactor's hooks are installed
  //! without synchronising with awaiters.
  trace_recorder& start_trace(trace_options options = {}) {
    return m_observability.start_trace(m_context.reactor().reactor(), options);
  }
  //! Writes the trace recorded so far (Chrome / Perfetto JSON) to `path`.
  //! @throws std::runtime_error when no trace was started or the file cannot be written.
  void write_trace(const std::string& path) const { m_observability.write_trace(path); }

private:
  template <class T>
  static task<void> on_pool(thread_pool& pool, task<T> t) {
    co_await pool.schedule();
    (void)co_await std::move(t);
  }

  static void wake_pool(void* pool) noexcept {
    static_cast<thread_pool*>(pool)->wake_idle_poller();
  }
  static void wake_pool_timers(void* pool) noexcept {
    static_cast<thread_pool*>(pool)->wake_parked_poller();
  }

  //! The ordinals served.
  std::vector<int> m_devices;
  //! Every context, first included (the peers of each when there are several).
  std::vector<cuda::device_context*> m_slots;
  observability m_observability;          // first: outlives everything that reports to it
  mutable cuda::device_context m_context; // before the pool, whose workers point at it
  //! The contexts of the devices after the first.
  std::vector<std::unique_ptr<cuda::device_context>> m_more;
  //! Polled by the pool and the loop; before both, so that it outlives their polls (the
  //! destructor closes it while they still run the sleepers it cancels).
  timer_service m_timers{timer_service::polled};
  //! The pool's and the loop's idle source: every device's reactor, the timers and
  //! `idle_sources`.
  std::unique_ptr<idle_source_set> m_sources;
  thread_pool m_pool;
  bool m_idle_polling = false;
  bool m_is_default = false; //!< installed as the default context of other threads
  bool m_doctor = false;     //!< CUAWAIT_DOCTOR=1: print report() at destruction
  run_loop m_loop;
  async_scope m_spawned; // last: joined in the destructor before the pool stops
};

} // namespace cuawait
