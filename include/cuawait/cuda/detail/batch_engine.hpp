// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The CUDA-free engine of batched submission. Coroutines hand it small jobs; it gathers
//! them into batches, hands each batch to a backend in one submission, watches the
//! submitted batches, and resumes every job's coroutine when its batch has finished.
//!
//! When a batch goes: as soon as it holds `max_batch` jobs (under load), or when its oldest
//! job has waited `max_wait` (a job alone waits no longer than that for company), or at
//! `flush()` / shutdown; with `submit_when_idle`, also as soon as none of its batches is in
//! flight. The wait each job paid between arriving and being submitted is
//! measured (`batch_stats`). The backend is the CUDA layer (cuda/batcher.hpp) or a fake in
//! CPU tests:
//!
//!   struct backend {
//!     using job_type = ...;
//!     using ticket = ...;                            // movable; one per submitted batch
//!     void thread_init();                            // on the engine thread, first
//!     ticket submit(std::span<job_type* const> jobs);  // may throw: the batch fails
//!     bool done(ticket& t);                          // finished? may throw: the batch fails
//!   };
//!
//! Who drives it, one of two:
//! - **A completion reactor** (the constructor that takes one): the engine is a companion of
//!   the reactor (`reactor_companion`), so the threads that poll the reactor for GPU work
//!   (idle pool workers, `run` loops) also submit due batches and resolve finished ones; a
//!   coroutine whose job fills a batch submits it on its own thread before it suspends. No
//!   thread of its own; `submit` and `done` run on those threads, one at a time.
//! - **Its own thread** (the other constructor): `thread_init`, `submit` and `done` run
//!   there.

#include "cuawait/cancellation.hpp"
#include "cuawait/completion_reactor.hpp"
#include "cuawait/detail/cpu_relax.hpp"
#include "cuawait/detail/trampoline.hpp"
#include "cuawait/executor.hpp"
#include "cuawait/gpu_counters.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <stop_token>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace cuawait::cuda::detail {

//! One job waiting in a batcher: lives in the awaiter of the coroutine that submitted it.
template <class Job>
struct batch_item {
  Job job;
  batch_item* next = nullptr;
  std::coroutine_handle<> waiter;
  executor* ex = nullptr;
  priority prio = priority::normal;
  std::uint64_t arrived_ns = 0;
  std::exception_ptr error;
  //! The arrival handshake of a cancellable submission (see `batch_awaiter`): the engine
  //! and `await_suspend` both set it; the second resumes the coroutine. Starts true for
  //! submissions that cannot be cancelled (the engine alone resumes them).
  std::atomic<bool> arrived{true};
  bool cancelled = false; //!< withdrawn by a stop request before its batch was submitted
};

template <class Backend>
class batch_engine final : private reactor_companion {
public:
  using job_type = typename Backend::job_type;
  using item = batch_item<job_type>;

  //! Starts the engine thread. `backend` must outlive the engine.
  //! @throws std::invalid_argument for a zero `max_batch` or `max_in_flight`
  batch_engine(Backend& backend, batch_options options) : batch_engine(backend, options, nullptr) {}
  //! With `reactor`: no thread, the threads that poll `reactor` drive the engine (see the
  //! file's comment); `reactor` must outlive the engine. nullptr: starts the engine thread.
  //! `backend` must outlive the engine.
  //! @throws std::invalid_argument for a zero `max_batch` or `max_in_flight`
  batch_engine(Backend& backend, batch_options options, completion_reactor* reactor)
      : m_backend(&backend), m_options(validate(options)), m_reactor(reactor) {
    m_jobs.reserve(std::min<std::size_t>(m_options.max_batch, 1024));
    if (m_reactor != nullptr) {
      m_reactor->attach(*this);
    } else {
      m_thread = std::thread([this] { run(); });
    }
  }
  batch_engine(const batch_engine&) = delete;
  batch_engine& operator=(const batch_engine&) = delete;
  //! Submits what is pending, waits for every batch to finish (their coroutines resume),
  //! then stops the thread (or leaves the reactor).
  ~batch_engine() {
    {
      const std::lock_guard lock(m_mutex);
      m_stopping = true;
    }
    if (m_reactor == nullptr) {
      m_wake.notify_one();
      m_thread.join();
      while (m_callers.load(std::memory_order_acquire) != 0) {
        std::this_thread::yield(); // a submitting coroutine's thread still in `leave`
      }
      return;
    }
    // Drive it here until nothing is left (a poller may be doing the same meanwhile), then
    // leave the reactor, which waits for a poll of this engine in progress.
    while (m_outstanding.load(std::memory_order_acquire) != 0) {
      if (step(false) == 0) {
        std::this_thread::yield();
      }
    }
    m_reactor->detach(*this);
    while (m_callers.load(std::memory_order_acquire) != 0) {
      std::this_thread::yield(); // a submitting coroutine's thread still in `leave`
    }
  }

  //! True when no thread of its own drives the engine (a reactor does).
  [[nodiscard]] bool polled() const noexcept { return m_reactor != nullptr; }

  //! Queues `it` (filled in by the caller). Thread-safe. `it` must stay alive until its
  //! coroutine resumes. The caller calls `leave(returned value)` afterwards, once it no
  //! longer touches `it` (whose coroutine may resume on another thread meanwhile). True
  //! when a batch is due now (full, or `submit_when_idle` and none in flight).
  [[nodiscard]] bool enqueue(item& it) {
    m_callers.fetch_add(1, std::memory_order_relaxed);
    it.arrived_ns = now_ns();
    bool wake = false;
    bool full = false;
    bool first = false;
    {
      const std::lock_guard lock(m_mutex);
      it.next = nullptr;
      (m_tail != nullptr ? m_tail->next : m_head) = &it;
      m_tail = &it;
      ++m_pending;
      wake = m_sleeping;
      full = m_pending >= m_options.max_batch ||
             (m_options.submit_when_idle && m_flying_count.load(std::memory_order_relaxed) == 0);
      // Counted before any thread can take the job (and count it off when it finishes).
      first = m_reactor != nullptr && m_outstanding.fetch_add(1, std::memory_order_acq_rel) == 0;
    }
    if (first) {
      m_reactor->companion_work(+1);
    } else if (wake && m_reactor == nullptr) {
      m_wake.notify_one();
    }
    return full;
  }

  //! Ends an `enqueue` call. `full` (its value): a batch is due, so this thread submits
  //! it now when the reactor drives the engine, instead of waiting for a poller.
  void leave(bool full) noexcept {
    if (full && m_reactor != nullptr) {
      (void)step(true);
    }
    m_callers.fetch_sub(1, std::memory_order_release);
  }

  //! Removes `it` if it is still queued (not yet taken into a batch); true then, and the
  //! engine never touches it again. Thread-safe. O(jobs queued).
  bool withdraw(item& it) noexcept {
    const std::lock_guard lock(m_mutex);
    item* prev = nullptr;
    for (item* i = m_head; i != nullptr; prev = i, i = i->next) {
      if (i != &it) {
        continue;
      }
      (prev != nullptr ? prev->next : m_head) = it.next;
      if (m_tail == &it) {
        m_tail = prev;
      }
      it.next = nullptr;
      --m_pending;
      if (m_reactor != nullptr && m_outstanding.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        m_reactor->companion_work(-1);
      }
      return true;
    }
    return false;
  }

  //! Submits the pending jobs now, without waiting for company (the engine thread does it
  //! at once; without one, the calling thread does, unless a poller is at it).
  void flush() {
    {
      const std::lock_guard lock(m_mutex);
      m_forced = true;
    }
    if (m_reactor == nullptr) {
      m_wake.notify_one();
    } else {
      m_callers.fetch_add(1, std::memory_order_relaxed);
      leave(true);
    }
  }

  //! A snapshot of the counters.
  [[nodiscard]] batch_stats stats() const {
    batch_stats s;
    {
      const std::lock_guard lock(m_mutex);
      s = m_stats;
    }
    s.resolved_batches = m_resolved.load(std::memory_order_relaxed);
    s.flight_ns_total = m_flight_ns.load(std::memory_order_relaxed);
    return s;
  }

private:
  using clock = std::chrono::steady_clock;
  enum class why { none, full, timed, forced, idle };
  struct in_flight {
    typename Backend::ticket ticket;
    item* head;
    std::size_t jobs;
    std::uint64_t submitted_ns;
  };

  static batch_options validate(batch_options o) {
    if (o.max_batch == 0 || o.max_in_flight == 0) {
      throw std::invalid_argument("cuawait: batch_options needs max_batch and max_in_flight >= 1");
    }
    return o;
  }
  static std::uint64_t now_ns() noexcept {
    return static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now().time_since_epoch())
            .count());
  }

  std::size_t companion_poll() noexcept override { return step(false); }

  //! One round, on one thread at a time (others return 0 at once): resolves the finished
  //! batches (with `submit_only`, only when `max_in_flight` are out, to make room), then
  //! submits the batches due while there is room. Returns the jobs resolved plus the
  //! batches submitted.
  std::size_t step(bool submit_only) noexcept {
    if (m_stepping.load(std::memory_order_relaxed) ||
        m_stepping.exchange(true, std::memory_order_acquire)) {
      return 0;
    }
    std::size_t n = 0;
    const bool was_full = m_flying.size() >= m_options.max_in_flight;
    if (!submit_only || was_full) {
      n += poll(m_flying);
      if (was_full && m_flying.size() < m_options.max_in_flight) {
        m_room_since = now_ns();
      }
    }
    while (m_flying.size() < m_options.max_in_flight) {
      item* const head = take_due(m_jobs, m_room_since, m_flying.empty());
      if (head == nullptr) {
        break;
      }
      submit(head, m_jobs, m_flying);
      ++n;
    }
    m_flying_count.store(m_flying.size(), std::memory_order_relaxed);
    m_stepping.store(false, std::memory_order_release);
    return n;
  }

  void run() {
    m_backend->thread_init();
    std::uint64_t idle_since = now_ns();
    for (;;) {
      if (step(false) != 0) {
        idle_since = now_ns();
        continue;
      }
      if (!wait_for_work(m_flying.empty(), idle_since)) {
        return;
      }
    }
  }

  //! Takes the due batch off the queue (its jobs into `jobs`), or nullptr. `room_since`:
  //! when the engine last got a free in-flight slot after waiting for one. `idle`: none of
  //! the engine's batches is in flight.
  item* take_due(std::vector<job_type*>& jobs, std::uint64_t room_since, bool idle) {
    const std::lock_guard lock(m_mutex);
    if (m_head == nullptr) {
      m_forced = false;
      return nullptr;
    }
    const std::uint64_t now = now_ns();
    why reason = why::none;
    if (m_pending >= m_options.max_batch) {
      reason = why::full;
    } else if (m_forced || m_stopping) {
      reason = why::forced;
    } else if (now - m_head->arrived_ns >= static_cast<std::uint64_t>(m_options.max_wait.count())) {
      reason = why::timed;
    } else if (idle && m_options.submit_when_idle) {
      reason = why::idle;
    }
    if (reason == why::none) {
      return nullptr;
    }
    item* head = m_head;
    item* last = head;
    jobs.clear();
    jobs.push_back(&head->job);
    while (jobs.size() < m_options.max_batch && last->next != nullptr) {
      last = last->next;
      jobs.push_back(&last->job);
    }
    // When the batch was ready to go (full when its last job came, or its oldest job had
    // waited max_wait), had there been room: waiting for room after that is back-pressure.
    const std::uint64_t ready_at =
        jobs.size() == m_options.max_batch
            ? last->arrived_ns
            : head->arrived_ns + static_cast<std::uint64_t>(m_options.max_wait.count());
    const std::uint64_t room_wait = room_since > ready_at ? room_since - ready_at : 0;
    for (item* i = head;; i = i->next) {
      const std::uint64_t wait = now - i->arrived_ns;
      const std::uint64_t backpressure = std::min(wait, room_wait);
      record_wait(wait, backpressure);
      ++m_stats.batching_hist[batch_stats::batching_bucket(wait - backpressure)];
      if (i == last) {
        break;
      }
    }
    m_head = last->next;
    last->next = nullptr;
    if (m_head == nullptr) {
      m_tail = nullptr;
      m_forced = false;
    }
    m_pending -= jobs.size();
    const std::uint64_t first_wait = now - head->arrived_ns;
    count_batch(reason, jobs.size(), first_wait, std::min(first_wait, room_wait));
    return head;
  }

  void record_wait(std::uint64_t ns, std::uint64_t backpressure_ns) noexcept {
    m_stats.wait_ns_total += ns;
    m_stats.backpressure_ns_total += backpressure_ns;
    m_stats.wait_ns_max = std::max(m_stats.wait_ns_max, ns);
  }

  void count_batch(why reason, std::size_t n, std::uint64_t first_wait,
                   std::uint64_t first_backpressure) noexcept {
    m_stats.jobs += n;
    ++m_stats.batches;
    m_stats.largest_batch = std::max(m_stats.largest_batch, n);
    (reason == why::full    ? m_stats.full_batches
     : reason == why::timed ? m_stats.timed_batches
     : reason == why::idle  ? m_stats.idle_batches
                            : m_stats.forced_batches)++;
    if (n == 1) {
      ++m_stats.lone_jobs;
      m_stats.lone_wait_ns_total += first_wait;
      m_stats.lone_wait_ns_max = std::max(m_stats.lone_wait_ns_max, first_wait);
      m_stats.lone_backpressure_ns_total += first_backpressure;
      m_stats.lone_batching_ns_max =
          std::max(m_stats.lone_batching_ns_max, first_wait - first_backpressure);
    }
  }

  void submit(item* head, const std::vector<job_type*>& jobs, std::deque<in_flight>& flying) {
    try {
      flying.push_back(in_flight{m_backend->submit(std::span<job_type* const>(jobs)), head,
                                 jobs.size(), now_ns()});
    } catch (...) {
      fail(head, jobs.size(), std::current_exception());
    }
  }

  //! Resolves finished batches (in any order). Returns the jobs resolved.
  std::size_t poll(std::deque<in_flight>& flying) {
    std::size_t resolved = 0;
    for (auto it = flying.begin(); it != flying.end();) {
      bool finished = false;
      std::exception_ptr error;
      try {
        finished = m_backend->done(it->ticket);
      } catch (...) {
        finished = true;
        error = std::current_exception();
      }
      if (!finished) {
        ++it;
        continue;
      }
      item* head = it->head;
      const std::size_t jobs = it->jobs;
      // One writer (the driving thread): no lock, `stats()` reads them.
      m_resolved.store(m_resolved.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      m_flight_ns.store(m_flight_ns.load(std::memory_order_relaxed) + now_ns() - it->submitted_ns,
                        std::memory_order_relaxed);
      it = flying.erase(it);
      if (error) {
        fail(head, jobs, error);
      } else {
        resume_all(head, jobs);
      }
      resolved += jobs;
    }
    return resolved;
  }

  void fail(item* head, std::size_t jobs, const std::exception_ptr& e) {
    {
      const std::lock_guard lock(m_mutex);
      ++m_stats.failed_batches;
    }
    for (item* i = head; i != nullptr; i = i->next) {
      i->error = e;
    }
    resume_all(head, jobs);
  }

  //! Hands the coroutines of a finished batch (`jobs` of them, from `head`) back, in bulk
  //! where they share an executor and priority (`executor::post_bulk`: one lock, one wake).
  void resume_all(item* head, std::size_t jobs) noexcept {
    // Before any resumes: the last coroutine resumed may destroy the engine.
    if (m_reactor != nullptr && m_outstanding.fetch_sub(jobs, std::memory_order_acq_rel) == jobs) {
      m_reactor->companion_work(-1);
    }
    constexpr std::size_t chunk = 64;
    std::array<std::coroutine_handle<>, chunk> run{};
    std::size_t count = 0;
    executor* run_ex = nullptr;
    priority run_prio = priority::normal;
    const auto flush_run = [&]() noexcept {
      if (count != 0) {
        run_ex->post_bulk(std::span<const std::coroutine_handle<>>(run.data(), count), run_prio);
        count = 0;
      }
    };
    while (head != nullptr) {
      item* const next = head->next; // `head` dies once its coroutine runs
      if (!head->arrived.exchange(true, std::memory_order_acq_rel)) {
        head = next; // still in await_suspend: it sees the arrival and does not suspend
        continue;
      }
      const std::coroutine_handle<> h = head->waiter;
      executor* const ex = head->ex;
      const priority prio = head->prio;
      if (ex == nullptr) {
        flush_run(); // in order
        cuawait::detail::resume(h);
      } else {
        if (count == chunk || (count != 0 && (ex != run_ex || prio != run_prio))) {
          flush_run();
        }
        run_ex = ex;
        run_prio = prio;
        run[count++] = h;
      }
      head = next;
    }
    flush_run();
  }

  //! Waits a little for something to do. False when the engine should stop.
  bool wait_for_work(bool nothing_in_flight, std::uint64_t idle_since) {
    std::unique_lock lock(m_mutex);
    if (m_head == nullptr && nothing_in_flight) {
      if (m_stopping) {
        return false;
      }
      if (now_ns() - idle_since < idle_spin_ns) {
        // Just went idle: the next job often follows within microseconds (a coroutine
        // resumed from its batch submits again). Waking a sleeping thread costs tens of
        // microseconds on an idle machine, which that job would pay on top of max_wait.
        lock.unlock();
        spin_for(spin_slice_ns);
        return true;
      }
      m_sleeping = true;
      m_wake.wait(lock, [this] { return m_head != nullptr || m_stopping; });
      m_sleeping = false;
      return true;
    }
    // Room to sleep: forever with nothing pending; until shortly before a partial batch is
    // due otherwise (an arrival that fills it wakes us).
    std::uint64_t sleep_limit = ~std::uint64_t{0};
    if (m_head != nullptr) {
      if (m_pending >= m_options.max_batch || m_forced || m_stopping ||
          (nothing_in_flight && m_options.submit_when_idle)) {
        return true; // became due since take_due() looked: go again at once
      }
      // A partial batch waits for company until a known moment. Near it, spin on the clock
      // without giving the core away: a yield or a short timed sleep can cost tens of
      // microseconds (the kernel's timer slack is 50 µs), which a lone job would pay on top
      // of max_wait. The caller polls batches in flight between two short spins.
      const std::uint64_t due =
          m_head->arrived_ns + static_cast<std::uint64_t>(m_options.max_wait.count());
      const std::uint64_t now = now_ns();
      if (due <= now + sleep_margin_ns) {
        lock.unlock();
        spin_for(std::min(due - std::min(due, now), spin_slice_ns));
        return true;
      }
      sleep_limit = due - now - sleep_margin_ns;
      if (nothing_in_flight) {
        m_sleeping = true;
        m_wake.wait_for(lock, std::chrono::nanoseconds(sleep_limit));
        m_sleeping = false;
        return true;
      }
    }
    // Batches in flight: spin (cheap latency) while things happen, then poll at a coarser
    // period so a long GPU batch does not burn a core.
    if (now_ns() - idle_since > spin_window_ns) {
      m_sleeping = true;
      m_wake.wait_for(lock, std::chrono::nanoseconds(std::min<std::uint64_t>(50'000, sleep_limit)));
      m_sleeping = false;
      return true;
    }
    lock.unlock();
    std::this_thread::yield();
    return true;
  }

  static void spin_for(std::uint64_t ns) noexcept {
    const std::uint64_t until = now_ns() + ns;
    while (now_ns() < until) {
      cuawait::detail::cpu_relax();
    }
  }

  //! How long the engine spins after its last progress before it sleeps when idle.
  static constexpr std::uint64_t idle_spin_ns = 200'000;
  //! How long before a partial batch is due the engine stops sleeping and spins.
  static constexpr std::uint64_t sleep_margin_ns = 100'000;
  //! The longest spin between two polls of the batches in flight.
  static constexpr std::uint64_t spin_slice_ns = 2'000;
  static constexpr std::uint64_t spin_window_ns = 2'000'000;

  Backend* m_backend;
  batch_options m_options;
  mutable std::mutex m_mutex; // guards the queue, the flags and the stats
  std::condition_variable m_wake;
  item* m_head = nullptr;
  item* m_tail = nullptr;
  std::size_t m_pending = 0;
  bool m_forced = false;
  bool m_stopping = false;
  bool m_sleeping = false;
  batch_stats m_stats{};
  // The driving thread's (one at a time: m_stepping).
  std::atomic<bool> m_stepping{false};
  std::deque<in_flight> m_flying;
  // Its size, for `enqueue` on other threads (a hint: the driving thread decides).
  std::atomic<std::size_t> m_flying_count{0};
  // Batches resolved and their summed time in flight (`batch_stats`), written here only.
  std::atomic<std::uint64_t> m_resolved{0};
  std::atomic<std::uint64_t> m_flight_ns{0};
  std::vector<job_type*> m_jobs;
  std::uint64_t m_room_since = 0; // when the last wait for a free in-flight slot ended
  // Driven by a reactor: it, the jobs queued or in flight (its companion_work is +1 while
  // not zero), and the threads inside enqueue/leave or flush (the destructor waits for them).
  completion_reactor* m_reactor = nullptr;
  std::atomic<std::size_t> m_outstanding{0};
  std::atomic<std::size_t> m_callers{0};
  std::thread m_thread; // last: started after everything above exists
};

//! `co_await` side of a batcher: queues its job on suspension, resumes when the job's batch
//! has finished, on the executor the coroutine suspended on (or, from a thread no executor
//! owns, on the engine thread). Yields the job back (moved), or rethrows the batch's error.
//! The coroutine must not be destroyed while suspended here.
//!
//! Cancellation: the token given, else the awaiting coroutine's (a cuawait task's, or the
//! one `when_any` / `async_scope` give their children). A stop request while the job is
//! still queued withdraws it (it is never submitted) and resumes the coroutine at once with
//! `operation_cancelled`; once its batch is submitted, the job is the GPU's and the stop is
//! ignored: the coroutine resumes when the batch finishes. A token already stopped at the
//! `co_await` queues nothing.
template <class Backend>
class batch_awaiter {
public:
  using job_type = typename Backend::job_type;

  batch_awaiter(batch_engine<Backend>& engine, job_type job,
                std::stop_token token = {}) noexcept(std::is_nothrow_move_constructible_v<job_type>)
      : m_engine(&engine), m_item{std::move(job)}, m_token(std::move(token)) {}
  //! Only before it is awaited (so that `when_any` and `with_timeout` can hold it).
  batch_awaiter(batch_awaiter&& other) noexcept(std::is_nothrow_move_constructible_v<job_type>)
      : m_engine(other.m_engine), m_item{std::move(other.m_item.job)},
        m_token(std::move(other.m_token)) {}
  batch_awaiter(const batch_awaiter&) = delete;
  batch_awaiter& operator=(const batch_awaiter&) = delete;

  [[nodiscard]] bool await_ready() const noexcept { return false; }
  template <class Promise>
  bool await_suspend(std::coroutine_handle<Promise> h) noexcept {
    if constexpr (requires { h.promise().get_stop_token(); }) {
      if (!m_token.stop_possible()) {
        m_token = h.promise().get_stop_token();
      }
    }
    return suspend(h);
  }
  //! @throws operation_cancelled when a stop request withdrew the job before submission;
  //!         the batch's error when its submission or work failed.
  job_type await_resume() {
    m_stop.reset(); // waits for a stop callback that lost the race on another thread
    if (m_item.cancelled) {
      throw operation_cancelled("cuawait::cuda::batcher::submit cancelled before submission");
    }
    if (m_item.error) {
      std::rethrow_exception(m_item.error);
    }
    return std::move(m_item.job);
  }

private:
  struct on_stop {
    batch_awaiter* self;
    void operator()() const noexcept { self->cancel(); }
  };

  bool suspend(std::coroutine_handle<> h) noexcept {
    if (m_token.stop_requested()) {
      m_item.cancelled = true;
      return false;
    }
    m_item.waiter = h;
    m_item.ex = current_executor();
    m_item.prio = current_priority();
    const bool cancellable = m_token.stop_possible();
    m_item.arrived.store(!cancellable, std::memory_order_relaxed);
    batch_engine<Backend>* const engine = m_engine;
    // From here `h` may resume on another thread at any moment (and this awaiter go).
    const bool full = engine->enqueue(m_item);
    if (!cancellable) {
      engine->leave(full);
      return true;
    }
    (void)m_stop.emplace(m_token, on_stop{this}); // may run cancel() inline
    const bool suspended = !m_item.arrived.exchange(true, std::memory_order_acq_rel);
    engine->leave(full);
    return suspended;
  }

  void cancel() noexcept {
    if (!m_engine->withdraw(m_item)) {
      return; // already in a batch: it resumes when the batch finishes
    }
    m_item.cancelled = true; // published by the arrival below
    if (!m_item.arrived.exchange(true, std::memory_order_acq_rel)) {
      return; // await_suspend is still running: it sees the arrival and does not suspend
    }
    const std::coroutine_handle<> h = m_item.waiter;
    if (executor* const ex = m_item.ex; ex != nullptr) {
      ex->post(h, m_item.prio);
    } else {
      cuawait::detail::resume(h);
    }
  }

  batch_engine<Backend>* m_engine;
  batch_item<job_type> m_item;
  std::stop_token m_token;
  std::optional<std::stop_callback<on_stop>> m_stop;
};

} // namespace cuawait::cuda::detail
