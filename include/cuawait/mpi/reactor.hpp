// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `mpi::reactor` (target cuawait::mpi): MPI requests as a completion source. A coroutine
//! `co_await`s a send, a receive, a nonblocking collective or any request; idle pool
//! workers (or a progress thread, or the owner's `poll()`) test every pending request in
//! one `MPI_Testsome` and resume the coroutines whose requests completed.
//!
//! ```cpp
//! cuawait::mpi::environment env(argc, argv);       // MPI_Init_thread, MPI_THREAD_MULTIPLE
//! cuawait::thread_pool pool(4);
//! cuawait::mpi::reactor mpi;
//! mpi.attach(pool);                                 // idle workers poll MPI
//!
//! cuawait::task<void> exchange(cuawait::mpi::reactor& mpi, int peer) {
//!   std::vector<double> out(1024, 1.0), in(1024);
//!   co_await cuawait::when_all(mpi.send(out, peer, 0), mpi.recv(in, peer, 0));
//!   MPI_Request r;
//!   MPI_Iallreduce(MPI_IN_PLACE, in.data(), 1024, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &r);
//!   co_await mpi.wait(r);                           // any request
//! }
//! ```
//!
//! Deadlines: `co_await mpi::with_deadline(mpi.recv(buf, src, tag), 2s)` cancels the receive
//! at the deadline and yields its status, or nullopt when it was cancelled (deadline.hpp,
//! docs/MPI.md).

#include "cuawait/idle_source.hpp"
#include "cuawait/mpi/datatype.hpp"
#include "cuawait/mpi/request.hpp"

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <ranges>
#include <stop_token>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace cuawait {
class thread_pool;
} // namespace cuawait

namespace cuawait::mpi {

//! How a `reactor` is polled.
struct reactor_options {
  //! Start a progress thread that polls (for programs whose coroutines run on plain
  //! threads, `sync_wait`, or a `run_loop`). Without one, idle pool workers poll
  //! (`attach`, or a `thread_pool::set_idle_source` with an `idle_source_set`), or the
  //! owner calls `poll()`.
  bool progress_thread = false;
  //! Pollers keep spinning this long after the last completion or new request.
  std::chrono::nanoseconds spin_window = std::chrono::milliseconds(2);
  //! Afterwards, with requests pending, a parked poller polls this often.
  std::chrono::nanoseconds park_period = std::chrono::microseconds(100);
  //! Test each request once (`MPI_Test`) right after starting or adopting it, and do not
  //! suspend when it is complete already: a small eager send usually is, and a receive
  //! whose message has arrived. Costs one `MPI_Test` per operation that does suspend.
  bool test_on_start = true;
};

//! Awaitable MPI requests, completed in batches by `MPI_Testsome`. Thread-safe.
//!
//! Cost: pending requests sit in one contiguous array (with their awaiters in a parallel
//! one); a poll is one `MPI_Testsome` over it, and each completion is O(1) work besides
//! (the last entry moves into the freed slot). A poll resumes nothing while holding the
//! lock.
//!
//! Threads: every MPI call the reactor makes (`MPI_Isend`, `MPI_Irecv`, `start`'s function,
//! `MPI_Testsome`, `MPI_Cancel`) runs under one mutex, so the reactor works at
//! `MPI_THREAD_SERIALIZED` as long as the rest of the program calls MPI only through it
//! (`serialized`); at `MPI_THREAD_MULTIPLE` the program may call MPI anywhere. The
//! constructor checks the level (`require_thread_level`). Pollers never block on each
//! other: a poll that finds another in progress returns at once.
//!
//! Errors: a failed start or a request completed with an error resumes its coroutine with
//! `mpi_error` (the communicator needs the `MPI_ERRORS_RETURN` handler, which
//! `environment` sets on `MPI_COMM_WORLD`). An `MPI_Testsome` that fails outright fails
//! every pending wait with its error: nothing hangs.
//!
//! Lifetime: buffers stay owned by the caller and must live until the `co_await` returns.
//! Destroy the reactor after detaching it from any pool (`detach`) and after the coroutines
//! awaiting it have resumed; requests still pending then are cancelled and given one
//! second to complete, then freed (`MPI_Request_free`) and their coroutines resumed with
//! `operation_cancelled`.
class reactor final : public idle_source {
public:
  //! @throws std::runtime_error when MPI is not initialised at `MPI_THREAD_SERIALIZED` or
  //!         above; std::system_error when the progress thread cannot start.
  explicit reactor(reactor_options options = {});
  reactor(const reactor&) = delete;
  reactor& operator=(const reactor&) = delete;
  //! See the class comment (Lifetime). Never throws.
  ~reactor();

  //! Awaits `request`, started by the caller (a nonblocking collective, `MPI_Isend`...).
  //! On completion the reactor writes the request's final handle back into `request`
  //! (`MPI_REQUEST_NULL`, or the inactive persistent request); `request` must stay alive
  //! until then. An `MPI_REQUEST_NULL` completes at once with an empty status.
  request_awaiter wait(MPI_Request& request, std::stop_token token = {}) noexcept {
    return {*this, "cuawait::mpi::wait", "MPI_Testsome", nullptr, &request, {}, std::move(token)};
  }

  //! Sends `count` elements of `type` from `buffer` to `dest` (`MPI_Isend`, started when
  //! awaited). Yields the send's status.
  request_awaiter send(const void* buffer, int count, MPI_Datatype type, int dest, int tag,
                       MPI_Comm comm = MPI_COMM_WORLD, std::stop_token token = {}) noexcept {
    return {*this,           "cuawait::mpi::send",
            "MPI_Isend",     &start_isend,
            nullptr,         {const_cast<void*>(buffer), count, type, dest, tag, comm},
            std::move(token)};
  }

  //! Receives up to `count` elements of `type` into `buffer` from `source` (or
  //! `MPI_ANY_SOURCE`) with `tag` (or `MPI_ANY_TAG`) (`MPI_Irecv`, started when awaited).
  //! Yields the status: the sender, the tag, the size (`MPI_Get_count`).
  request_awaiter recv(void* buffer, int count, MPI_Datatype type, int source, int tag,
                       MPI_Comm comm = MPI_COMM_WORLD, std::stop_token token = {}) noexcept {
    return {*this,           "cuawait::mpi::recv",
            "MPI_Irecv",     &start_irecv,
            nullptr,         {buffer, count, type, source, tag, comm},
            std::move(token)};
  }

  //! Sends a contiguous range of arithmetic values (`std::vector<double>`, a span...).
  //! @throws std::length_error when it holds more than INT_MAX elements.
  template <std::ranges::contiguous_range R>
  requires has_datatype_v<std::ranges::range_value_t<R>>
      request_awaiter send(const R& data, int dest, int tag, MPI_Comm comm = MPI_COMM_WORLD,
                           std::stop_token token = {}) {
    using T = std::ranges::range_value_t<R>;
    return send(std::ranges::data(data), checked_count(std::ranges::size(data)), datatype_of<T>(),
                dest, tag, comm, std::move(token));
  }

  //! Receives into a contiguous range of arithmetic values (at most its size).
  //! @throws std::length_error when it holds more than INT_MAX elements.
  template <std::ranges::contiguous_range R>
  requires has_datatype_v<std::ranges::range_value_t<R>> &&
      (!std::is_const_v<std::remove_reference_t<std::ranges::range_reference_t<R>>>)request_awaiter
      recv(R&& data, int source, int tag, MPI_Comm comm = MPI_COMM_WORLD,
           std::stop_token token = {}) {
    using T = std::ranges::range_value_t<R>;
    return recv(std::ranges::data(data), checked_count(std::ranges::size(data)), datatype_of<T>(),
                source, tag, comm, std::move(token));
  }

  //! Awaits the request that `fn(MPI_Request&)` starts, called when awaited under the
  //! reactor's MPI lock; `fn` returns an MPI error code (e.g. `MPI_Iallreduce(..., &r)`).
  //! `operation` (a string literal) names it in errors.
  template <class F>
  requires std::is_invocable_r_v<int, F&, MPI_Request&> start_awaiter<std::decay_t<F>>
  start(const char* operation, F&& fn, std::stop_token token = {}) {
    return {*this, operation, std::forward<F>(fn), std::move(token)};
  }

  //! Runs `fn()` under the reactor's MPI lock and returns its result: how a program at
  //! `MPI_THREAD_SERIALIZED` makes MPI calls of its own while the reactor runs. Do not
  //! `co_await` inside `fn`, nor call the reactor from it.
  template <class F>
  decltype(auto) serialized(F&& fn) {
    const std::lock_guard lock(m_mutex);
    return std::forward<F>(fn)();
  }

  //! One `MPI_Testsome` over the pending requests: resumes (or posts) the coroutines of
  //! those that completed and returns how many. Returns 0 at once when another thread is
  //! polling. Never blocks.
  std::size_t poll() noexcept;

  //! Requests pending now.
  [[nodiscard]] std::size_t pending() const noexcept {
    return m_pending.load(std::memory_order_relaxed);
  }

  //! The thread level MPI provides.
  [[nodiscard]] int thread_level() const noexcept { return m_thread_level; }

  //! Lets `pool`'s idle workers poll this reactor alone (`set_idle_source`) and wakes them
  //! when a request is submitted. To share the pool with the GPU reactor, use an
  //! `idle_source_set` and `set_idle_waker` instead. Not from one of the pool's workers.
  void attach(thread_pool& pool) noexcept;
  //! Undoes `attach`: returns once no worker of that pool polls the reactor.
  void detach() noexcept;

  //! `fn(context)` is called when a request is submitted, so that a parked poller can be
  //! woken (`thread_pool::wake_idle_poller`). Set before submitting; nullptr: none.
  void set_idle_waker(void (*fn)(void*) noexcept, void* context) noexcept override;

  // idle_source: polled by idle executor threads (one at a time; the others return at once).
  std::size_t poll_idle() noexcept override { return poll(); }
  [[nodiscard]] bool idle_keep_spinning() const noexcept override;
  [[nodiscard]] bool idle_pending() const noexcept override { return pending() != 0; }
  [[nodiscard]] std::chrono::nanoseconds idle_park_period() const noexcept override {
    return m_options.park_period;
  }

private:
  friend class request_awaiter;

  static int start_isend(request_awaiter& a, MPI_Request* out) noexcept;
  static int start_irecv(request_awaiter& a, MPI_Request* out) noexcept;
  static int checked_count(std::size_t n);
  static std::uint64_t now_ns() noexcept;

  //! Starts (or adopts) the request of `a` and queues it. False when `a` is finished
  //! already (failed to start, or a null request): the caller does not suspend.
  bool submit(request_awaiter& a);
  //! `MPI_Test` of a request just started: true (and `a` finished) when it is complete.
  bool test_now_locked(request_awaiter& a, MPI_Request& req) noexcept;
  void request_cancel(request_awaiter& a) noexcept;
  void remove_locked(request_awaiter& a) noexcept;
  void grow_locked();
  void wake() noexcept;
  void thread_main(const std::stop_token& stop);
  void shut_down() noexcept;

  reactor_options m_options;
  int m_thread_level = MPI_THREAD_SINGLE;

  std::mutex m_mutex; // serialises MPI calls; guards the arrays and queued awaiters
  std::vector<MPI_Request> m_requests;
  std::vector<request_awaiter*> m_waiters;
  std::vector<int> m_indices;         // MPI_Testsome output, sized like the capacity
  std::vector<MPI_Status> m_statuses; // likewise
  std::atomic<std::size_t> m_pending{0};
  std::atomic<bool> m_polling{false};
  std::atomic<std::uint64_t> m_last_progress_ns{0};

  void (*m_idle_waker)(void*) noexcept = nullptr;
  void* m_idle_waker_context = nullptr;
  thread_pool* m_attached = nullptr;

  std::mutex m_park_mutex;
  std::condition_variable m_park_cv;
  std::uint64_t m_wake_seq = 0; // guarded by m_park_mutex
  std::atomic<bool> m_parked{false};
  std::jthread m_thread; // last: stopped and joined before the members above go
};

} // namespace cuawait::mpi
