// SPDX-License-Identifier: Apache-2.0
#include "cuawait/completion_reactor.hpp"

#include "cuawait/detail/cpu_relax.hpp"
#include "cuawait/detail/trampoline.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cstdlib>
#include <span>
#include <string_view>

namespace cuawait::detail {

//! The active lanes whose oldest waits share one doorbell (`wait_node::bell`). A sweep reads
//! the bell once and skips every lane of the group while it holds the value read last time
//! and nothing else marked the group: none of them can have progressed.
struct lane_group {
  std::uint64_t* bell = nullptr;
  std::uint64_t seen = 0; // the bell's value when the group was last swept
  // Sweep it whatever the bell says: a lane joined, or a lane's oldest wait changed outside a
  // sweep (a claim, a withdrawal, a stop) to one no sweep has queried since `seen` was read.
  bool dirty = true;
  std::size_t index = 0; // its place in completion_reactor::m_busy_groups while it has lanes
  std::vector<reactor_lane*> lanes;
};

//! The FIFO of waits on one lane (CUDA stream). Lanes live as long as the reactor: a
//! stream handle that is reused later keeps its lane, which is harmless because the lane
//! only orders waits.
struct reactor_lane {
  const void* key = nullptr;
  wait_node* head = nullptr;
  wait_node* tail = nullptr;
  std::size_t size = 0;
  std::uint64_t waits = 0;         // waits that suspended on it, ever (reactor_stats::lane_waits)
  std::uint64_t busy_since_ns = 0; // since when it has held a wait (while size != 0)
  bool active = false;             // in m_active, or in group->lanes
  lane_group* group = nullptr;     // while active: the group it is listed in (nullptr: m_active)
  bool claimed = false;            // an idle thread queries the head outside the lock
  // A costly head (completion_source::costly_query) is asked about by a sweep no sooner than
  // this while nothing finishes (see query_later_locked).
  std::uint64_t costly_next_ns = 0;
  // Changes (under the lock) whenever a node leaves the lane: a claimer that finds it
  // changed knows that the head it copied is gone. Read without the lock by the claimer.
  std::atomic<std::uint64_t> pops{0};
};

//! Waits ended under the reactor's lock whose coroutines are posted once it is released,
//! in order, chained through `wait_node::next` (free once a node has left its lane).
struct resume_batch {
  wait_node* head = nullptr;
  wait_node* tail = nullptr;
  void push(wait_node& w) noexcept {
    w.prev = w.next = nullptr;
    (tail != nullptr ? tail->next : head) = &w;
    tail = &w;
  }
};

} // namespace cuawait::detail

namespace cuawait {

using detail::node_state;
using detail::reactor_lane;
using detail::resume_batch;
using detail::stop_claim;
using detail::wait_node;

namespace {
std::atomic_ref<stop_claim> claim_of(wait_node& w) noexcept {
  return std::atomic_ref<stop_claim>(w.claim);
}

//! The lane the calling thread last suspended a wait on, per reactor: the thread looks
//! for that wait's completion itself when it runs out of work (a pool worker or a run loop
//! spins for its own waits), so it watches that lane first, outside the reactor's lock.
struct own_lane {
  const completion_reactor* reactor = nullptr;
  const void* key = nullptr;
  std::uint32_t misses = 0; //!< polls that found the own lane still pending
};
constinit thread_local own_lane tl_own_lane{};

//! CUAWAIT_OWN_LANE=1 / 0: the own-lane watch on / off, whatever the options say; 2: on,
//! and `own_lane_others_every` 16. -1: not set.
int own_lane_override() noexcept {
  static const int v = [] {
    const char* e = std::getenv("CUAWAIT_OWN_LANE");
    if (e == nullptr) {
      return -1;
    }
    const std::string_view s(e);
    return s == "0" ? 0 : s == "2" ? 2 : 1;
  }();
  return v;
}

//! The whole number in the environment variable `name`; -1: not set.
std::int64_t env_count(const char* name) noexcept {
  const char* e = std::getenv(name);
  return e == nullptr || *e == '\0' ? std::int64_t{-1}
                                    : static_cast<std::int64_t>(std::strtoull(e, nullptr, 10));
}

//! CUAWAIT_QUERY_PACE_NS=N overrides `reactor_options::query_pace`; -1: not set.
std::int64_t query_pace_override() noexcept {
  static const std::int64_t v = env_count("CUAWAIT_QUERY_PACE_NS");
  return v;
}

//! CUAWAIT_CLAIM_SPIN_US=N overrides `reactor_options::claim_spin` (for measuring); -1: not
//! set.
std::int64_t claim_spin_override() noexcept {
  static const std::int64_t v = env_count("CUAWAIT_CLAIM_SPIN_US");
  return v;
}

reactor_options with_overrides(reactor_options o) noexcept {
  if (own_lane_override() >= 0) {
    o.own_lane_watch = own_lane_override() != 0;
  }
  if (own_lane_override() == 2) {
    o.own_lane_others_every = 16;
  }
  if (query_pace_override() >= 0) {
    o.query_pace = std::chrono::nanoseconds(query_pace_override());
  }
  if (claim_spin_override() >= 0) {
    o.claim_spin = std::chrono::microseconds(claim_spin_override());
  }
  o.own_lane_others_every = std::max<std::uint32_t>(1, o.own_lane_others_every);
  return o;
}
} // namespace

bool completion_reactor::reactor_lock_sleeps() noexcept {
  static const bool sleeps = [] {
    const char* v = std::getenv("CUAWAIT_REACTOR_LOCK");
    return v != nullptr && std::string_view(v) == "sleep";
  }();
  return sleeps;
}

completion_reactor::completion_reactor(completion_source& source, reactor_options options)
    : m_source(&source), m_options(with_overrides(std::move(options))),
      m_unlocked_queries(source.unlocked_queries()) {
  m_last_progress_ns.store(now_ns(), std::memory_order_relaxed);
  m_load.created_ns = m_last_progress_ns.load(std::memory_order_relaxed);
  if (m_options.start_thread) {
    m_thread = std::jthread([this](std::stop_token st) { thread_main(std::move(st)); });
  }
}

completion_reactor::~completion_reactor() {
  if (m_thread.joinable()) {
    m_thread.request_stop();
    wake();
    {
      // The thread may sit between its stop check and the wait: the lock orders us after.
      const std::lock_guard lock(m_park_mutex);
      m_park_cv.notify_all();
    }
    m_thread.join();
  }
  cancel_all();
}

std::uint64_t completion_reactor::now_ns() noexcept {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now().time_since_epoch())
          .count());
}

template <class F>
void completion_reactor::for_each_active_locked(F&& f) const {
  for (const reactor_lane* lane : m_active) {
    f(*lane);
  }
  for (const detail::lane_group* g : m_busy_groups) {
    for (const reactor_lane* lane : g->lanes) {
      f(*lane);
    }
  }
}

reactor_lane& completion_reactor::lane_for(const void* key) {
  auto& slot = m_lanes[key];
  if (!slot) {
    slot = std::make_unique<reactor_lane>();
    slot->key = key;
    ++m_load.lanes_created;
  }
  return *slot;
}

bool completion_reactor::forget_lane(const void* key) noexcept {
  const std::lock_guard lock(m_mutex);
  const auto it = m_lanes.find(key);
  if (it == m_lanes.end() || it->second->head != nullptr || it->second->claimed) {
    return false;
  }
  deactivate_locked(*it->second); // emptied by a withdrawal: may still be listed
  m_lanes.erase(it);
  return true;
}

std::size_t completion_reactor::lane_count() const {
  const std::lock_guard lock(m_mutex);
  return m_lanes.size();
}

bool completion_reactor::submit(wait_node& w) noexcept {
  bool submit_failed_all = false;
  // A costly query (a driver call) is made before the lock, so that submissions and sweeps
  // of other threads do not wait for it; its answer counts only if `w` becomes its lane's
  // oldest wait (only the oldest may be asked).
  const bool asked_early = m_unlocked_queries && m_source->costly_query(w);
  completion_status early{};
  if (asked_early) {
    m_counters.queries.fetch_add(1, std::memory_order_relaxed);
    early = m_source->query(w);
  }
  do {
    const std::lock_guard lock(m_mutex);
    reactor_lane* lane = nullptr;
    try {
      lane = &lane_for(w.lane_key);
    } catch (...) {
      // Out of memory for a new lane: behave as if the work failed rather than hang.
      w.status = {completion_state::failed, 2 /* cudaErrorMemoryAllocation */};
      return false;
    }
    const bool new_head = lane->head == nullptr;
    if (new_head) {
      // Only the oldest of a lane may be asked; this one is, so an already finished
      // operation costs one query and no suspension.
      if (!asked_early) {
        m_counters.queries.fetch_add(1, std::memory_order_relaxed);
      }
      const completion_status st = asked_early ? early : m_source->query(w);
      if (st.state != completion_state::pending) {
        w.status = st;
        w.resolved_ns = 0;
        m_source->retire(w);
        m_counters.ready.fetch_add(1, std::memory_order_relaxed);
        if (st.state == completion_state::context_lost) {
          // Other streams may never report the loss themselves (on the H200 a wait on
          // another stream later resolved as done), so every pending wait fails now; inline waiters
          // are resumed by the polling thread, woken below.
          fail_all_locked(completion_state::context_lost, st.error);
          submit_failed_all = true;
        }
        if (!submit_failed_all) {
          return false;
        }
        break;
      }
    }
    const std::uint64_t now = now_ns();
    w.submitted_ns = now;
    w.lane = lane;
    w.prev = lane->tail;
    w.next = nullptr;
    if (lane->tail != nullptr) {
      lane->tail->next = &w;
    } else {
      lane->head = &w;
    }
    lane->tail = &w;
    if (lane->size++ == 0) {
      lane->busy_since_ns = now;
      m_load.peak_busy_lanes = std::max(m_load.peak_busy_lanes, ++m_load.busy_lanes);
    }
    ++lane->waits;
    w.state = node_state::waiting;
    // The new head was queried above, under this lock, after every bell value a sweep has
    // kept: work that finishes from now on rings its bell anew, so its group needs no mark.
    if (!lane->active) {
      activate_locked(*lane, false);
    } else if (new_head && listed_bell(*lane) != w.bell) {
      deactivate_locked(*lane); // emptied by a withdrawal, listed where its new head is not
      activate_locked(*lane, false);
    }
    m_last_progress_ns.store(now, std::memory_order_relaxed);
    if (m_spin_lapsed.load(std::memory_order_relaxed)) {
      m_spin_lapsed.store(false, std::memory_order_relaxed); // progress: spinning again
    }
    const std::size_t pending = m_pending_count.fetch_add(1, std::memory_order_relaxed) + 1;
    if (pending == 1) {
      m_load.busy_since_ns = now;
    }
    m_load.peak_pending = std::max(m_load.peak_pending, pending);
    m_counters.submitted.fetch_add(1, std::memory_order_relaxed);
    tl_own_lane = {this, w.lane_key};
  } while (false);
  wake();
  return !submit_failed_all;
}

namespace {
//! `now - since`, or 0 for a clock read made before `since` (times come from several
//! threads' clock reads taken before the lock).
std::uint64_t elapsed(std::uint64_t now, std::uint64_t since) noexcept {
  return now > since ? now - since : 0;
}
} // namespace

void completion_reactor::unlink_locked(wait_node& w, std::uint64_t now) noexcept {
  m_load.pending_wait_ns += elapsed(now, w.submitted_ns);
  reactor_lane& lane = *w.lane;
  if (w.prev == nullptr && lane.group != nullptr) {
    // A new oldest wait, perhaps finished already with its bell's ring taken by an earlier
    // sweep: the group is swept next time (a sweep clears the mark once it has queried it).
    lane.group->dirty = true;
  }
  (w.prev != nullptr ? w.prev->next : lane.head) = w.next;
  (w.next != nullptr ? w.next->prev : lane.tail) = w.prev;
  w.prev = w.next = nullptr;
  w.lane = nullptr;
  if (--lane.size == 0) {
    --m_load.busy_lanes;
    m_load.busy_lane_ns += elapsed(now, lane.busy_since_ns);
  }
  lane.pops.fetch_add(1, std::memory_order_release);
  if (m_pending_count.fetch_sub(1, std::memory_order_relaxed) == 1) {
    m_load.busy_ns += elapsed(now, m_load.busy_since_ns);
  }
}

bool completion_reactor::withdraw(wait_node& w) noexcept {
  const std::lock_guard lock(m_mutex);
  // The awaiter deregistered its stop callback first, so a stop request that claimed `w`
  // has queued it by now; the list must not keep a node that is about to be freed.
  if (w.arrival != nullptr && claim_of(w).load(std::memory_order_relaxed) == stop_claim::queued) {
    unqueue_stop_locked(w);
  }
  switch (w.state) {
  case node_state::waiting:
    unlink_locked(w, now_ns());
    m_source->retire(w);
    break;
  case node_state::stopped: // unlinked and retired when it left its lane
    --m_stopped_unresumed;
    break;
  case node_state::ready_inline:
    (w.prev != nullptr ? w.prev->next : m_ready_head) = w.next;
    (w.next != nullptr ? w.next->prev : m_ready_tail) = w.prev;
    w.prev = w.next = nullptr;
    break;
  default:
    return false;
  }
  w.state = node_state::idle;
  m_counters.withdrawn.fetch_add(1, std::memory_order_relaxed);
  if (m_trace.on_withdraw != nullptr) {
    m_trace.on_withdraw(m_trace.context, w);
  }
  return true;
}

bool completion_reactor::cancel(wait_node& w) noexcept {
  const std::lock_guard lock(m_mutex);
  if (w.state != node_state::waiting || !claim_locked(w)) {
    return false; // resolved (and handed over, or about to be), stopped, or never submitted
  }
  settle_locked(w, {completion_state::cancelled, 0}, now_ns());
  w.state = node_state::resolved;
  m_counters.stopped.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void completion_reactor::settle_locked(wait_node& w, completion_status st,
                                       std::uint64_t now) noexcept {
  unlink_locked(w, now);
  w.status = st;
  w.resolved_ns = now;
  m_source->retire(w);
  if (m_trace.on_complete != nullptr) {
    m_trace.on_complete(m_trace.context, w);
  }
}

bool completion_reactor::claim_locked(wait_node& w) noexcept {
  if (w.arrival == nullptr) {
    return true; // no stop callback: nobody else can claim it
  }
  stop_claim expected = stop_claim::open;
  return claim_of(w).compare_exchange_strong(
             expected, stop_claim::reactor, std::memory_order_acq_rel, std::memory_order_acquire) ||
         expected == stop_claim::reactor;
}

void completion_reactor::resolve_locked(wait_node& w, completion_status st,
                                        resume_batch* batch) noexcept {
  if (!claim_locked(w)) {
    // A stop request claimed it first (and queues it, if it has not yet): it leaves its
    // lane now, so that the lane moves on, and the pass over the stop list resumes it.
    settle_locked(w, {completion_state::cancelled, detail::stopped_by_request}, now_ns());
    w.state = node_state::stopped;
    ++m_stopped_unresumed;
    return;
  }
  settle_locked(w, st, now_ns());
  switch (st.state) {
  case completion_state::cancelled:
    m_counters.cancelled.fetch_add(1, std::memory_order_relaxed);
    break;
  case completion_state::done:
    m_counters.completions.fetch_add(1, std::memory_order_relaxed);
    break;
  default:
    m_counters.completions.fetch_add(1, std::memory_order_relaxed);
    m_counters.failures.fetch_add(1, std::memory_order_relaxed);
    break;
  }
  hand_over_locked(w, batch);
}

void completion_reactor::hand_over_locked(wait_node& w, resume_batch* batch) noexcept {
  if (w.arrival != nullptr) {
    // A cancellable wait: its await_suspend may still be registering the stop callback.
    // Resolved first (a stop callback then finds it claimed); if await_suspend has not
    // arrived yet, it sees this arrival and does not suspend, and `w` may be gone.
    w.state = node_state::resolved;
    if (!w.arrival->exchange(true, std::memory_order_acq_rel)) {
      return;
    }
  }
  if (w.exec != nullptr) {
    // Handed over under the lock, so that a concurrent withdraw() either wins (never
    // resumed) or finds the node handed over. Posted now, or with the batch once the lock
    // is released; after the post the node may be gone.
    w.state = node_state::resolved;
    if (batch != nullptr) {
      batch->push(w);
    } else {
      w.exec->post_near(w.handle, w.prio, w.home);
    }
    return;
  }
  w.state = node_state::ready_inline;
  w.prev = m_ready_tail;
  w.next = nullptr;
  (m_ready_tail != nullptr ? m_ready_tail->next : m_ready_head) = &w;
  m_ready_tail = &w;
  m_has_ready.store(true, std::memory_order_relaxed);
}

void completion_reactor::fail_all_locked(completion_state why, int error,
                                         resume_batch* batch) noexcept {
  const auto fail_lanes = [&](std::vector<reactor_lane*>& lanes) {
    for (reactor_lane* lane : lanes) {
      while (lane->head != nullptr) {
        resolve_locked(*lane->head, {why, error}, batch);
      }
      lane->active = false;
      lane->group = nullptr;
    }
    lanes.clear();
  };
  fail_lanes(m_active);
  for (detail::lane_group* g : m_busy_groups) {
    fail_lanes(g->lanes);
  }
  m_busy_groups.clear();
  m_active_lanes.store(0, std::memory_order_relaxed);
}

void completion_reactor::request_stop(wait_node& w) noexcept {
  stop_claim expected = stop_claim::open;
  if (!claim_of(w).compare_exchange_strong(expected, stop_claim::queued, std::memory_order_acq_rel,
                                           std::memory_order_relaxed)) {
    return; // the reactor claimed it first: it resumes the coroutine with the work's outcome
  }
  wait_node* head = m_stop_head.load(std::memory_order_relaxed);
  do {
    w.stop_next = head;
  } while (!m_stop_head.compare_exchange_weak(head, &w, std::memory_order_release,
                                              std::memory_order_relaxed));
  // `w` may be gone from here on: a poller may end it and its coroutine run to its end.
  if (head != nullptr) {
    return; // whoever found the list empty has woken the pollers, or is ending it
  }
  if (m_thread.joinable() || m_idle_waker != nullptr) {
    // Counts as progress, so that spinning pollers go on spinning until they have it.
    m_last_progress_ns.store(now_ns(), std::memory_order_relaxed);
    wake();
  } else {
    (void)end_stops(); // nobody polls on their own: end it here, as a poll would
  }
}

std::size_t completion_reactor::take_stops_locked(resume_batch& batch) noexcept {
  if (m_stop_head.load(std::memory_order_relaxed) == nullptr) {
    return 0; // the common case, read-only: pollers call this on every poll
  }
  wait_node* lifo = m_stop_head.exchange(nullptr, std::memory_order_acquire);
  wait_node* fifo = nullptr; // resumed in the order they were stopped
  while (lifo != nullptr) {
    wait_node* const next = lifo->stop_next;
    lifo->stop_next = fifo;
    fifo = lifo;
    lifo = next;
  }
  const std::uint64_t now = now_ns();
  std::size_t n = 0;
  for (wait_node* w = fifo; w != nullptr; ++n) {
    wait_node* const next = w->stop_next;
    w->stop_next = nullptr;
    claim_of(*w).store(stop_claim::taken, std::memory_order_relaxed);
    if (w->state == node_state::waiting) {
      settle_locked(*w, {completion_state::cancelled, detail::stopped_by_request}, now);
    } else { // node_state::stopped: left its lane when the work finished (resolve_locked)
      --m_stopped_unresumed;
    }
    hand_over_locked(*w, &batch);
    w = next;
  }
  m_counters.stopped.fetch_add(n, std::memory_order_relaxed);
  m_last_progress_ns.store(now, std::memory_order_relaxed);
  m_spin_lapsed.store(false, std::memory_order_relaxed);
  return n;
}

void completion_reactor::unqueue_stop_locked(wait_node& w) noexcept {
  // Take the whole list, drop `w`, put the rest back in front of what was pushed since.
  wait_node* node = m_stop_head.exchange(nullptr, std::memory_order_acquire);
  wait_node* rest = nullptr;
  wait_node* rest_tail = nullptr;
  while (node != nullptr) {
    wait_node* const next = node->stop_next;
    if (node != &w) {
      node->stop_next = nullptr;
      (rest_tail != nullptr ? rest_tail->stop_next : rest) = node;
      rest_tail = node;
    }
    node = next;
  }
  w.stop_next = nullptr;
  claim_of(w).store(stop_claim::taken, std::memory_order_relaxed);
  if (rest == nullptr) {
    return;
  }
  // Whoever pushed the first of `rest` on an empty list has woken the pollers or is
  // waiting for this lock to end the list: the nodes put back are not forgotten.
  wait_node* head = m_stop_head.load(std::memory_order_relaxed);
  do {
    rest_tail->stop_next = head;
  } while (!m_stop_head.compare_exchange_weak(head, rest, std::memory_order_release,
                                              std::memory_order_relaxed));
}

void completion_reactor::post_batch(resume_batch& batch) noexcept {
  if (batch.head == nullptr) {
    return; // the common case: nothing was stopped (and no bulk end)
  }
  std::array<std::coroutine_handle<>, 64> handles;
  std::size_t k = 0;
  executor* ex = nullptr;
  priority prio = priority::normal;
  for (wait_node* w = batch.head; w != nullptr;) {
    wait_node* const next = w->next; // `w` may be gone once it is posted
    if (k != 0 && (k == handles.size() || w->exec != ex || w->prio != prio)) {
      ex->post_bulk(std::span(handles.data(), k), prio);
      k = 0;
    }
    ex = w->exec;
    prio = w->prio;
    handles[k++] = w->handle;
    w = next;
  }
  if (k != 0) {
    ex->post_bulk(std::span(handles.data(), k), prio);
  }
  batch = {};
}

std::size_t completion_reactor::end_stops() noexcept {
  resume_batch batch;
  std::size_t n = 0;
  bool inline_ready = false;
  {
    const std::lock_guard lock(m_mutex);
    n = take_stops_locked(batch);
    inline_ready = m_ready_head != nullptr;
  }
  post_batch(batch);
  if (inline_ready) {
    try {
      run_ready_inline();
    } catch (...) { // nothing escapes detail::resume; keeps noexcept honest
    }
  }
  return n;
}

completion_reactor::head_outcome
completion_reactor::resolve_head_locked(reactor_lane& lane, bool probe,
                                        sweep_tally& tally) noexcept {
  if (query_later_locked(lane, probe)) {
    return head_outcome::pending; // asked about after the lock
  }
  ++tally.queries;
  const completion_status st = probe ? m_source->probe(*lane.head) : m_source->query(*lane.head);
  if (st.state == completion_state::pending) {
    return head_outcome::pending;
  }
  if (st.state == completion_state::context_lost) {
    tally.lost = st;
    return head_outcome::lost;
  }
  resolve_locked(*lane.head, st);
  ++tally.resolved;
  return head_outcome::resolved;
}

bool completion_reactor::relist_locked(std::vector<reactor_lane*>& lanes, detail::lane_group* group,
                                       std::size_t i) noexcept {
  reactor_lane& lane = *lanes[i];
  if (lane.head == nullptr) {
    remove_listed_locked(lanes, group, i); // the last lane takes place i
    return false;
  }
  if (group != nullptr && lane.head->bell != group->bell) {
    // Its oldest wait rings another bell (or none): listed where that one is, or this group
    // would be skipped while the wait finishes.
    remove_listed_locked(lanes, group, i);
    activate_locked(lane, true);
    return false;
  }
  if (group == nullptr && lane.head->bell != nullptr && join_group_locked(lane, lane.head->bell)) {
    // Into the group of its oldest wait's bell (out of memory it stays here, always swept);
    // still active, so only taken off m_active.
    lane.group->dirty = true;
    lanes[i] = lanes.back();
    lanes.pop_back();
    return false;
  }
  return true;
}

bool completion_reactor::drain_lane_locked(reactor_lane& lane, bool probe,
                                           sweep_tally& tally) noexcept {
  head_outcome more = head_outcome::resolved;
  while (lane.head != nullptr && more == head_outcome::resolved) {
    more = resolve_head_locked(lane, probe, tally);
  }
  return more != head_outcome::lost;
}

bool completion_reactor::defer_lane_locked(std::size_t i) noexcept {
  try {
    m_hot.push_back(i);
    return true;
  } catch (...) {
    return false; // out of memory: the caller drains the lane now, stream by stream
  }
}

bool completion_reactor::sweep_lanes_locked(std::vector<reactor_lane*>& lanes,
                                            detail::lane_group* group, bool probe,
                                            sweep_tally& tally) noexcept {
  // Round by round: each lane's oldest wait first, then the next of the lanes whose oldest
  // finished, and so on. The waits resume about in the order the GPU finished them (not one
  // stream's whole backlog before the next stream's first), and their nodes are visited in
  // the order they were submitted, which is kinder to the caches than stream by stream.
  m_hot.clear();
  for (std::size_t i = 0; i < lanes.size();) {
    reactor_lane& lane = *lanes[i];
    // (A lane emptied by a withdrawal has no head: only dropped. A costly head is asked
    // about after the lock.)
    if (lane.head != nullptr && !query_later_locked(lane, probe)) {
      ++tally.queries;
      const completion_status st =
          probe ? m_source->probe(*lane.head) : m_source->query(*lane.head);
      if (st.state == completion_state::context_lost) {
        tally.lost = st;
        return false;
      }
      if (st.state != completion_state::pending) {
        resolve_locked(*lane.head, st);
        ++tally.resolved;
        if (lane.head != nullptr) {
          if (defer_lane_locked(i)) {
            ++i; // lanes before i keep their places until the sweep's end
            continue;
          }
          if (!drain_lane_locked(lane, probe, tally)) {
            return false;
          }
        }
      }
    }
    // The common case inline: a lane still waiting, listed where its oldest wait's bell is.
    const bool stays = lane.head != nullptr && lane.head->bell == listed_bell(lane);
    if (stays || relist_locked(lanes, group, i)) {
      ++i;
    }
  }
  if (m_hot.empty()) {
    return true;
  }
  if (!resolve_rounds_locked(lanes, probe, tally)) {
    return false;
  }
  // Highest place first: a removal moves the last lane into the place, and every lane after
  // it has been relisted already.
  for (std::size_t k = m_hot.size(); k-- != 0;) {
    (void)relist_locked(lanes, group, m_hot[k]);
  }
  return true;
}

bool completion_reactor::resolve_rounds_locked(std::vector<reactor_lane*>& lanes, bool probe,
                                               sweep_tally& tally) noexcept {
  try {
    m_round.assign(m_hot.begin(), m_hot.end());
  } catch (...) { // out of memory: lane by lane
    for (const std::size_t i : m_hot) {
      if (!drain_lane_locked(*lanes[i], probe, tally)) {
        return false;
      }
    }
    return true;
  }
  while (!m_round.empty()) {
    std::size_t kept = 0;
    for (const std::size_t i : m_round) {
      reactor_lane& lane = *lanes[i];
      const head_outcome r = resolve_head_locked(lane, probe, tally);
      if (r == head_outcome::lost) {
        return false;
      }
      if (r == head_outcome::resolved && lane.head != nullptr) {
        m_round[kept++] = i;
      }
    }
    m_round.resize(kept);
  }
  return true;
}

std::size_t completion_reactor::sweep_locked(bool probe) noexcept {
  sweep_tally tally;
  bool alive = sweep_lanes_locked(m_active, nullptr, probe, tally);
  for (std::size_t g = 0; alive && g < m_busy_groups.size();) {
    detail::lane_group& group = *m_busy_groups[g];
    const std::uint64_t rung =
        std::atomic_ref<std::uint64_t>(*group.bell)
            .load(std::memory_order_acquire); // before the lanes' words: their writes came first
    if (!probe && !group.dirty && rung == group.seen) {
      ++g; // nothing of this group finished since its last sweep
      continue;
    }
    group.seen = rung;
    alive = sweep_lanes_locked(group.lanes, &group, probe, tally);
    group.dirty = false; // every oldest wait of it was queried after `rung` was read
    if (g < m_busy_groups.size() && m_busy_groups[g] == &group) {
      ++g; // (an emptied group left, and the last one took its place)
    }
  }
  if (!alive) {
    // A sticky error: nothing on any lane can finish any more, so nothing may hang.
    tally.resolved += m_pending_count.load(std::memory_order_relaxed);
    fail_all_locked(completion_state::context_lost, tally.lost.error);
  }
  m_counters.queries.fetch_add(tally.queries, std::memory_order_relaxed);
  m_counters.sweeps.fetch_add(1, std::memory_order_relaxed);
  return tally.resolved;
}

std::uint64_t* completion_reactor::listed_bell(const reactor_lane& lane) noexcept {
  return lane.group != nullptr ? lane.group->bell : nullptr;
}

bool completion_reactor::join_group_locked(reactor_lane& lane, std::uint64_t* bell) noexcept {
  try {
    auto& slot = m_groups[bell];
    if (!slot) {
      slot = std::make_unique<detail::lane_group>();
      slot->bell = bell;
    }
    detail::lane_group& g = *slot;
    g.lanes.push_back(&lane);
    if (g.lanes.size() == 1) {
      try {
        m_busy_groups.push_back(&g);
      } catch (...) {
        g.lanes.pop_back();
        throw;
      }
      g.index = m_busy_groups.size() - 1;
    }
    lane.group = &g;
    return true;
  } catch (...) {
    return false; // out of memory: the caller lists the lane in m_active, always swept
  }
}

void completion_reactor::activate_locked(reactor_lane& lane, bool mark) noexcept {
  std::uint64_t* const bell = lane.head != nullptr ? lane.head->bell : nullptr;
  if (bell != nullptr && join_group_locked(lane, bell)) {
    lane.group->dirty = lane.group->dirty || mark;
  } else {
    lane.group = nullptr;
    m_active.push_back(&lane);
  }
  lane.active = true;
  // Written under the lock only: a load and a store, no read-modify-write.
  m_active_lanes.store(m_active_lanes.load(std::memory_order_relaxed) + 1,
                       std::memory_order_relaxed);
}

void completion_reactor::remove_listed_locked(std::vector<reactor_lane*>& lanes,
                                              detail::lane_group* group, std::size_t i) noexcept {
  reactor_lane& lane = *lanes[i];
  lanes[i] = lanes.back();
  lanes.pop_back();
  lane.active = false;
  lane.group = nullptr;
  m_active_lanes.store(m_active_lanes.load(std::memory_order_relaxed) - 1,
                       std::memory_order_relaxed);
  if (group != nullptr && lanes.empty()) {
    // Out of the groups a sweep reads; the last one takes its place.
    detail::lane_group* const last = m_busy_groups.back();
    m_busy_groups[group->index] = last;
    last->index = group->index;
    m_busy_groups.pop_back();
  }
}

std::size_t completion_reactor::run_ready_inline() {
  std::size_t n = 0;
  for (;;) {
    std::coroutine_handle<> h;
    {
      const std::lock_guard lock(m_mutex);
      if (n != 0) {
        --m_resuming; // the previous resumption has returned
      }
      wait_node* w = m_ready_head;
      if (w == nullptr) {
        m_has_ready.store(false, std::memory_order_relaxed);
        return n;
      }
      m_ready_head = w->next;
      (m_ready_head != nullptr ? m_ready_head->prev : m_ready_tail) = nullptr;
      w->prev = w->next = nullptr;
      w->state = node_state::resolved;
      h = w->handle;
      ++m_resuming;
    }
    detail::resume(h); // after this, the node may be gone
    ++n;
  }
}

std::size_t completion_reactor::poll() {
  const std::size_t companions = poll_companions();
  return companions + poll_waits();
}

std::size_t completion_reactor::poll_companions() noexcept {
  if (m_companion_count.load(std::memory_order_relaxed) == 0 || !m_companion_mutex.try_lock()) {
    return 0; // none, or another thread polls them now
  }
  std::size_t n = 0;
  for (reactor_companion* c : m_companions) {
    n += c->companion_poll();
  }
  m_companion_mutex.unlock();
  if (n != 0) {
    m_last_progress_ns.store(now_ns(), std::memory_order_relaxed);
    m_spin_lapsed.store(false, std::memory_order_relaxed);
  }
  return n;
}

void completion_reactor::attach(reactor_companion& c) {
  const std::lock_guard lock(m_companion_mutex);
  m_companions.push_back(&c);
  m_companion_count.store(m_companions.size(), std::memory_order_relaxed);
}

void completion_reactor::detach(reactor_companion& c) noexcept {
  const std::lock_guard lock(m_companion_mutex); // waits for a poll of it in progress
  std::erase(m_companions, &c);
  m_companion_count.store(m_companions.size(), std::memory_order_relaxed);
}

void completion_reactor::companion_work(std::ptrdiff_t delta) noexcept {
  m_companion_work.fetch_add(delta, std::memory_order_relaxed);
  if (delta > 0) {
    m_last_progress_ns.store(now_ns(), std::memory_order_relaxed);
    wake();
  }
}

std::size_t completion_reactor::poll_waits() {
  std::size_t n = 0;
  bool deferred = false; // this sweep left costly queries for after the lock
  resume_batch stops;
  {
    const std::lock_guard lock(m_mutex);
    // First (the sweep skips them); read-only when nothing was stopped.
    const std::size_t stopped =
        m_stop_head.load(std::memory_order_relaxed) != nullptr ? take_stops_locked(stops) : 0;
    const std::uint64_t now = now_ns();
    const auto probe_after = static_cast<std::uint64_t>(m_options.stall_probe.count());
    const bool stalled =
        elapsed(now, m_last_progress_ns.load(std::memory_order_relaxed)) >= probe_after;
    const bool probe =
        m_active_lanes.load(std::memory_order_relaxed) != 0 && stalled && now >= m_next_probe_ns;
    m_sweep_stalled = stalled;
    m_sweep_now_ns = now;
    m_sweep_deferred = false;
    n = sweep_locked(probe);
    deferred = m_sweep_deferred;
    if (probe) {
      // A probe is a driver call per lane (about 0.3 us each): over thousands of stalled
      // lanes one takes longer than `stall_probe`, and probing again at once would spend the
      // poller's whole time in driver calls. The next one waits `stall_probe` or nine times
      // this one's cost, whichever is longer: probes take at most a tenth of the time.
      const std::uint64_t end = now_ns();
      m_next_probe_ns = end + std::max<std::uint64_t>(probe_after, 9 * (end - now));
    }
    if (n != 0) {
      // Found after the pollers were told to stop spinning: by a poll after a park. (A
      // poller that was merely descheduled polls before it asks whether to spin on.)
      if (m_spin_lapsed.load(std::memory_order_relaxed)) {
        m_spin_lapsed.store(false, std::memory_order_relaxed);
        m_counters.after_spin.fetch_add(n, std::memory_order_relaxed);
      }
      m_last_progress_ns.store(now, std::memory_order_relaxed);
    }
    n += stopped;
  }
  if (deferred) {
    n += query_deferred();
  }
  post_batch(stops);
  run_ready_inline();
  return n;
}

wait_node completion_reactor::awaiter_fields(const wait_node& w) noexcept {
  wait_node copy;
  copy.lane_key = w.lane_key;
  copy.token = w.token;
  copy.source_data = w.source_data;
  copy.operation = w.operation;
  return copy;
}

std::vector<completion_reactor::deferred_query>& completion_reactor::deferred_queries() noexcept {
  thread_local std::vector<deferred_query> list;
  return list;
}

bool completion_reactor::query_later_locked(reactor_lane& lane, bool probe) noexcept {
  if (probe || !m_unlocked_queries || !m_source->costly_query(*lane.head)) {
    return false;
  }
  if (lane.claimed) {
    return true; // another thread asks about it now (or this sweep already does)
  }
  if (m_sweep_stalled) {
    // Nothing has finished for `stall_probe`: a stalled costly lane is asked about once per
    // 1/50 of it (20 us by default), not at every poll, so that a thread polling over stalled
    // event markers does not make a driver call per lane per poll. (Its own-lane watcher and
    // the probe sweeps still ask.)
    if (m_sweep_now_ns < lane.costly_next_ns) {
      return true;
    }
    lane.costly_next_ns =
        m_sweep_now_ns + static_cast<std::uint64_t>(m_options.stall_probe.count()) / 50;
  }
  try {
    deferred_queries().push_back({&lane, awaiter_fields(*lane.head),
                                  lane.pops.load(std::memory_order_relaxed), completion_status{}});
  } catch (...) {
    return false; // out of memory: asked about now, under the lock
  }
  lane.claimed = true; // kept (not forgotten, not claimed twice) until query_deferred
  m_claimed.fetch_add(1, std::memory_order_relaxed);
  m_sweep_deferred = true;
  return true;
}

std::size_t completion_reactor::query_deferred() noexcept {
  std::vector<deferred_query>& list = deferred_queries(); // not empty: a sweep claimed
  for (deferred_query& d : list) {
    d.status = m_source->query(d.copy);
  }
  m_counters.queries.fetch_add(list.size(), std::memory_order_relaxed);
  std::size_t n = 0;
  {
    const std::lock_guard lock(m_mutex);
    for (const deferred_query& d : list) {
      reactor_lane& lane = *d.lane;
      lane.claimed = false;
      m_claimed.fetch_sub(1, std::memory_order_relaxed);
      if (d.status.state == completion_state::pending || lane.head == nullptr ||
          lane.pops.load(std::memory_order_relaxed) != d.pops) {
        continue; // still running, or no longer the head it was asked about
      }
      if (d.status.state == completion_state::context_lost) {
        n += m_pending_count.load(std::memory_order_relaxed);
        fail_all_locked(completion_state::context_lost, d.status.error);
        continue; // the other lanes are empty now: their claims only end
      }
      resolve_locked(*lane.head, d.status);
      ++n;
      if (lane.head == nullptr) {
        deactivate_locked(lane);
      }
    }
    if (n != 0) {
      m_last_progress_ns.store(now_ns(), std::memory_order_relaxed);
      m_spin_lapsed.store(false, std::memory_order_relaxed);
    }
  }
  list.clear();
  return n;
}

void completion_reactor::drain() {
  for (;;) {
    {
      const std::lock_guard lock(m_mutex);
      if (m_pending_count.load(std::memory_order_relaxed) == 0 && m_ready_head == nullptr &&
          m_resuming == 0 && m_stopped_unresumed == 0 &&
          m_stop_head.load(std::memory_order_relaxed) == nullptr) {
        return;
      }
    }
    if (m_thread.joinable()) {
      // The reactor thread resolves and resumes; only wait for it.
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    } else if (poll() == 0) {
      detail::cpu_relax();
    }
  }
}

std::size_t completion_reactor::cancel_all() {
  std::size_t n = 0;
  resume_batch batch;
  {
    const std::lock_guard lock(m_mutex);
    (void)take_stops_locked(batch); // stop requests already made end as such
    n = m_pending_count.load(std::memory_order_relaxed);
    fail_all_locked(completion_state::cancelled, 0, &batch);
  }
  post_batch(batch);
  run_ready_inline();
  return n;
}

std::size_t completion_reactor::stop_all() {
  std::size_t n = 0;
  resume_batch batch;
  {
    const std::lock_guard lock(m_mutex);
    n = take_stops_locked(batch);
    n += m_pending_count.load(std::memory_order_relaxed);
    fail_all_locked(completion_state::cancelled, detail::stopped_by_request, &batch);
  }
  post_batch(batch);
  run_ready_inline();
  return n;
}

void completion_reactor::wake() noexcept {
  if (m_idle_waker != nullptr) {
    m_idle_waker(m_idle_waker_context);
  }
  if (!m_thread.joinable()) {
    return;
  }
  m_wake_seq.fetch_add(1);
  if (m_parked.load()) {
    const std::lock_guard lock(m_park_mutex);
    m_park_cv.notify_one();
  }
}

void completion_reactor::set_idle_waker(void (*fn)(void*) noexcept, void* context) noexcept {
  m_idle_waker_context = context;
  m_idle_waker = fn;
}

void completion_reactor::deactivate_locked(reactor_lane& lane) noexcept {
  if (!lane.active) {
    return;
  }
  auto& lanes = lane.group != nullptr ? lane.group->lanes : m_active;
  const auto at = std::find(lanes.begin(), lanes.end(), &lane);
  if (at != lanes.end()) {
    remove_listed_locked(lanes, lane.group, static_cast<std::size_t>(at - lanes.begin()));
  }
}

// Idle polling outside the lock: claim one lane whose oldest wait nobody else queries (the
// calling thread's own lane, `own_key`, or the next one round the active lanes), query a copy
// of that wait outside the lock until it finishes, the lane changes, `claim_spin` passes or
// work arrives for the calling thread; then resolve it under the lock if it is still the
// lane's oldest. `own_busy`: set to whether lane `own_key` still holds waits.
std::size_t completion_reactor::poll_claimed_lane(const void* own_key, bool* own_busy) noexcept {
  if (m_claimed.load(std::memory_order_relaxed) >=
      std::min(m_pending_count.load(std::memory_order_relaxed),
               m_active_lanes.load(std::memory_order_relaxed))) {
    // Every lane with a pending wait is being queried already (many waits may share one
    // lane: one event awaited by thousands of coroutines is one query).
    return m_has_ready.load(std::memory_order_relaxed) ? run_ready_inline() : 0;
  }
  reactor_lane* lane = nullptr;
  wait_node copy;
  std::uint64_t pops = 0;
  {
    const std::lock_guard lock(m_mutex);
    if (own_key != nullptr) {
      const auto it = m_lanes.find(own_key);
      reactor_lane* l = it != m_lanes.end() ? it->second.get() : nullptr;
      *own_busy = l != nullptr && l->head != nullptr;
      if (*own_busy && l->active && !l->claimed) {
        lane = l;
      }
    } else {
      for (std::size_t tries = m_active.size(); tries > 0 && !m_active.empty(); --tries) {
        const std::size_t i = m_claim_cursor++ % m_active.size();
        reactor_lane* l = m_active[i];
        if (l->claimed) {
          continue;
        }
        if (l->head == nullptr) { // emptied by a withdrawal
          remove_listed_locked(m_active, nullptr, i);
          continue;
        }
        lane = l;
        break;
      }
    }
    if (lane != nullptr) {
      lane->claimed = true;
      m_claimed.fetch_add(1, std::memory_order_relaxed);
      copy = awaiter_fields(*lane->head);
      pops = lane->pops.load(std::memory_order_relaxed);
    }
  }
  if (lane == nullptr) {
    return m_has_ready.load(std::memory_order_relaxed) ? run_ready_inline() : 0;
  }
  const std::uint64_t start = now_ns();
  const auto budget = static_cast<std::uint64_t>(m_options.claim_spin.count());
  const auto pace = static_cast<std::uint64_t>(m_options.query_pace.count());
  completion_status st{};
  std::uint64_t queries = 0;
  for (;;) {
    st = m_source->query(copy);
    ++queries;
    if (st.state != completion_state::pending ||
        lane->pops.load(std::memory_order_acquire) != pops || now_ns() - start >= budget ||
        detail::idle_interrupted()) {
      break;
    }
    detail::cpu_relax();
    if (pace != 0) { // the next query of this claim no sooner than `query_pace` after this one
      const std::uint64_t asked = now_ns();
      while (now_ns() - asked < pace && !detail::idle_interrupted()) {
        detail::cpu_relax();
      }
    }
  }
  m_counters.queries.fetch_add(queries, std::memory_order_relaxed);
  std::size_t n = 0;
  {
    const std::lock_guard lock(m_mutex);
    lane->claimed = false;
    m_claimed.fetch_sub(1, std::memory_order_relaxed);
    if (st.state != completion_state::pending && lane->head != nullptr &&
        lane->pops.load(std::memory_order_relaxed) == pops) {
      if (st.state == completion_state::context_lost) {
        n = m_pending_count.load(std::memory_order_relaxed);
        fail_all_locked(completion_state::context_lost, st.error);
      } else {
        resolve_locked(*lane->head, st);
        n = 1;
        if (lane->head == nullptr) {
          deactivate_locked(*lane);
        }
      }
      m_last_progress_ns.store(now_ns(), std::memory_order_relaxed);
      m_spin_lapsed.store(false, std::memory_order_relaxed);
    }
  }
  if (m_has_ready.load(std::memory_order_relaxed)) {
    run_ready_inline();
  }
  return n;
}

std::size_t completion_reactor::poll_idle() noexcept {
  bool waits = false;
  const std::size_t stopped = poll_stops_and_companions(waits);
  if (!waits) {
    return stopped;
  }
  // While work finishes or starts, idle threads query lanes outside the lock; once nothing
  // has for `stall_probe`, one thread at a time sweeps (and probes for errors) instead.
  const auto probe_after = static_cast<std::uint64_t>(m_options.stall_probe.count());
  const bool recent = now_ns() - m_last_progress_ns.load(std::memory_order_relaxed) < probe_after;
  if (recent && tl_own_lane.reactor == this && detail::idle_poller_waits_once() &&
      m_source->unlocked_queries() && m_options.own_lane_watch) {
    // One coroutine of this thread waits (on the lane of its last wait): watch that lane
    // first, like a thread that waits for its own stream, with no lock held meanwhile.
    bool busy = false;
    const std::size_t n = poll_claimed_lane(tl_own_lane.key, &busy);
    if (n != 0) {
      return stopped + n;
    }
    if (!busy) {
      tl_own_lane = {}; // nothing of this thread's to watch there any more
    } else if (++tl_own_lane.misses % m_options.own_lane_others_every != 0) {
      return stopped; // its own wait is still pending: the other lanes only now and then
    }
    // Still pending: look at the other lanes once before watching it again, so that waits
    // whose own threads are busy elsewhere are found too.
  }
  if (recent && m_source->parallel_queries()) {
    return stopped + poll_claimed_lane(nullptr, nullptr);
  }
  return stopped + sweep_unless_polled();
}

std::size_t completion_reactor::sweep_unless_polled() noexcept {
  if (m_idle_polling.load(std::memory_order_relaxed) ||
      m_idle_polling.exchange(true, std::memory_order_acquire)) {
    return 0; // another thread polls now
  }
  std::size_t n = 0;
  try {
    n = poll_waits();
  } catch (...) {
    // poll() itself throws nothing; a coroutine resumed inline lets nothing escape either
    // (detail::resume), so this only keeps the noexcept contract honest.
  }
  m_idle_polling.store(false, std::memory_order_release);
  return n;
}

std::size_t completion_reactor::poll_busy() noexcept {
  bool waits = false;
  const std::size_t n = poll_stops_and_companions(waits);
  return waits ? n + sweep_unless_polled() : n;
}

std::size_t completion_reactor::poll_stops_and_companions(bool& waits) noexcept {
  // Stop requests first, whichever way the caller polls next (any thread may end them: the
  // list is taken whole by one).
  std::size_t n = m_stop_head.load(std::memory_order_relaxed) != nullptr ? end_stops() : 0;
  n += poll_companions();
  waits = m_pending_count.load(std::memory_order_relaxed) != 0 ||
          m_has_ready.load(std::memory_order_relaxed);
  return n;
}

bool completion_reactor::idle_pending() const noexcept {
  return m_pending_count.load(std::memory_order_relaxed) != 0 ||
         m_companion_work.load(std::memory_order_relaxed) != 0 ||
         m_has_ready.load(std::memory_order_relaxed) ||
         m_stop_head.load(std::memory_order_relaxed) != nullptr;
}

bool completion_reactor::idle_keep_spinning() const noexcept {
  if (!idle_pending()) {
    return false;
  }
  const auto window = static_cast<std::uint64_t>(m_options.spin_window.count());
  if (now_ns() - m_last_progress_ns.load(std::memory_order_relaxed) < window) {
    return true;
  }
  m_spin_lapsed.store(true, std::memory_order_relaxed);
  return false;
}

std::size_t completion_reactor::idle_spinners_wanted() const noexcept {
  if (m_options.idle_spinners != 0) {
    return m_options.idle_spinners; // a fixed number, or every idle thread
  }
  // One spinner per lane that has waits: waits of one lane are answered by one query (and
  // one for the companions).
  const std::size_t companions = m_companion_work.load(std::memory_order_relaxed) != 0 ? 1 : 0;
  return std::max<std::size_t>(1, std::min(m_pending_count.load(std::memory_order_relaxed),
                                           m_active_lanes.load(std::memory_order_relaxed)) +
                                      companions);
}

std::chrono::nanoseconds completion_reactor::idle_park_period() const noexcept {
  // A source's notification covers its waits, never a companion's work.
  const bool notified =
      m_source->notifies() && m_companion_work.load(std::memory_order_relaxed) == 0;
  return notified ? std::max(m_options.park_poll * 10, m_options.stall_probe) : m_options.park_poll;
}

void completion_reactor::notify() noexcept { wake(); }

void completion_reactor::on_resumed(const wait_node& w) noexcept {
  if (w.resolved_ns != 0) {
    const std::uint64_t now = now_ns();
    const std::uint64_t d = now > w.resolved_ns ? now - w.resolved_ns : 0;
    const auto bucket = std::min<std::size_t>(d == 0 ? 0 : std::bit_width(d) - 1,
                                              reactor_stats::latency_buckets - 1);
    m_counters.latency[bucket].fetch_add(1, std::memory_order_relaxed);
  }
  if (m_trace.on_resume != nullptr) {
    m_trace.on_resume(m_trace.context, w);
  }
}

void completion_reactor::set_trace(const reactor_trace& trace) noexcept {
  const std::lock_guard lock(m_mutex);
  m_trace = trace;
}

reactor_stats completion_reactor::stats() const {
  reactor_stats s;
  const auto& c = m_counters;
  s.submitted = c.submitted.load(std::memory_order_relaxed);
  s.completions = c.completions.load(std::memory_order_relaxed);
  s.failures = c.failures.load(std::memory_order_relaxed);
  s.withdrawn = c.withdrawn.load(std::memory_order_relaxed);
  s.cancelled = c.cancelled.load(std::memory_order_relaxed);
  s.stopped = c.stopped.load(std::memory_order_relaxed);
  s.queries = c.queries.load(std::memory_order_relaxed);
  s.sweeps = c.sweeps.load(std::memory_order_relaxed);
  s.spin_ns = c.spin_ns.load(std::memory_order_relaxed);
  s.parked_ns = c.parked_ns.load(std::memory_order_relaxed);
  s.parks = c.parks.load(std::memory_order_relaxed);
  s.ready = c.ready.load(std::memory_order_relaxed);
  s.completions_after_spin = c.after_spin.load(std::memory_order_relaxed);
  for (std::size_t i = 0; i < reactor_stats::latency_buckets; ++i) {
    s.resume_latency[i] = c.latency[i].load(std::memory_order_relaxed);
  }
  const std::lock_guard lock(m_mutex);
  s.pending = m_pending_count.load(std::memory_order_relaxed);
  for_each_active_locked([&](const reactor_lane& lane) {
    if (lane.size != 0) {
      s.lanes.push_back({lane.key, lane.size});
    }
  });
  s.lane_waits.reserve(m_lanes.size());
  for (const auto& [key, lane] : m_lanes) {
    s.lane_waits.push_back({key, lane->waits});
  }
  // The integrals as of now, on a copy: reading statistics changes nothing.
  load_meter m = m_load;
  const std::uint64_t now = now_ns();
  if (s.pending != 0) { // the spells in progress (a walk over the pending waits: stats only)
    m.busy_ns += elapsed(now, m.busy_since_ns);
    for_each_active_locked([&](const reactor_lane& lane) {
      if (lane.size != 0) {
        m.busy_lane_ns += elapsed(now, lane.busy_since_ns);
      }
      for (const wait_node* w = lane.head; w != nullptr; w = w->next) {
        m.pending_wait_ns += elapsed(now, w->submitted_ns);
      }
    });
  }
  s.lanes_created = m.lanes_created;
  s.peak_pending = m.peak_pending;
  s.peak_busy_lanes = m.peak_busy_lanes;
  s.age_ns = now - m.created_ns;
  s.busy_ns = m.busy_ns;
  s.pending_wait_ns = m.pending_wait_ns;
  s.busy_lane_ns = m.busy_lane_ns;
  return s;
}

void completion_reactor::park(const std::stop_token& stop, std::uint64_t seen_seq,
                              bool waits_pending) {
  const std::uint64_t t0 = now_ns();
  m_parked.store(true);
  if (m_wake_seq.load() == seen_seq) {
    std::unique_lock lock(m_park_mutex);
    const auto woken = [&] { return m_wake_seq.load() != seen_seq || stop.stop_requested(); };
    if (!waits_pending) {
      m_park_cv.wait(lock, woken);
    } else {
      // A notifying source wakes us itself; the timed wait then only bounds how late a
      // lost context is noticed.
      const auto period = idle_park_period();
      m_park_cv.wait_for(lock, period, woken);
    }
  }
  m_parked.store(false);
  m_counters.parks.fetch_add(1, std::memory_order_relaxed);
  m_counters.parked_ns.fetch_add(now_ns() - t0, std::memory_order_relaxed);
}

void completion_reactor::thread_main(std::stop_token stop) {
  if (m_options.on_thread_start) {
    m_options.on_thread_start();
  }
  const auto window = static_cast<std::uint64_t>(m_options.spin_window.count());
  std::uint64_t spin_start = now_ns();
  while (!stop.stop_requested()) {
    const std::uint64_t seq = m_wake_seq.load();
    poll();
    const std::uint64_t now = now_ns();
    bool idle = false;
    std::uint64_t last_progress = 0;
    {
      const std::lock_guard lock(m_mutex);
      idle = m_active_lanes.load(std::memory_order_relaxed) == 0 && m_ready_head == nullptr &&
             m_stop_head.load(std::memory_order_relaxed) == nullptr &&
             m_companion_work.load(std::memory_order_relaxed) == 0;
      last_progress = m_last_progress_ns.load(std::memory_order_relaxed);
    }
    if (idle || now - last_progress >= window) {
      if (!idle) {
        m_spin_lapsed.store(true, std::memory_order_relaxed);
      }
      m_counters.spin_ns.fetch_add(now - spin_start, std::memory_order_relaxed);
      park(stop, seq, !idle);
      spin_start = now_ns();
    } else {
      for (int i = 0; i < 8; ++i) {
        detail::cpu_relax();
      }
    }
  }
  m_counters.spin_ns.fetch_add(now_ns() - spin_start, std::memory_order_relaxed);
}

} // namespace cuawait
