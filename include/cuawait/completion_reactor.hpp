// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The completion reactor: resumes coroutines whose asynchronous work (GPU work, for the
//! CUDA layer) has finished. CUDA-free; what "finished" means comes from a
//! `completion_source`.
//!
//! Waits are intrusive nodes kept in FIFO order per lane (a CUDA stream: work on one stream
//! finishes in order). A poll asks the source only about the oldest wait of each active
//! lane, so a poll costs O(active lanes) and each completion O(1) amortised, however many
//! waits are pending.
//!
//! The polling thread spins while waits are pending and something finished recently (the
//! spin window), then parks: indefinitely when no wait is pending, otherwise in a timed
//! wait (`park_poll`) unless the source notifies completions. A new wait or a `notify()`
//! wakes it at once.
//!
//! Awaiters: `detail::reactor_wait` (below) is the part every reactor-backed awaiter shares.
//! It owns the intrusive wait node, submits
//! it on suspension with the executor and priority of the suspending code, honours a stop
//! token, and withdraws the wait if the coroutine is destroyed while waiting.
//!
//! Stop: when the wait's token can be stopped, a stop callback hands the node to the
//! reactor's `request_stop`, which costs O(1) and takes no lock (one `std::stop_source`
//! may run ten thousand such callbacks in a row): the node's claim word decides between the
//! stop request and the work's completion, so exactly one of them ends the wait, and the
//! reactor's pollers end and resume the stopped waits in bulk. Whoever ends the wait still
//! has to meet `await_suspend`, which may be registering the callback at that moment: both
//! set the node's arrival flag, and the second one resumes the coroutine (as `sync_waiter`
//! does for the CPU primitives). A wait that cannot be stopped skips all of this.

#include "cuawait/completion_source.hpp"
#include "cuawait/detail/reactor_node.hpp"
#include "cuawait/detail/spin_mutex.hpp"
#include "cuawait/detail/trampoline.hpp"
#include "cuawait/executor.hpp"
#include "cuawait/idle_source.hpp"
#include "cuawait/reactor_stats.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <thread>
#include <unordered_map>
#include <vector>

namespace cuawait {

namespace detail {
struct resume_batch;
struct lane_group;
} // namespace detail

//! Work polled beside a reactor's waits that is not one wait: a batcher's queue of jobs
//! and its batches in flight. Whoever polls the reactor (idle executor threads, its thread,
//! `poll()`) polls its companions too, so they need no thread of their own.
class reactor_companion {
public:
  //! Does what is due without blocking (submits a batch whose time came, resolves the
  //! finished ones) and returns how many coroutines it resumed or handed to executors. The
  //! reactor calls it from one thread at a time, outside its own lock.
  virtual std::size_t companion_poll() noexcept = 0;

protected:
  ~reactor_companion() = default;
};

//! How the reactor polls. The defaults keep resumption within microseconds for work up to
//! ~15 ms long and bound idle CPU (see docs/PERFORMANCE.md).
struct reactor_options {
  //! Start a polling thread. Without one, the owner drives the reactor with `poll()`, or
  //! idle executor threads poll it (`thread_pool::set_idle_source`).
  bool start_thread = true;
  //! Keep spinning this long after the last completion or new wait.
  std::chrono::nanoseconds spin_window = std::chrono::milliseconds(15);
  //! When parked with waits pending and a source that does not notify, poll this often.
  std::chrono::nanoseconds park_poll = std::chrono::milliseconds(1);
  //! With waits pending and nothing finishing for this long, `probe` each lane for errors;
  //! then again after this long or nine times the probe's own cost, whichever is longer
  //! (over thousands of stalled lanes probes take at most a tenth of the poller's time).
  std::chrono::nanoseconds stall_probe = std::chrono::milliseconds(1);
  //! Called first on the polling thread (when `start_thread`), before it polls: e.g. to
  //! give the thread the device context that coroutines resumed inline on it await through.
  //! Must not throw.
  std::function<void()> on_thread_start{};
  //! With a source that allows parallel queries (`completion_source::parallel_queries`),
  //! an idle executor thread in `poll_idle` claims one lane and queries its oldest wait
  //! repeatedly for up to this long (other threads claim other lanes) before it returns to
  //! its executor. The own-lane watch (`own_lane_watch`) spins this long at most too.
  std::chrono::nanoseconds claim_spin = std::chrono::microseconds(10);
  //! With a source whose queries need no lock (`completion_source::unlocked_queries`, e.g.
  //! `timeline`), an idle executor thread with exactly one coroutine waiting watches that
  //! wait's lane outside the lock for up to `claim_spin` (returning early when work arrives
  //! for it), as a thread in `cudaStreamSynchronize` watches its stream, then sweeps the
  //! other lanes once. Off by default: on the GPU it sped up code that awaits after every
  //! operation and slowed one `co_await` per job at 16 in flight (docs/COMPLETION.md). The
  //! environment variable `CUAWAIT_OWN_LANE` (1 or 0; 2, see below) overrides it.
  bool own_lane_watch = false;
  //! With the own-lane watch: while the watched wait is still pending, the watcher looks at
  //! the other lanes at every `own_lane_others_every`-th poll only (1, the default: at every
  //! poll). Fewer queries from the watchers; the other lanes are still found, later. The
  //! environment variable `CUAWAIT_OWN_LANE=2` sets the watch on and this to 16.
  std::uint32_t own_lane_others_every = 1;
  //! An idle thread spinning on a claimed lane (see `claim_spin`) queries it at most once
  //! per this period: 0 (the default) queries back to back. Each query of the
  //! `stream_poll` and `event_poll` strategies is a driver call, and where sixteen threads
  //! launch work on one device the driver serialises the calls. The environment variable
  //! `CUAWAIT_QUERY_PACE_NS` overrides it. See docs/COMPLETION.md for the measured effect.
  std::chrono::nanoseconds query_pace{0};
  //! Idle executor threads spinning on the reactor at once: every idle thread by default
  //! (the largest value); 0 means as many as waits are pending (at least one), the others
  //! parking. Measured on the H200 (64 KiB jobs, 2-16 in flight on a 16-worker pool) the cap
  //! changed throughput by less than the noise (0-5 % slower), so it is off by default; it
  //! saves CPU when few jobs are in flight. The environment variable `CUAWAIT_IDLE_SPINNERS`
  //! (a number, 0, or `all`) overrides it.
  std::size_t idle_spinners = static_cast<std::size_t>(-1);
};

//! Resumes coroutines waiting on asynchronous work. Thread-safe.
//!
//! Resumption: a wait submitted with an executor is `post`ed to it (with its priority);
//! one without (a plain thread awaited) is resumed inline on the thread that polls, through
//! `detail::resume`. Never on any thread of the source (e.g. a CUDA callback thread).
//!
//! Lifetime: the source must outlive the reactor. Destroying the reactor stops the thread
//! and cancels the waits still pending (their coroutines resume with
//! `completion_state::cancelled`); call `drain()` first to let them finish instead.
class completion_reactor final : public idle_source {
public:
  explicit completion_reactor(completion_source& source, reactor_options options = {});
  completion_reactor(const completion_reactor&) = delete;
  completion_reactor& operator=(const completion_reactor&) = delete;
  ~completion_reactor();

  //! Registers `w` (its awaiter part filled) and returns true; or, when `w` is the oldest of
  //! its lane and already finished, resolves it at once and returns false (the caller does
  //! not suspend). `w` must stay alive and unmoved until it is resolved or withdrawn.
  bool submit(detail::wait_node& w) noexcept;

  //! Removes `w` if the reactor has not handed it to its executor yet; afterwards the
  //! reactor never touches `w` nor resumes its coroutine. Returns true when withdrawn.
  //! Called by an awaiter's destructor (its coroutine is being destroyed).
  bool withdraw(detail::wait_node& w) noexcept;

  //! Ends `w` as `completion_state::cancelled` if the reactor has not seen its work finish
  //! yet: `w` leaves its lane, the source retires its marker, and the reactor never resumes
  //! it; the caller does. Returns false, changing nothing, when the work was seen finished
  //! first (the reactor resumes the coroutine with that outcome), a stop request claimed
  //! it, or `w` is not submitted. Decided under the reactor's lock. The work itself is not
  //! stopped: it runs on, in stream order. (Awaiters use `request_stop` instead.)
  bool cancel(detail::wait_node& w) noexcept;

  //! A stop request for the submitted, cancellable wait `w` (its `arrival` set): the stop
  //! callback of `detail::reactor_wait`. O(1) and lock-free, so that one `std::stop_source`
  //! reaching thousands of waits costs little on the requesting thread: it claims `w`
  //! (`detail::stop_claim`; when the reactor claimed it first, for the work's outcome, it
  //! does nothing), queues it on a lock-free list and wakes the pollers. The pollers (idle
  //! executor threads, the reactor's thread, `poll()`) take the whole list under one lock
  //! acquisition, end its waits as `completion_state::cancelled` with error
  //! `detail::stopped_by_request` (their markers retired), and resume them in bulk
  //! (`executor::post_bulk`; inline, on the poller, for waits without an executor). A
  //! reactor nobody polls on its own (no thread, no idle waker) ends the list at once on
  //! the calling thread instead. After it returns `w` may be gone.
  void request_stop(detail::wait_node& w) noexcept;

  //! One poll over the active lanes (and the companions): resolves what finished, posts or
  //! resumes it. Returns the number of waits resolved (and coroutines companions resumed). Safe
  //! alongside the thread, but meant for reactors without one.
  std::size_t poll();

  //! Polls (spinning, then sleeping `park_poll` between polls) until no wait is pending and
  //! every inline resumption has returned (so what those coroutines wrote before their next
  //! suspension is visible to the caller). Without a thread, it resumes inline waiters on
  //! the calling thread. Waits posted to an executor count as done once posted.
  void drain();

  //! Cancels every pending wait: each resumes with `completion_state::cancelled`.
  //! Returns how many were cancelled.
  std::size_t cancel_all();

  //! Ends every pending wait as a stop request would (`completion_status::error` set to
  //! `detail::stopped_by_request`, which the awaiters report as `operation_cancelled`); the
  //! work itself runs on. For `runtime::stop()`. One lock acquisition for all of them;
  //! their coroutines are posted in bulk after it (`executor::post_bulk`). Returns how many
  //! were ended (stop requests queued by then included).
  std::size_t stop_all();

  //! Wakes the polling thread if parked (and calls the idle waker). Safe from any thread,
  //! including a CUDA callback.
  void notify() noexcept;

  //! Polls `c` with the waits from now on. Thread-safe. `c` must stay alive until detached.
  void attach(reactor_companion& c);
  //! Stops polling `c`; returns once no thread polls it any more. Thread-safe, but never
  //! from inside `c.companion_poll()`.
  void detach(reactor_companion& c) noexcept;
  //! A companion's outstanding work changes by `delta` (+1 when it gets work while it had
  //! none, -1 when it has none left). While the sum is not zero, the pollers keep polling
  //! as they do for pending waits; a positive `delta` counts as progress and wakes a parked
  //! poller.
  void companion_work(std::ptrdiff_t delta) noexcept;

  //! For reactors polled by idle executor threads: `fn(context)` is called when a wait is
  //! submitted or the source signals a completion, so a parked poller can be woken
  //! (`thread_pool::wake_idle_poller`). Set before submitting waits; nullptr: none.
  void set_idle_waker(void (*fn)(void*) noexcept, void* context) noexcept override;

  // idle_source: polled by idle executor threads (one at a time; the others return at once).
  std::size_t poll_idle() noexcept override;
  //! From a busy thread: stop requests, companions and one sweep of every lane (no lane
  //! claimed, nothing spun on); nothing when another thread sweeps now.
  std::size_t poll_busy() noexcept override;
  [[nodiscard]] bool idle_keep_spinning() const noexcept override;
  [[nodiscard]] std::size_t idle_spinners_wanted() const noexcept override;
  [[nodiscard]] bool idle_pending() const noexcept override;
  [[nodiscard]] std::chrono::nanoseconds idle_park_period() const noexcept override;

  //! Records the resume latency of `w` (called by the awaiter when its coroutine runs) and
  //! calls the `on_resume` hook.
  void on_resumed(const detail::wait_node& w) noexcept;

  //! Installs tracing hooks (copied). Call before submitting waits.
  void set_trace(const reactor_trace& trace) noexcept;
  //! The hooks (for awaiters to call `on_suspend`).
  [[nodiscard]] const reactor_trace& trace() const noexcept { return m_trace; }

  //! Counters, a consistent snapshot of the pending waits per lane.
  [[nodiscard]] reactor_stats stats() const;
  //! Forgets the lane of `key` (a stream or event being destroyed) when no wait is
  //! pending on it, so that a program creating and destroying many streams keeps the lane
  //! table small; a lane with waits pending stays (its waits still resolve) and is reused
  //! if the key comes back. Returns true when the lane was removed.
  bool forget_lane(const void* key) noexcept;
  //! Lanes the reactor keeps now (one per stream or event awaited and not forgotten).
  [[nodiscard]] std::size_t lane_count() const;

  //! Waits pending now.
  [[nodiscard]] std::size_t pending() const noexcept {
    return m_pending_count.load(std::memory_order_relaxed);
  }

  //! The options it was made with.
  [[nodiscard]] const reactor_options& options() const noexcept { return m_options; }

  //! The source the reactor asks.
  [[nodiscard]] completion_source& source() const noexcept { return *m_source; }

private:
  using clock = std::chrono::steady_clock;

  detail::reactor_lane& lane_for(const void* key);
  struct sweep_tally {
    std::size_t resolved = 0;
    std::uint64_t queries = 0;
    completion_status lost{}; // a context_lost answer, which ends the sweep
  };
  std::size_t sweep_locked(bool probe) noexcept;
  bool sweep_lanes_locked(std::vector<detail::reactor_lane*>& lanes, detail::lane_group* group,
                          bool probe, sweep_tally& tally) noexcept;
  enum class head_outcome : std::uint8_t { pending, resolved, lost };
  head_outcome resolve_head_locked(detail::reactor_lane& lane, bool probe,
                                   sweep_tally& tally) noexcept;
  //! Resolves `lane`'s waits in order while they are finished; false on a lost context.
  bool drain_lane_locked(detail::reactor_lane& lane, bool probe, sweep_tally& tally) noexcept;
  //! Remembers place `i` for the later rounds; false out of memory.
  bool defer_lane_locked(std::size_t i) noexcept;
  bool resolve_rounds_locked(std::vector<detail::reactor_lane*>& lanes, bool probe,
                             sweep_tally& tally) noexcept;
  bool relist_locked(std::vector<detail::reactor_lane*>& lanes, detail::lane_group* group,
                     std::size_t i) noexcept;
  static std::uint64_t* listed_bell(const detail::reactor_lane& lane) noexcept;
  bool join_group_locked(detail::reactor_lane& lane, std::uint64_t* bell) noexcept;
  void activate_locked(detail::reactor_lane& lane, bool mark) noexcept;
  void remove_listed_locked(std::vector<detail::reactor_lane*>& lanes, detail::lane_group* group,
                            std::size_t i) noexcept;
  template <class F>
  void for_each_active_locked(F&& f) const;
  void resolve_locked(detail::wait_node& w, completion_status st,
                      detail::resume_batch* batch = nullptr) noexcept;
  void settle_locked(detail::wait_node& w, completion_status st, std::uint64_t now) noexcept;
  void fail_all_locked(completion_state why, int error,
                       detail::resume_batch* batch = nullptr) noexcept;
  [[nodiscard]] static bool claim_locked(detail::wait_node& w) noexcept;
  std::size_t take_stops_locked(detail::resume_batch& batch) noexcept;
  void unqueue_stop_locked(detail::wait_node& w) noexcept;
  void hand_over_locked(detail::wait_node& w, detail::resume_batch* batch) noexcept;
  static void post_batch(detail::resume_batch& batch) noexcept;
  std::size_t end_stops() noexcept;
  void unlink_locked(detail::wait_node& w, std::uint64_t now) noexcept;
  std::size_t run_ready_inline();
  std::size_t poll_companions() noexcept;
  std::size_t poll_waits();
  //! The start of `poll_idle` and `poll_busy`: ends stop requests, polls the companions;
  //! `waits` tells whether any wait is pending or ready (else there is nothing to sweep).
  std::size_t poll_stops_and_companions(bool& waits) noexcept;
  //! One sweep (`poll_waits`) unless another thread polls now (`m_idle_polling`).
  std::size_t sweep_unless_polled() noexcept;
  std::size_t poll_claimed_lane(const void* own_key, bool* own_busy) noexcept;
  //! The oldest wait of a lane whose query is costly (`completion_source::costly_query`),
  //! claimed by a sweep under the lock and asked about after it (`query_deferred`).
  struct deferred_query {
    detail::reactor_lane* lane = nullptr;
    detail::wait_node copy; // the head's awaiter fields (`awaiter_fields`)
    std::uint64_t pops = 0; // the lane's pops when claimed: a change voids the answer
    completion_status status{};
  };
  //! A node holding only `w`'s awaiter fields (what a source may be asked about outside
  //! the lock: `completion_source::parallel_queries`).
  static detail::wait_node awaiter_fields(const detail::wait_node& w) noexcept;
  //! The calling thread's deferred queries (reused: no allocation once grown).
  static std::vector<deferred_query>& deferred_queries() noexcept;
  //! Under the lock: true when the head of `lane` is to be asked about after the lock (a
  //! costly query, `probe` false), because this sweep claimed the lane for it or another
  //! thread has; false: ask now (a cheap query, a probe, or out of memory).
  bool query_later_locked(detail::reactor_lane& lane, bool probe) noexcept;
  //! After a sweep released the lock: asks about the heads it deferred, then resolves those
  //! still at the head of their lanes under the lock and ends the claims. Returns the waits
  //! resolved.
  std::size_t query_deferred() noexcept;
  void deactivate_locked(detail::reactor_lane& lane) noexcept;
  void thread_main(std::stop_token stop);
  void park(const std::stop_token& stop, std::uint64_t seen_seq, bool waits_pending);
  void wake() noexcept;
  static std::uint64_t now_ns() noexcept;
  static bool reactor_lock_sleeps() noexcept;

  completion_source* m_source;
  reactor_options m_options; // as given, with the environment's overrides (CUAWAIT_OWN_LANE...)
  // m_source->unlocked_queries(), read once (costly queries are made outside the lock only then)
  bool m_unlocked_queries;
  reactor_trace m_trace{};

  // Guards lanes, nodes, the ready list. A spinning lock: the idle poll takes it again and
  // again, and a submitting coroutine must get it within the poll's next gap.
  // CUAWAIT_REACTOR_LOCK=sleep makes it a plain sleeping mutex (for comparison).
  mutable detail::spin_mutex m_mutex{reactor_lock_sleeps()};
  std::unordered_map<const void*, std::unique_ptr<detail::reactor_lane>> m_lanes;
  // The lanes with waits (or emptied by a withdrawal and not yet dropped): those whose oldest
  // wait has no bell in m_active, swept every time; the others in the group of their bell
  // (m_groups, never erased: one per bell), swept when it rings. m_busy_groups: the groups
  // with lanes.
  std::vector<detail::reactor_lane*> m_active;
  std::unordered_map<const std::uint64_t*, std::unique_ptr<detail::lane_group>> m_groups;
  std::vector<detail::lane_group*> m_busy_groups;
  // A sweep's scratch (kept for their capacity): the places of the lanes that resolved their
  // oldest wait and have more (m_hot), and those of them still resolving (m_round).
  std::vector<std::size_t> m_hot;
  std::vector<std::size_t> m_round;
  detail::wait_node* m_ready_head = nullptr; // resolved waits to resume inline, FIFO
  detail::wait_node* m_ready_tail = nullptr;
  // Inline resumptions taken off the ready list and not yet returned: drain() waits for
  // them too, so the coroutines' writes are visible to its caller.
  std::size_t m_resuming = 0;
  std::atomic<std::uint64_t> m_last_progress_ns{0}; // written under m_mutex
  std::uint64_t m_next_probe_ns = 0;                //!< no probe before (see poll_waits)
  std::atomic<bool> m_has_ready{false};             // the ready list is not empty
  // Stop requests (request_stop): a lock-free LIFO of claimed nodes linked by stop_next,
  // pushed without the lock, taken whole under it.
  std::atomic<detail::wait_node*> m_stop_head{nullptr};
  // Nodes a stop request claimed that left their lane before the list was taken
  // (node_state::stopped): still to resume, so drain() waits for them. Under m_mutex.
  std::size_t m_stopped_unresumed = 0;
  // The pollers were told to stop spinning (spin window lapsed) and nothing progressed
  // since: what a poll finds now counts in reactor_stats::completions_after_spin.
  mutable std::atomic<bool> m_spin_lapsed{false};
  std::atomic<bool> m_idle_polling{false}; // an executor thread is in poll_idle()
  std::atomic<std::size_t> m_claimed{0};   // lanes claimed by idle threads now
  // Lanes in m_active and in the busy groups: written under m_mutex, read also without it.
  std::atomic<std::size_t> m_active_lanes{0};
  std::size_t m_claim_cursor = 0; // guarded by m_mutex
  // The sweep under way (guarded by m_mutex): nothing finished for `stall_probe` before it
  // (costly lanes are then paced, see query_later_locked), and its clock reading.
  bool m_sweep_stalled = false;
  std::uint64_t m_sweep_now_ns = 0;
  bool m_sweep_deferred = false; // it claimed a costly lane (query_deferred has work)
  void (*m_idle_waker)(void*) noexcept = nullptr;
  void* m_idle_waker_context = nullptr;

  std::atomic<std::size_t> m_pending_count{0};

  // Companions (attach): the list under m_companion_mutex, which a poll only try-locks.
  std::mutex m_companion_mutex;
  std::vector<reactor_companion*> m_companions;
  std::atomic<std::size_t> m_companion_count{0};
  std::atomic<std::ptrdiff_t> m_companion_work{0};
  std::atomic<std::uint64_t> m_wake_seq{0};
  std::atomic<bool> m_parked{false};
  std::mutex m_park_mutex;
  std::condition_variable m_park_cv;

  //! Load over time (reactor_stats), guarded by m_mutex, accounted at transitions only: a wait adds
  //! its own time pending when it leaves its lane, a lane its busy spell when it empties, the
  //! reactor its busy spell when the last wait leaves (Little's law: the sum of the waits' times is
  //! the integral of the pending count).
  struct load_meter {
    std::uint64_t created_ns = 0, busy_since_ns = 0, busy_ns = 0, pending_wait_ns = 0,
                  busy_lane_ns = 0, lanes_created = 0;
    std::size_t busy_lanes = 0, peak_pending = 0, peak_busy_lanes = 0;
  };
  load_meter m_load;

  struct counters {
    std::atomic<std::uint64_t> submitted{0}, completions{0}, failures{0}, withdrawn{0},
        cancelled{0}, stopped{0}, queries{0}, sweeps{0}, spin_ns{0}, parked_ns{0}, parks{0},
        ready{0}, after_spin{0};
    std::array<std::atomic<std::uint64_t>, reactor_stats::latency_buckets> latency{};
  };
  counters m_counters;

  std::jthread m_thread; // last: stopped and joined before the members above go
};

namespace detail {

//! Calls `f(token)` with the stop token a wait of the coroutine `h` honours, and returns
//! its result: `own` when it can be stopped, else the token the coroutine's promise offers
//! (a cuawait task's, inherited from its awaiter, or the one `when_any` / `async_scope`
//! give their children), else `own` (which then never stops). A promise may return its
//! token by value: hence the callback instead of a returned reference.
template <class Promise, class F>
decltype(auto) with_wait_stop_token(std::coroutine_handle<Promise> h, const std::stop_token& own,
                                    F&& f) {
  if constexpr (requires { h.promise().get_stop_token(); }) {
    if (!own.stop_possible()) {
      decltype(auto) inherited = h.promise().get_stop_token();
      return static_cast<F&&>(f)(static_cast<const std::stop_token&>(inherited));
    }
  }
  return static_cast<F&&>(f)(own);
}

//! Embed one per awaiter. Not movable once suspended (the reactor points at the node).
class reactor_wait {
public:
  reactor_wait() noexcept = default;
  reactor_wait(const reactor_wait&) = delete;
  reactor_wait& operator=(const reactor_wait&) = delete;
  //! Moves the awaiter part of an unsubmitted wait.
  reactor_wait(reactor_wait&& other) noexcept : m_node(other.m_node) { m_node.arrival = nullptr; }
  //! A wait still submitted here means the coroutine is being destroyed while suspended:
  //! withdraw it so that it is never resumed. (Only the awaiting coroutine touches
  //! `m_submitted`, so reading it needs no lock.) The stop callback goes first: once it is
  //! deregistered no stop request can reach the node any more.
  ~reactor_wait() {
    m_stop.reset();
    if (m_submitted) {
      m_reactor->withdraw(m_node);
      uncount();
    }
  }

  //! The node, for the awaiter to fill (lane, token, operation) before `suspend`.
  wait_node& node() noexcept { return m_node; }
  const wait_node& node() const noexcept { return m_node; }

  //! Call before arming any completion marker: true when `token` already asks to stop.
  //! The wait is then over (do not submit, do not suspend) and `stopped()` is true.
  [[nodiscard]] bool stop_before_submit(const std::stop_token& token) noexcept {
    if (!token.stop_requested()) {
      return false;
    }
    m_node.status = {completion_state::cancelled, 0};
    m_stopped = true;
    return true;
  }

  //! Submits the wait for `h`, to be resumed on the current executor with the current
  //! priority (inline on the reactor's thread when there is none). Returns false when the
  //! work had already finished, or stop was requested on `token` meanwhile: do not
  //! suspend. A stop request on `token` while suspended ends the wait and resumes the
  //! coroutine on its executor (see `completion_reactor::request_stop` for who resumes it
  //! and where); `stopped()` then says so. `token` is only read here (the callback keeps
  //! its state).
  bool suspend(completion_reactor& r, std::coroutine_handle<> h,
               const std::stop_token& token = {}) noexcept {
    m_node.handle = h;
    m_node.exec = current_executor();
    m_node.prio = current_priority();
    m_node.home = tl_execution.worker;
    m_counter = tl_execution.waits;
    if (m_counter != nullptr) {
      m_counter->fetch_add(1, std::memory_order_relaxed); // before submit: may resume at once
    }
    m_reactor = &r;
    const bool cancellable = token.stop_possible();
    if (cancellable) {
      m_arrival.store(false, std::memory_order_relaxed);
      m_node.arrival = &m_arrival;
      m_node.claim = stop_claim::open; // published to the reactor by submit's lock
    }
    if (r.trace().on_suspend != nullptr) {
      r.trace().on_suspend(r.trace().context, m_node);
    }
    m_submitted = true; // before submit: the coroutine may run (and finish) before it returns
    if (!r.submit(m_node)) {
      m_submitted = false;
      uncount();
      // Finished before it could suspend: close what on_suspend opened (resolved_ns == 0
      // tells the hook that the coroutine never suspended).
      if (r.trace().on_resume != nullptr) {
        r.trace().on_resume(r.trace().context, m_node);
      }
      return false;
    }
    if (!cancellable) {
      return true; // the reactor may already be resuming us: touch nothing
    }
    (void)m_stop.emplace(token, on_stop{this}); // may run on_stop_requested() inline
    return !m_arrival.exchange(true, std::memory_order_acq_rel);
  }

  //! Call from `await_resume`: the wait's outcome (records the resume latency). A wait
  //! ended by a stop request reports `completion_state::cancelled` and `stopped()`.
  completion_status finish() noexcept {
    m_stop.reset(); // waits for a stop callback that lost the race on another thread
    if (m_submitted) {
      m_submitted = false;
      uncount();
      m_reactor->on_resumed(m_node);
    }
    if (m_node.status.state == completion_state::cancelled &&
        m_node.status.error == stopped_by_request) {
      m_stopped = true; // a stop request: its own (request_stop) or for all (stop_all)
    }
    return m_node.status;
  }

  //! True when a stop request ended the wait (read after `finish`).
  [[nodiscard]] bool stopped() const noexcept { return m_stopped; }

private:
  struct on_stop {
    reactor_wait* self;
    void operator()() const noexcept { self->on_stop_requested(); }
  };

  // O(1), no lock: the reactor ends the wait (status `stopped_by_request`, which `finish`
  // reports as stopped) and meets await_suspend through the arrival flag.
  void on_stop_requested() noexcept { m_reactor->request_stop(m_node); }

  void uncount() noexcept {
    if (m_counter != nullptr) {
      m_counter->fetch_sub(1, std::memory_order_relaxed);
      m_counter = nullptr;
    }
  }

  wait_node m_node{};
  completion_reactor* m_reactor = nullptr;
  std::atomic<std::ptrdiff_t>* m_counter = nullptr; //!< the suspending executor's wait count
  bool m_submitted = false;
  bool m_stopped = false;
  std::atomic<bool> m_arrival{true};
  std::optional<std::stop_callback<on_stop>> m_stop;
};

} // namespace detail

} // namespace cuawait
