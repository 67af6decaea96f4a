// SPDX-License-Identifier: Apache-2.0
#include "cuawait/thread_pool.hpp"

#include "busy_poll.hpp"

#include "cuawait/detail/cpu_relax.hpp"
#include "cuawait/detail/pool_queue.hpp"
#include "cuawait/detail/trampoline.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace cuawait {

namespace {

//! A queue and the mask of priorities it holds, readable without the lock so that scans
//! skip empty queues. The mask is stored (seq_cst) under the lock after every change.
struct alignas(64) locked_queue {
  std::mutex mutex;
  detail::priority_rings rings;
  std::atomic<unsigned> mask{0};

  // Statistics, under the lock the queue takes anyway, so that a worker counts nothing per
  // pick itself: the picks, and the backlog left behind, sampled at every 16th pick.
  // A pick decrements `countdown` (two instructions); each 16th refills it, counts a
  // round in `rounds` and adds the backlog. Picks so far: rounds * 16 + 16 - countdown.
  static constexpr unsigned backlog_sample = 16;
  unsigned countdown = backlog_sample;
  std::uint64_t rounds = 0;
  std::uint64_t seen = 0;

  void push(std::coroutine_handle<> h, priority p) {
    const std::lock_guard lock(mutex);
    rings.push(h, p);
    mask.store(rings.mask());
  }
  void push_bulk(std::span<const std::coroutine_handle<>> hs, priority p) {
    const std::lock_guard lock(mutex);
    for (const std::coroutine_handle<> h : hs) {
      rings.push(h, p);
    }
    mask.store(rings.mask());
  }
  bool try_pop(std::coroutine_handle<>& h, priority& p) noexcept {
    if (mask.load() == 0) {
      return false;
    }
    const std::lock_guard lock(mutex);
    if (rings.empty()) {
      return false;
    }
    std::tie(h, p) = rings.pop();
    mask.store(rings.mask());
    if (--countdown == 0) {
      countdown = backlog_sample;
      ++rounds;
      seen += backlog_sample * rings.size();
    }
    return true;
  }
  //! Handles queued now, handles taken so far, and the backlog they saw.
  void read(std::size_t& queued, std::uint64_t& taken, std::uint64_t& backlog) {
    const std::lock_guard lock(mutex);
    queued += rings.size();
    taken += rounds * backlog_sample + (backlog_sample - countdown);
    backlog += seen;
  }
};

//! One worker's counters (thread_pool_stats). Written by the worker only, read by stats():
//! relaxed atomics, updated with a load and a store (no read-modify-write).
struct alignas(64) worker_meter {
  std::atomic<std::uint64_t> since_ns{0}; //!< start of the current busy or idle spell
  std::atomic<bool> busy{false};
  std::atomic<std::uint64_t> busy_ns{0}, idle_ns{0}, parked_ns{0};

  static void add(std::atomic<std::uint64_t>& c, std::uint64_t v) noexcept {
    c.store(c.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
  }
  //! The worker turns busy (true) or idle (false); a no-op when it already is.
  void turn(bool to_busy) noexcept {
    if (busy.load(std::memory_order_relaxed) == to_busy) {
      return;
    }
    const std::uint64_t now = detail::steady_ns();
    add(to_busy ? idle_ns : busy_ns, now - since_ns.load(std::memory_order_relaxed));
    since_ns.store(now, std::memory_order_relaxed);
    busy.store(to_busy, std::memory_order_relaxed);
  }
};

//! Which pool (and which of its workers) the calling thread is, if any.
struct worker_identity {
  const thread_pool::impl* pool = nullptr;
  std::size_t index = 0;
  //! Inside a poll of the idle source: posts to this worker's queue wake nobody (this
  //! worker runs the first next) and are counted here instead.
  bool polling = false;
  std::size_t polled_posts = 0;
};
constinit thread_local worker_identity tl_worker{};

//! Rounds of spinning (with a yield) before an idle worker parks.
constexpr int idle_spin_rounds = 32;
//! Every this many picks a worker looks at the injection queue first (fairness).
constexpr unsigned injection_fairness_period = 61;

} // namespace

std::uint64_t detail::busy_poll_period_ns() {
  const char* v = std::getenv("CUAWAIT_BUSY_POLL_US");
  if (v == nullptr || *v == '\0') {
    return 50'000;
  }
  char* end = nullptr;
  const unsigned long long us = std::strtoull(v, &end, 10);
  if (end == v || *end != '\0') {
    throw std::invalid_argument(std::string("CUAWAIT_BUSY_POLL_US=") + v +
                                ": expected a number of microseconds (0: never)");
  }
  return static_cast<std::uint64_t>(us) * 1000;
}

struct thread_pool::impl {
  impl(thread_pool& owner, std::size_t n)
      : owner(owner), queues(n), meters(std::make_unique<worker_meter[]>(n)),
        states(std::make_unique<worker_state[]>(n)) {}

  thread_pool& owner;
  std::function<void(std::size_t)> on_start; //!< run first on each worker (may be empty)
  std::vector<locked_queue> queues;          //!< one per worker
  locked_queue injection;                    //!< posts from outside the pool
  std::unique_ptr<worker_meter[]> meters;    //!< one per worker
  std::atomic<bool> stopping{false};
  std::atomic<std::size_t> bulk_cursor{0}; //!< the queue the next post_bulk fills

  // Parking. A poster publishes its work (queue mask, seq_cst), then reads `sleepers`; a
  // worker about to park increments `sleepers`, then rescans the masks. Both orders are
  // seq_cst, so either the worker sees the work or the poster sees the sleeper and hands
  // it a token: no lost wake-up.
  std::atomic<std::size_t> sleepers{0};
  std::mutex park_mutex;
  std::condition_variable park_cv;
  std::size_t wake_tokens = 0; //!< guarded by park_mutex

  // Idle polling (see the class comment). `source_users` counts workers holding the
  // source between two checks of `source`, so set_idle_source() knows when the old one is
  // free. `spinners` counts workers spinning on it; `poller_parked` is the one worker in a
  // timed park while work is pending; `kicks` wakes it early.
  std::atomic<idle_source*> source{nullptr};
  std::atomic<std::size_t> source_users{0};
  std::atomic<std::size_t> spinners{0};
  std::atomic<bool> poller_taken{false};
  std::atomic<std::uint64_t> kicks{0};
  //! Busy polling: no worker of a busy pool polls before this time (steady clock, ns).
  const std::uint64_t busy_poll_ns = detail::busy_poll_period_ns();
  std::atomic<std::uint64_t> next_busy_poll{0};
  //! Per worker: its coroutines suspended on reactor waits now (see
  //! `detail::execution_context::waits`; counted where they suspended), and whether it
  //! spins on the idle source now. A worker with waits of its own spins for them (as a
  //! thread in `cudaStreamSynchronize` would) and a finished wait is handed to it
  //! (`post_near`); a worker without any spins only when nobody else does, so that idle
  //! workers neither crowd the cores of the ones submitting work nor take their coroutines
  //! to other cores (measured on the H200: two pipelines of 64 KiB jobs on 16 workers that
  //! all spun ran 1.2-1.4x slower than on a pool of 2 or 4).
  struct alignas(64) worker_state {
    std::atomic<std::ptrdiff_t> waits{0};
    std::atomic<bool> spinning{false};
  };
  std::unique_ptr<worker_state[]> states;
  //! CUAWAIT_POOL_SPINNERS=all: every idle worker spins (up to the source's wish) and a
  //! finished wait resumes where it was found (the rule before; for comparison).
  const bool by_home = [] {
    const char* v = std::getenv("CUAWAIT_POOL_SPINNERS");
    return v == nullptr || std::string_view(v) != "all";
  }();

  std::mutex shutdown_mutex;
  std::vector<std::thread> threads;
  bool joined = false; //!< guarded by shutdown_mutex

  void start(std::size_t n) {
    threads.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      threads.emplace_back([this, i] { worker_main(i); });
    }
  }

  void notify_work(std::size_t n = 1) noexcept {
    const std::size_t asleep = sleepers.load();
    if (asleep == 0) {
      return;
    }
    n = std::min(n, asleep);
    {
      const std::lock_guard lock(park_mutex);
      wake_tokens = std::min(wake_tokens + n, queues.size());
    }
    if (n == 1) {
      park_cv.notify_one();
    } else {
      park_cv.notify_all();
    }
  }

  //! Polls `src` once. True when it made work ready (in this worker's queue, or ran it).
  //! `busy`: the worker has work to run and polls between two pieces of it
  //! (`poll_while_busy`): nothing inside the poll spins.
  bool poll_source(idle_source& src, bool busy = false) noexcept {
    tl_worker.polling = true;
    tl_worker.polled_posts = 0;
    detail::tl_idle_poller =
        busy ? detail::busy_poller
             : detail::idle_poller{&work_for_me, this, &states[tl_worker.index].waits};
    const std::size_t resolved = busy ? src.poll_busy() : src.poll_idle();
    detail::tl_idle_poller = {};
    tl_worker.polling = false;
    const std::size_t posts = tl_worker.polled_posts;
    if (posts > 1) {
      notify_work(posts - 1); // this worker runs one; parked ones may take the rest
    }
    return resolved != 0 || posts != 0;
  }

  //! A worker that has been running work without a break since `busy_since` polls the
  //! source once, at most one worker per `busy_poll_ns` and none while another worker spins
  //! on the source, before it takes its next piece of work. Without it, a pool that never runs out
  //! of work (a CPU stage queued for every image of a batch) would find GPU completions and due
  //! timers only when it does: streams, buffers and deadlines would wait behind the whole backlog.
  void poll_while_busy(std::uint64_t busy_since) noexcept {
    if (spinners.load(std::memory_order_relaxed) != 0) {
      return; // a spinning worker polls anyway (checked before the clock is read)
    }
    const std::uint64_t now = detail::steady_ns();
    std::uint64_t next = next_busy_poll.load(std::memory_order_relaxed);
    if (now < next || now - busy_since < busy_poll_ns ||
        !next_busy_poll.compare_exchange_strong(next, now + busy_poll_ns,
                                                std::memory_order_relaxed)) {
      return; // too soon, or another worker polls this period
    }
    source_users.fetch_add(1);
    idle_source* const src = source.load();
    if (src != nullptr && src->idle_pending()) {
      (void)poll_source(*src, true);
    }
    source_users.fetch_sub(1);
  }

  //! Spins while the idle source has work pending and made progress recently, polling it.
  //! Returns true when work may be available, false when the spin ended without any.
  bool spin_on_source() noexcept {
    source_users.fetch_add(1);
    idle_source* const src = source.load();
    bool found = false;
    if (src != nullptr && src->idle_pending()) {
      worker_state& me = states[tl_worker.index];
      const std::size_t before = spinners.fetch_add(1);
      // With waits of its own, up to the source's wish; without, only when nobody spins.
      if (has_own_waits(me) ? before < src->idle_spinners_wanted() : before == 0) {
        me.spinning.store(true);
        for (unsigned round = 1; !found; ++round) {
          if (any_work_visible() || stopping.load() || source.load() != src) {
            found = true;
          } else if (poll_source(*src)) {
            found = true;
          } else if (!src->idle_keep_spinning()) {
            break;
          } else if (round % 64 == 0) {
            if (!has_own_waits(me) && spinners.load(std::memory_order_relaxed) > 1) {
              break; // others spin for their own waits: this one parks
            }
            std::this_thread::yield(); // polite when the machine is oversubscribed
          } else {
            detail::cpu_relax();
          }
        }
        me.spinning.store(false);
      } // else: enough spinners; park instead (the timed poller covers a stalled source)
      spinners.fetch_sub(1);
      // A kick (kick_poller) that came while this worker was still counted as a spinner
      // woke nobody: it relied on this worker to poll again. Do, now that it is not
      // counted any more, or that kick's work (a new wait, a stop request) would wait for
      // the timed poller's next period (`idle_park_period`, 1 ms or more).
      if (!found && !stopping.load() && source.load() == src) {
        found = poll_source(*src);
      }
    }
    source_users.fetch_sub(1);
    return found;
  }

  //! True when the calling thread looks for finished work itself as soon as it has nothing
  //! else to run: a worker of this pool with nothing queued (a coroutine of its own just
  //! suspended: it spins for it next), or a run loop's thread (`executor_scope` with a
  //! wait count, not a worker), which spins while its coroutines wait. Waking a parked
  //! worker for them would cost the submitting thread a futex call and put a second
  //! thread on the cores (on the H200 host, vCPUs share physical cores: a spinning
  //! neighbour slowed the submitting thread's driver calls by 20-40 %).
  [[nodiscard]] bool polls_next_itself() const noexcept {
    if (tl_worker.pool == this) {
      return queues[tl_worker.index].mask.load() == 0 && injection.mask.load() == 0;
    }
    return tl_worker.pool == nullptr && detail::tl_execution.waits != nullptr;
  }

  //! For `detail::tl_idle_poller`: work in the calling worker's queue or the injection
  //! queue (a poll spinning on one wait returns to run it).
  static bool work_for_me(const void* self) noexcept {
    const auto& s = *static_cast<const impl*>(self);
    return s.queues[tl_worker.index].mask.load(std::memory_order_relaxed) != 0 ||
           s.injection.mask.load(std::memory_order_relaxed) != 0;
  }

  [[nodiscard]] bool has_own_waits(const worker_state& me) const noexcept {
    return !by_home || me.waits.load(std::memory_order_relaxed) > 0;
  }

  //! With work pending on the source and nothing to spin for: one worker parks for the
  //! source's period (or until kicked or work is posted), then polls again.
  bool park_as_poller() {
    source_users.fetch_add(1);
    idle_source* const src = source.load();
    if (src == nullptr || !src->idle_pending() || poller_taken.exchange(true)) {
      source_users.fetch_sub(1);
      return false;
    }
    // `kicked` before the period: a kick after this read ends the park below, and one
    // before it comes after the change it signals (a new earliest timer), which the period
    // read here then sees.
    const std::uint64_t kicked = kicks.load();
    const auto period = src->idle_park_period();
    source_users.fetch_sub(1);
    sleepers.fetch_add(1);
    if (!any_work_visible() && !stopping.load()) {
      const std::uint64_t t0 = detail::steady_ns();
      std::unique_lock lock(park_mutex);
      park_cv.wait_for(lock, period, [&] {
        return wake_tokens > 0 || stopping.load() || kicks.load() != kicked;
      });
      if (wake_tokens > 0) {
        --wake_tokens;
      }
      worker_meter::add(meters[tl_worker.index].parked_ns, detail::steady_ns() - t0);
    }
    sleepers.fetch_sub(1);
    poller_taken.store(false);
    return true;
  }

  //! Counts a kick and wakes the worker parked with a timeout, if one is (it re-checks
  //! `kicks`). False when none is parked.
  bool kick_parked() noexcept {
    kicks.fetch_add(1);
    if (!poller_taken.load()) {
      return false;
    }
    const std::lock_guard lock(park_mutex);
    park_cv.notify_all();
    return true;
  }

  //! For a source whose park period just became shorter (a new earliest timer): the parked
  //! poller parks again for the new period; with none parked, a parked worker becomes it.
  //! No shortcut for a spinning worker while a poller is parked: the spinner may end up
  //! parked behind the parked poller's old period. With none parked, a worker of this pool
  //! that goes idle next becomes the poller itself (reading the new period), so nobody is
  //! woken for it.
  void kick_parked_poller() noexcept {
    if (!kick_parked() && !(tl_worker.pool == this && polls_next_itself())) {
      notify_work();
    }
  }

  void kick_poller() noexcept {
    if (spinners.load() != 0) {
      return; // a spinning worker polls soon
    }
    if (by_home && polls_next_itself()) {
      return;
    }
    if (!kick_parked()) {
      notify_work();
    }
  }

  //! Work in queue `i` that the calling worker leaves alone: another worker's, which spins
  //! idle and takes it itself (a finished wait handed to it by `post_near`).
  [[nodiscard]] bool left_to_owner(std::size_t i) const noexcept {
    return by_home && i != tl_worker.index && states[i].spinning.load();
  }

  [[nodiscard]] bool any_work_visible() const noexcept {
    if (injection.mask.load() != 0) {
      return true;
    }
    for (std::size_t i = 0; i < queues.size(); ++i) {
      if (queues[i].mask.load() != 0 && !left_to_owner(i)) {
        return true;
      }
    }
    return false;
  }

  //! Own queue or injection queue, whichever holds the higher priority; then stealing.
  bool find_work(std::size_t self, unsigned& tick, std::coroutine_handle<>& h, priority& p) {
    locked_queue& local = queues[self];
    const unsigned mine = local.mask.load();
    const unsigned outside = injection.mask.load();
    bool outside_first = outside != 0 && (mine == 0 || ++tick % injection_fairness_period == 0 ||
                                          detail::priority_rings::top_priority_index(outside) >
                                              detail::priority_rings::top_priority_index(mine));
    if (outside_first && injection.try_pop(h, p)) {
      return true;
    }
    if (local.try_pop(h, p) || injection.try_pop(h, p)) {
      return true;
    }
    const std::size_t n = queues.size();
    for (std::size_t k = 1; k < n; ++k) {
      const std::size_t i = (self + k) % n;
      if (!left_to_owner(i) && queues[i].try_pop(h, p)) {
        return true;
      }
    }
    return false;
  }

  //! Waits until work may be available. Returns false when the worker should exit: the
  //! pool is stopping and no queue holds anything (outside posts are refused by then; only
  //! a running worker adds to the queues afterwards, and it scans every queue, so what it
  //! adds anywhere is run before it exits).
  bool park() {
    if (spin_on_source()) {
      return true;
    }
    for (int i = 0; i < idle_spin_rounds; ++i) {
      if (any_work_visible()) {
        return true;
      }
      std::this_thread::yield();
    }
    if (park_as_poller()) {
      return true;
    }
    const bool stop = stopping.load(); // read before the scan: see above
    sleepers.fetch_add(1);
    if (any_work_visible() || stop) {
      sleepers.fetch_sub(1);
      return !stop || any_work_visible();
    }
    {
      const std::uint64_t t0 = detail::steady_ns();
      std::unique_lock lock(park_mutex);
      park_cv.wait(lock, [this] { return wake_tokens > 0 || stopping.load(); });
      if (wake_tokens > 0) {
        --wake_tokens;
      }
      worker_meter::add(meters[tl_worker.index].parked_ns, detail::steady_ns() - t0);
    }
    sleepers.fetch_sub(1);
    return true;
  }

  void worker_main(std::size_t self) {
    tl_worker = {this, self};
    if (on_start) {
      on_start(self);
    }
    worker_meter& meter = meters[self];
    meter.since_ns.store(detail::steady_ns(), std::memory_order_relaxed);
    unsigned tick = 0;
    std::coroutine_handle<> h;
    priority p = priority::normal;
    // Busy from the start and from each return of park() (work is visible then) until a
    // search finds nothing: a pick itself touches no counter.
    meter.turn(true);
    std::uint64_t busy_since = busy_poll_ns != 0 ? detail::steady_ns() : 0;
    for (;;) {
      // Only with work queued for this worker: one about to run dry polls idle instead.
      if (busy_poll_ns != 0 && source.load(std::memory_order_relaxed) != nullptr &&
          work_for_me(this)) {
        poll_while_busy(busy_since);
      }
      if (find_work(self, tick, h, p)) {
        const executor_scope scope(&owner, p, &states[self].waits,
                                   static_cast<std::uint32_t>(self));
        detail::resume(h);
      } else {
        meter.turn(false);
        if (!park()) {
          break;
        }
        meter.turn(true);
        if (busy_poll_ns != 0) {
          busy_since = detail::steady_ns();
        }
      }
    }
    meter.turn(false);
    meter.since_ns.store(0, std::memory_order_relaxed); // exited: no spell in progress
    tl_worker = {};
  }
};

thread_pool::thread_pool(std::size_t threads) : thread_pool(threads, {}) {}

thread_pool::thread_pool(std::size_t threads, std::function<void(std::size_t)> on_worker_start)
    : m_impl(std::make_unique<impl>(*this, std::max<std::size_t>(threads, 1))) {
  m_impl->on_start = std::move(on_worker_start);
  try {
    m_impl->start(m_impl->queues.size());
  } catch (...) {
    shutdown();
    throw;
  }
}

thread_pool::~thread_pool() { shutdown(); }

std::size_t thread_pool::size() const noexcept { return m_impl->queues.size(); }

bool thread_pool::is_shutting_down() const noexcept { return m_impl->stopping.load(); }

bool thread_pool::on_worker_thread() const noexcept { return tl_worker.pool == m_impl.get(); }

bool thread_pool::try_enqueue(std::coroutine_handle<> h, priority p) noexcept {
  impl& s = *m_impl;
  if (tl_worker.pool == &s) {
    // A worker of this pool: the pool cannot be destroyed before this worker returns (the
    // destructor joins it), so waking a sleeper after publishing is safe.
    s.queues[tl_worker.index].push(h, p);
    if (tl_worker.polling) {
      ++tl_worker.polled_posts; // poll_source() decides whom to wake
      return true;
    }
    s.notify_work();
    return true;
  }
  const std::lock_guard lock(s.injection.mutex);
  // Checked under the injection lock, which shutdown() also takes to set the flag: a post
  // either lands before the flag (and is drained) or sees it.
  if (s.stopping.load()) {
    return false;
  }
  s.injection.rings.push(h, p);
  s.injection.mask.store(s.injection.rings.mask());
  // Still under the lock: once the work is visible its coroutine may run at once and its
  // owner destroy the pool, but shutdown() must take this lock first, so the pool outlives
  // the wake-up. Nothing of the pool is touched after the unlock.
  s.notify_work();
  return true;
}

void thread_pool::post_near(std::coroutine_handle<> h, priority p, std::uint32_t home) noexcept {
  impl& s = *m_impl;
  if (s.by_home && tl_worker.pool == &s && home < s.queues.size() && home != tl_worker.index &&
      s.states[home].spinning.load()) {
    // A worker of this pool, so the pool outlives the call. `home` spins and sees its queue:
    // no wake-up. Unless it stops spinning meanwhile: it clears its flag, then reads the
    // queues; this pushes, then reads the flag (all seq_cst), so either it sees the work or
    // this sees the flag down and wakes a sleeper (the work is anyone's again).
    s.queues[home].push(h, p);
    if (!s.states[home].spinning.load()) {
      s.notify_work();
    }
    return;
  }
  post(h, p);
}

void thread_pool::post(std::coroutine_handle<> h, priority p) noexcept {
  if (!try_enqueue(h, p)) {
    const executor_scope scope(this, p);
    detail::resume(h);
  }
}

void thread_pool::post_bulk(std::span<const std::coroutine_handle<>> handles, priority p) noexcept {
  if (handles.empty()) {
    return;
  }
  impl& s = *m_impl;
  const std::size_t target =
      s.bulk_cursor.fetch_add(1, std::memory_order_relaxed) % s.queues.size();
  if (tl_worker.pool == &s) {
    // A worker: it may add to any queue (the pool outlives it, see try_enqueue); the queue's
    // owner or a thief takes the handles, the woken workers steal the rest.
    s.queues[target].push_bulk(handles, p);
    s.notify_work(handles.size());
    return;
  }
  {
    // From outside, under the injection lock as try_enqueue (the shutdown check); into a
    // worker's queue rather than the injection queue, so that the workers of a large batch
    // posted in chunks take from different queues instead of all from one.
    const std::lock_guard lock(s.injection.mutex);
    if (!s.stopping.load()) {
      s.queues[target].push_bulk(handles, p);
      s.notify_work(handles.size());
      return;
    }
  }
  for (const std::coroutine_handle<> h : handles) {
    const executor_scope scope(this, p);
    detail::resume(h);
  }
}

void thread_pool::set_idle_source(idle_source* source) noexcept {
  impl& s = *m_impl;
  s.source.store(source);
  while (s.source_users.load() != 0) {
    std::this_thread::yield(); // a worker is between two checks of the old source
  }
  if (source != nullptr) {
    s.kick_poller();
  }
}

thread_pool_stats thread_pool::stats() const {
  impl& s = *m_impl;
  thread_pool_stats out;
  out.workers = s.queues.size();
  const std::uint64_t now = detail::steady_ns();
  for (std::size_t i = 0; i < out.workers; ++i) {
    const worker_meter& m = s.meters[i];
    out.busy_ns += m.busy_ns.load(std::memory_order_relaxed);
    out.idle_ns += m.idle_ns.load(std::memory_order_relaxed);
    out.parked_ns += m.parked_ns.load(std::memory_order_relaxed);
    // The spell in progress counts too (a worker busy for the whole window never turns).
    const std::uint64_t since = m.since_ns.load(std::memory_order_relaxed);
    if (since != 0 && now > since) {
      (m.busy.load(std::memory_order_relaxed) ? out.busy_ns : out.idle_ns) += now - since;
    }
    s.queues[i].read(out.queued, out.resumed, out.queued_seen);
  }
  s.injection.read(out.queued, out.resumed, out.queued_seen);
  return out;
}

void thread_pool::wake_idle_poller() noexcept { m_impl->kick_poller(); }

void thread_pool::wake_parked_poller() noexcept { m_impl->kick_parked_poller(); }

void thread_pool::shutdown() {
  impl& s = *m_impl;
  if (tl_worker.pool == &s) {
    throw std::logic_error("cuawait::thread_pool::shutdown called from one of its own workers");
  }
  const std::lock_guard guard(s.shutdown_mutex);
  if (s.joined) {
    return;
  }
  {
    const std::lock_guard lock(s.injection.mutex);
    s.stopping.store(true);
  }
  { const std::lock_guard lock(s.park_mutex); }
  s.park_cv.notify_all();
  for (std::thread& t : s.threads) {
    if (t.joinable()) {
      t.join();
    }
  }
  s.joined = true;
}

} // namespace cuawait
