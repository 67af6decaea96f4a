// SPDX-License-Identifier: Apache-2.0
// The four completion strategies (see cuawait/cuda/strategy.hpp).

#include "cuawait/cuda/strategy.hpp"
#include "cuawait/completion_reactor.hpp"
#include "cuawait/cuda/event_pool.hpp"

#include <cuda.h> // types only: libcuda is reached through cudaGetDriverEntryPointByVersion

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

namespace cuawait::cuda {
namespace {

using detail::wait_node;

//! Marks the `source_data` of waits whose token is a strategy-owned object.
char g_owned_tag;

//! The device current while a source is made (a device context makes its own current):
//! its markers' events are created there whatever device is current later (an event
//! recorded on a stream of another device fails). -1 when it cannot be read.
int device_at_construction() noexcept {
  int d = -1;
  if (cudaGetDevice(&d) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  return d;
}

completion_status query_event(const wait_node& w) noexcept {
  return gpu_completion_source::status_of(cudaEventQuery(reinterpret_cast<cudaEvent_t>(w.token)));
}

//! The legacy or per-thread default stream: one handle that names a different stream per
//! device or per thread, so no per-handle state (a counter, a stream query) may stand for it.
bool is_default_stream(cudaStream_t s) noexcept {
  return s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread;
}

//! Records an event of `pool` on `s` as `w`'s marker (the strategy owns it: see retire).
void arm_pooled_event(event_pool& pool, cudaStream_t s, wait_node& w) {
  const cudaEvent_t e = pool.acquire();
  const cudaError_t r = cudaEventRecord(e, s);
  if (r != cudaSuccess) {
    pool.release(e);
    check(w.operation, r, "cudaEventRecord");
  }
  w.token = reinterpret_cast<std::uintptr_t>(e);
  w.source_data = &g_owned_tag;
  w.bell = nullptr;
}

//! A stream's health, for strategies whose query cannot see errors.
completion_status probe_stream(const wait_node& w, completion_status flag_state) noexcept {
  if (flag_state.state != completion_state::pending) {
    return flag_state;
  }
  const completion_status s = gpu_completion_source::status_of(
      cudaStreamQuery(static_cast<cudaStream_t>(const_cast<void*>(w.lane_key))));
  return s.state == completion_state::done ? completion_status{} : s;
}

// --- event_poll ---------------------------------------------------------------------------
class event_poll_source final : public gpu_completion_source {
public:
  void arm(cudaStream_t s, wait_node& w) override { arm_pooled_event(m_pool, s, w); }
  completion_status query(const wait_node& w) noexcept override { return query_event(w); }
  void retire(wait_node& w) noexcept override {
    if (w.source_data == &g_owned_tag) {
      m_pool.release(reinterpret_cast<cudaEvent_t>(w.token));
      w.source_data = nullptr;
    }
  }
  strategy kind() const noexcept override { return strategy::event_poll; }
  // cudaEventQuery is thread-safe and pooled events are never destroyed while the source
  // lives (a stale copy queries an event that was re-recorded: the answer is discarded).
  bool parallel_queries() const noexcept override { return true; }

private:
  event_pool m_pool{cudaEventDisableTiming, device_at_construction()};
};

// --- flag slots shared by host_callback and blocking_sync --------------------------------
//! A completion flag shared by a wait and whoever sets it; freed when both let go.
struct flag_slot {
  std::atomic<int> error{-1}; // -1: pending, else the cudaError_t
  std::atomic<int> refs{2};
  cudaEvent_t event = nullptr; // blocking_sync only
  class flag_source* owner = nullptr;
};

class flag_source : public gpu_completion_source {
public:
  ~flag_source() override {
    for (flag_slot* s : m_free) {
      delete s;
    }
  }
  completion_status query(const wait_node& w) noexcept override {
    if (w.source_data == nullptr) {
      return query_event(w);
    }
    const int e = static_cast<flag_slot*>(w.source_data)->error.load(std::memory_order_acquire);
    return e < 0 ? completion_status{} : status_of(static_cast<cudaError_t>(e));
  }
  completion_status probe(const wait_node& w) noexcept override {
    return w.source_data == nullptr ? query_event(w) : probe_stream(w, query(w));
  }
  void retire(wait_node& w) noexcept override {
    if (w.source_data != nullptr) {
      drop(static_cast<flag_slot*>(w.source_data));
      w.source_data = nullptr;
    }
  }
  void attach(completion_reactor* r) noexcept override { m_reactor.store(r); }
  bool notifies() const noexcept override { return true; }

  //! Called by the setter (a CUDA callback or the helper thread): no CUDA, no reactor lock.
  void complete(flag_slot* s, int error) noexcept {
    s->error.store(error, std::memory_order_release);
    if (completion_reactor* r = m_reactor.load(); r != nullptr) {
      r->notify();
    }
    drop(s);
  }

protected:
  flag_slot* take() {
    flag_slot* s = nullptr;
    {
      const std::lock_guard lock(m_mutex);
      if (!m_free.empty()) {
        s = m_free.back();
        m_free.pop_back();
      }
    }
    if (s == nullptr) {
      s = new flag_slot;
    }
    s->error.store(-1, std::memory_order_relaxed);
    s->refs.store(2, std::memory_order_relaxed);
    s->owner = this;
    return s;
  }
  void drop(flag_slot* s) noexcept {
    if (s->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      try {
        const std::lock_guard lock(m_mutex);
        m_free.push_back(s);
      } catch (...) {
        delete s;
      }
    }
  }

private:
  std::atomic<completion_reactor*> m_reactor{nullptr};
  std::mutex m_mutex;
  std::vector<flag_slot*> m_free;
};

// --- host_callback -------------------------------------------------------------------------
class host_callback_source final : public flag_source {
public:
  void arm(cudaStream_t s, wait_node& w) override {
    flag_slot* slot = take();
    const cudaError_t r = cudaLaunchHostFunc(s, &on_host, slot);
    if (r != cudaSuccess) {
      drop(slot);
      drop(slot);
      check(w.operation, r, "cudaLaunchHostFunc");
    }
    w.source_data = slot;
  }
  strategy kind() const noexcept override { return strategy::host_callback; }

private:
  // Runs on CUDA's callback thread: only sets the flag and wakes the reactor.
  static void CUDART_CB on_host(void* p) {
    auto* slot = static_cast<flag_slot*>(p);
    slot->owner->complete(slot, 0);
  }
};

// --- blocking_sync -------------------------------------------------------------------------
class blocking_sync_source final : public flag_source {
public:
  blocking_sync_source()
      : m_pool(cudaEventBlockingSync | cudaEventDisableTiming, device_at_construction()) {
    m_thread = std::jthread([this](std::stop_token st) { helper(st); });
  }
  ~blocking_sync_source() override {
    m_thread.request_stop();
    {
      const std::lock_guard lock(m_mutex);
      m_cv.notify_all();
    }
    m_thread.join();
  }
  void arm(cudaStream_t s, wait_node& w) override {
    flag_slot* slot = take();
    slot->event = m_pool.acquire();
    const cudaError_t r = cudaEventRecord(slot->event, s);
    if (r != cudaSuccess) {
      m_pool.release(slot->event);
      drop(slot);
      drop(slot);
      check(w.operation, r, "cudaEventRecord");
    }
    {
      const std::lock_guard lock(m_mutex);
      m_queue.push_back(slot);
    }
    m_cv.notify_one();
    w.source_data = slot;
  }
  strategy kind() const noexcept override { return strategy::blocking_sync; }

private:
  // One helper thread blocks on the events in arm order. Work on other streams that
  // finishes meanwhile is seen when the helper reaches it (head-of-line blocking: one of
  // the reasons this strategy is not the default).
  void helper(const std::stop_token& st) {
    for (;;) {
      flag_slot* slot = nullptr;
      {
        std::unique_lock lock(m_mutex);
        m_cv.wait(lock, [&] { return !m_queue.empty() || st.stop_requested(); });
        if (m_queue.empty()) {
          return;
        }
        slot = m_queue.front();
        m_queue.pop_front();
      }
      const cudaError_t e = cudaEventSynchronize(slot->event);
      if (e != cudaSuccess && !cuda_error::is_sticky(e)) {
        (void)cudaGetLastError();
      }
      m_pool.release(slot->event);
      complete(slot, static_cast<int>(e));
    }
  }

  event_pool m_pool{cudaEventDisableTiming, device_at_construction()};
  std::mutex m_mutex;
  std::condition_variable m_cv;
  std::deque<flag_slot*> m_queue;
  std::jthread m_thread;
};

// --- timeline --------------------------------------------------------------------------------
using write_value64_fn = CUresult (*)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);

write_value64_fn load_write_value64() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  const cudaError_t e = cudaGetDriverEntryPointByVersion("cuStreamWriteValue64", &fn, 12000,
                                                         cudaEnableDefault, &found);
  check("timeline strategy", e, "cudaGetDriverEntryPointByVersion");
  if (found != cudaDriverEntryPointSuccess || fn == nullptr) {
    throw cuda_error(cudaErrorSymbolNotFound, "timeline strategy (cuStreamWriteValue64)",
                     "cudaGetDriverEntryPointByVersion");
  }
  return reinterpret_cast<write_value64_fn>(fn);
}

using batch_mem_op_fn = CUresult (*)(CUstream, unsigned int, CUstreamBatchMemOpParams*,
                                     unsigned int);

//! cuStreamBatchMemOp, or nullptr where the driver lacks it (the doorbells are then off).
batch_mem_op_fn load_batch_mem_op() noexcept {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion("cuStreamBatchMemOp", &fn, 12000, cudaEnableDefault,
                                       &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return reinterpret_cast<batch_mem_op_fn>(fn);
}

//! Each stream's counter word sits in a block of mapped host memory. Past `bells_from`
//! streams, an await also rings its group's doorbell (`wait_node::bell`): one word per 64
//! counters, written after the counter in the same batch of stream memory operations with a
//! value never written before (the ticket and the counter's place in the group), so that a
//! reactor sweep over thousands of stalled streams reads one doorbell per 64 of them instead
//! of every counter. Below that, one write per await as before: a sweep of a few hundred
//! words costs less than the second write.
class timeline_source final : public gpu_completion_source {
  static constexpr std::size_t words_per_block = 512;
  static constexpr std::size_t lanes_per_bell = 64;
  static constexpr std::size_t words_per_line = 8; // a doorbell per cache line
  static constexpr std::size_t bells_per_block = words_per_block / lanes_per_bell;
  static constexpr std::size_t block_words = words_per_block + bells_per_block * words_per_line;
  static constexpr std::size_t bells_from = 512;
  struct lane {
    std::uint64_t* word = nullptr;
    CUdeviceptr device_word = 0;
    std::uint64_t* bell = nullptr;
    CUdeviceptr device_bell = 0;
    std::uint64_t place = 0; // its place among the counters of its bell (0-63)
    std::uint64_t next_ticket = 0;
    std::unique_ptr<std::mutex> mutex = std::make_unique<std::mutex>();
  };

public:
  timeline_source() : m_write(load_write_value64()), m_batch(load_batch_mem_op()) {}
  ~timeline_source() override {
    for (void* b : m_blocks) {
      check_noexcept("timeline strategy", cudaFreeHost(b), "cudaFreeHost");
    }
  }
  void arm(cudaStream_t s, wait_node& w) override {
    // The default streams name a different stream per thread (per-thread) or per device
    // (legacy): one counter keyed by the handle would be shared by several streams, and a
    // later ticket written by one could resolve an earlier wait of another. Events instead.
    if (is_default_stream(s) || wants_event() ||
        now_ns() < m_events_until_ns.load(std::memory_order_relaxed)) {
      arm_pooled_event(m_events, s, w);
      if (rule() == marker_rule::automatic) { // the count is for that rule only
        m_event_markers.fetch_add(1, std::memory_order_relaxed);
      }
      return;
    }
    lane* lp = nullptr;
    bool ring = false;
    {
      const std::lock_guard lock(m_mutex); // the lane table only
      lp = &lane_for(s);
      // Under `auto` a word is used only once 16 event markers are outstanding, and streams
      // awaited with events never enter this table: counting its streams would leave the first
      // 512 words of a stall without a doorbell (read at every poll). There, every word rings.
      ring = m_batch != nullptr &&
             (m_lanes.size() >= bells_from || rule() == marker_rule::automatic) &&
             m_bells.load(std::memory_order_relaxed);
    }
    lane& l = *lp;
    // Each lane's lock orders its ticket numbers with its writes (two threads arming the same
    // stream must enqueue their writes in ticket order); arms on other streams run in
    // parallel instead of queueing behind one driver call at a time.
    const std::lock_guard lane_lock(*l.mutex);
    const std::uint64_t ticket = l.next_ticket + 1;
    w.bell = nullptr;
    bool written = false;
    if (ring) {
      // The counter, then the doorbell: a default write fences the writes before it, so a
      // reader that sees the ring sees the counter too.
      std::array<CUstreamBatchMemOpParams, 2> ops{};
      ops[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
      ops[0].writeValue.address = l.device_word;
      ops[0].writeValue.value64 = ticket;
      ops[1].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
      ops[1].writeValue.address = l.device_bell;
      ops[1].writeValue.value64 = ticket * lanes_per_bell + l.place;
      written = m_batch(s, 2, ops.data(), 0) == CUDA_SUCCESS;
      if (written) {
        w.bell = l.bell;
      }
    }
    if (!written) {
      if (m_write(s, l.device_word, ticket, 0 /* CU_STREAM_WRITE_VALUE_DEFAULT */) !=
          CUDA_SUCCESS) {
        throw cuda_error(cudaErrorLaunchFailure, w.operation, "cuStreamWriteValue64");
      }
      if (ring) {
        // The single write works where the batch did not (a driver or device without batched
        // memory operations): no more bells, and sweeps read every counter as below 512.
        m_bells.store(false, std::memory_order_relaxed);
      }
    }
    l.next_ticket = ticket;
    w.token = ticket;
    w.source_data = l.word;
  }
  completion_status query(const wait_node& w) noexcept override {
    if (w.source_data == nullptr || w.source_data == &g_owned_tag) {
      return query_event(w);
    }
    const std::uint64_t seen =
        std::atomic_ref<std::uint64_t>(*static_cast<std::uint64_t*>(w.source_data))
            .load(std::memory_order_acquire);
    return seen >= w.token ? completion_status{completion_state::done, 0} : completion_status{};
  }
  completion_status probe(const wait_node& w) noexcept override {
    return w.source_data == nullptr || w.source_data == &g_owned_tag ? query_event(w)
                                                                     : probe_stream(w, query(w));
  }
  void retire(wait_node& w) noexcept override {
    if (w.source_data == &g_owned_tag) {
      m_events.release(reinterpret_cast<cudaEvent_t>(w.token));
      w.source_data = nullptr;
      if (rule() == marker_rule::automatic) {
        m_event_markers.fetch_sub(1, std::memory_order_relaxed);
      }
    }
  }
  strategy kind() const noexcept override { return strategy::timeline; }
  // An event marker's query is a driver call (cudaEventQuery), made outside the reactor's lock
  // so that the submissions of other threads do not queue behind it; a word is read under it.
  bool costly_query(const wait_node& w) const noexcept override {
    return w.source_data == nullptr || w.source_data == &g_owned_tag;
  }
  // A query is a read of the stream's counter word (or cudaEventQuery on a pooled event,
  // thread-safe): a thread may watch its own lane without the reactor's lock. Sweeps stay
  // serialised: reading every lane's word under one lock is cheaper than claims.
  bool unlocked_queries() const noexcept override { return true; }

  // The stream's counter word goes to a free list, reused once every write enqueued on it
  // has landed (word == its last ticket): a write still in flight from the destroyed
  // stream could otherwise move a new stream's counter backwards.
  void forget_stream(cudaStream_t s) noexcept override {
    const std::lock_guard lock(m_mutex);
    const auto it = m_lanes.find(s);
    if (it == m_lanes.end()) {
      return;
    }
    try {
      m_free.push_back(std::move(it->second));
    } catch (...) {
      return; // keep the lane: a bounded leak is better than losing track of the word
    }
    m_lanes.erase(it);
  }
  std::size_t stream_state_count() const noexcept override {
    const std::lock_guard lock(m_mutex);
    return m_lanes.size();
  }

  // While a large copy may be in flight, markers are events: a stream-written word waits
  // behind copies on other streams, an event does not (measured: 32 MiB jobs in two
  // pipelines went from 0.48 to 0.9+ of the PCIe floor with events). The window is the
  // copy's time at 12.5 GB/s (a quarter of the link's rate, to cover copies queued behind
  // others), at least 1 ms.
  void note_large_copy(std::size_t bytes) noexcept override {
    constexpr std::uint64_t bytes_per_us = 12'500;
    const std::uint64_t until =
        now_ns() + std::max<std::uint64_t>(1'000'000, bytes / bytes_per_us * 1'000);
    std::uint64_t seen = m_events_until_ns.load(std::memory_order_relaxed);
    while (seen < until &&
           !m_events_until_ns.compare_exchange_weak(seen, until, std::memory_order_relaxed)) {
    }
  }

private:
  enum class marker_rule { word, event, automatic };
  //! CUAWAIT_TIMELINE_MARKER=event: every marker is a pooled event, queried by the same
  //! serial sweep; =auto: an event while fewer than `auto_events` event markers are
  //! outstanding, the word beyond; otherwise (=word, unset) the word. An experiment: the
  //! stream-written word costs the driver more than an event record where launches queue
  //! on it, and an event costs a driver call per query where thousands wait.
  static marker_rule rule() noexcept {
    static const marker_rule v = [] {
      const char* e = std::getenv("CUAWAIT_TIMELINE_MARKER");
      const std::string_view r = e == nullptr ? "" : e;
      return r == "event"  ? marker_rule::event
             : r == "auto" ? marker_rule::automatic
                           : marker_rule::word;
    }();
    return v;
  }
  static constexpr std::size_t auto_events = 16;
  bool wants_event() const noexcept {
    switch (rule()) {
    case marker_rule::event:
      return true;
    case marker_rule::automatic:
      return m_event_markers.load(std::memory_order_relaxed) < auto_events;
    case marker_rule::word:
      break;
    }
    return false;
  }
  static std::uint64_t now_ns() noexcept {
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          std::chrono::steady_clock::now().time_since_epoch())
                                          .count());
  }

  lane& lane_for(cudaStream_t s) {
    auto it = m_lanes.find(s);
    if (it != m_lanes.end()) {
      return it->second;
    }
    for (std::size_t i = 0; i < m_free.size(); ++i) {
      lane& f = m_free[i];
      if (std::atomic_ref<std::uint64_t>(*f.word).load(std::memory_order_acquire) ==
          f.next_ticket) {
        lane reused = std::move(f);
        f = std::move(m_free.back());
        m_free.pop_back();
        return m_lanes.emplace(s, std::move(reused)).first->second;
      }
    }
    if (m_used == words_per_block || m_blocks.empty()) {
      void* b = nullptr;
      CUAWAIT_CUDA_CHECK("timeline strategy",
                         cudaHostAlloc(&b, block_words * sizeof(std::uint64_t),
                                       cudaHostAllocMapped | cudaHostAllocPortable));
      std::fill_n(static_cast<std::uint64_t*>(b), block_words, std::uint64_t{0});
      m_blocks.push_back(b);
      m_used = 0;
    }
    auto* const block = static_cast<std::uint64_t*>(m_blocks.back());
    void* dev = nullptr;
    CUAWAIT_CUDA_CHECK("timeline strategy", cudaHostGetDevicePointer(&dev, block, 0));
    const auto device_block = reinterpret_cast<CUdeviceptr>(dev);
    const std::size_t i = m_used++;
    const std::size_t bell = words_per_block + i / lanes_per_bell * words_per_line;
    lane l;
    l.word = block + i;
    l.device_word = device_block + i * sizeof(std::uint64_t);
    l.bell = block + bell;
    l.device_bell = device_block + bell * sizeof(std::uint64_t);
    l.place = i % lanes_per_bell;
    return m_lanes.emplace(s, std::move(l)).first->second;
  }

  write_value64_fn m_write;
  batch_mem_op_fn m_batch;
  std::atomic<bool> m_bells{true}; // false once a batched write failed where a single one did not
  event_pool m_events{cudaEventDisableTiming, device_at_construction()};
  std::atomic<std::uint64_t> m_events_until_ns{0};
  std::atomic<std::size_t> m_event_markers{
      0}; //!< `auto` rule: waits armed with an event, not retired
  mutable std::mutex m_mutex;
  std::unordered_map<cudaStream_t, lane> m_lanes;
  std::vector<lane> m_free; //!< words of destroyed streams (see forget_stream)
  std::vector<void*> m_blocks;
  std::size_t m_used = 0;
};

// --- stream_poll -----------------------------------------------------------------------------
//! No marker at all: the oldest wait of a stream is done when the stream is idle
//! (`cudaStreamQuery`), which is exact when the awaited operation is the last one enqueued
//! on the stream (the common case) and late, never early, otherwise. The per-thread default
//! stream names another stream on the polling thread, and the legacy default stream one per
//! device: awaits on those record an event instead.
class stream_poll_source final : public gpu_completion_source {
public:
  void arm(cudaStream_t s, wait_node& w) override {
    if (is_default_stream(s)) {
      arm_pooled_event(m_events, s, w);
      return;
    }
    w.token = 0;
    w.source_data = &g_stream_tag;
  }
  completion_status query(const wait_node& w) noexcept override {
    if (w.source_data == &g_stream_tag) {
      return status_of(cudaStreamQuery(static_cast<cudaStream_t>(const_cast<void*>(w.lane_key))));
    }
    return query_event(w);
  }
  void retire(wait_node& w) noexcept override {
    if (w.source_data == &g_owned_tag) {
      m_events.release(reinterpret_cast<cudaEvent_t>(w.token));
      w.source_data = nullptr;
    }
  }
  strategy kind() const noexcept override { return strategy::stream_poll; }
  // cudaStreamQuery / cudaEventQuery are thread-safe; the stream may be queried after the
  // wait went (the answer is then discarded).
  bool parallel_queries() const noexcept override { return true; }

private:
  static inline char g_stream_tag;
  event_pool m_events{cudaEventDisableTiming, device_at_construction()};
};

} // namespace

const char* to_string(strategy s) noexcept {
  switch (s) {
  case strategy::event_poll:
    return "event_poll";
  case strategy::host_callback:
    return "host_callback";
  case strategy::blocking_sync:
    return "blocking_sync";
  case strategy::timeline:
    return "timeline";
  case strategy::stream_poll:
    return "stream_poll";
  }
  return "?";
}

std::optional<strategy> parse_strategy(std::string_view name) noexcept {
  for (const strategy s : {strategy::event_poll, strategy::host_callback, strategy::blocking_sync,
                           strategy::timeline, strategy::stream_poll}) {
    if (name == to_string(s)) {
      return s;
    }
  }
  return std::nullopt;
}

std::unique_ptr<gpu_completion_source> make_completion_source(strategy s) {
  switch (s) {
  case strategy::event_poll:
    return std::make_unique<event_poll_source>();
  case strategy::host_callback:
    return std::make_unique<host_callback_source>();
  case strategy::blocking_sync:
    return std::make_unique<blocking_sync_source>();
  case strategy::timeline:
    return std::make_unique<timeline_source>();
  case strategy::stream_poll:
    return std::make_unique<stream_poll_source>();
  }
  throw std::invalid_argument("cuawait::cuda::make_completion_source: unknown strategy");
}

} // namespace cuawait::cuda
