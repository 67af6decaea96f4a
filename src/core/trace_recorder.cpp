// SPDX-License-Identifier: Apache-2.0
// trace_recorder: the recording side (per-thread buffers). The JSON writer is in
// trace_json.cpp.

#include "cuawait/trace_recorder.hpp"

#include "cuawait/executor.hpp"
#include "trace_buffer.hpp"

#include <fstream>
#include <new>
#include <stdexcept>

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace cuawait {

namespace {

std::atomic<std::uint64_t> g_recorder_serials{0};

//! The calling thread's buffer in the recorder it last recorded into.
struct thread_cache {
  std::uint64_t serial = 0;
  detail::trace_thread_buffer* buffer = nullptr;
};
constinit thread_local thread_cache tl_cache{};

std::uint64_t os_thread_id() noexcept {
#if defined(__linux__)
  return static_cast<std::uint64_t>(::syscall(SYS_gettid));
#else
  return 0;
#endif
}

} // namespace

trace_recorder::trace_recorder(trace_options options)
    : m_options(options), m_serial(g_recorder_serials.fetch_add(1) + 1),
      m_base_ns(observer_clock_ns()),
      m_chunks_left((options.max_events + detail::trace_chunk::size - 1) /
                    detail::trace_chunk::size) {
  if (m_options.sample_every == 0) {
    m_options.sample_every = 1;
  }
}

trace_recorder::~trace_recorder() = default;

bool trace_recorder::take_chunk() noexcept {
  std::size_t left = m_chunks_left.load(std::memory_order_relaxed);
  while (left != 0) {
    if (m_chunks_left.compare_exchange_weak(left, left - 1, std::memory_order_relaxed)) {
      return true;
    }
  }
  return false;
}

detail::trace_thread_buffer* trace_recorder::buffer_for_this_thread() noexcept {
  if (tl_cache.serial == m_serial) {
    return tl_cache.buffer;
  }
  // First event of this thread here (or it recorded into another recorder since).
  const std::lock_guard lock(m_mutex);
  const std::thread::id me = std::this_thread::get_id();
  detail::trace_thread_buffer* found = nullptr;
  for (const auto& b : m_threads) {
    if (b->thread == me) {
      found = b.get();
      break;
    }
  }
  if (found == nullptr) {
    if (!take_chunk()) {
      return nullptr;
    }
    try {
      auto b = std::make_unique<detail::trace_thread_buffer>();
      b->thread = me;
      b->ordinal = observed_thread_ordinal();
      b->os_tid = os_thread_id();
      b->head = std::make_unique<detail::trace_chunk>();
      b->tail = b->head.get();
      found = b.get();
      m_threads.push_back(std::move(b));
    } catch (...) {
      return nullptr; // out of memory: the event is dropped
    }
  }
  tl_cache = {m_serial, found};
  return found;
}

void trace_recorder::observe(const wait_info& e) noexcept {
  if (m_options.sample_every != 1 && wait_sequence(e.id) % m_options.sample_every != 0) {
    return;
  }
  detail::trace_thread_buffer* b = buffer_for_this_thread();
  if (b == nullptr || b->full) {
    m_dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  detail::trace_chunk* c = b->tail;
  std::size_t n = c->count.load(std::memory_order_relaxed);
  if (n == detail::trace_chunk::size) {
    auto* fresh = take_chunk() ? new (std::nothrow) detail::trace_chunk : nullptr;
    if (fresh == nullptr) {
      b->full = true;
      m_dropped.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    c->next.store(fresh, std::memory_order_release);
    b->tail = c = fresh;
    n = 0;
  }
  detail::trace_event_record& r = c->events[n];
  r.t_ns = e.now_ns;
  r.id = e.id;
  r.lane = e.node.lane_key;
  r.operation = e.node.operation;
  r.exec = current_executor();
  r.error = e.node.status.error;
  r.kind = e.event;
  r.state = e.node.status.state;
  c->count.store(n + 1, std::memory_order_release); // publishes the record to the writer
}

void trace_recorder::record_span(const trace_span& s) noexcept {
  recorded_span r{s, observed_thread_ordinal(), current_executor()};
  if (r.span.end_ns < r.span.start_ns) {
    r.span.end_ns = r.span.start_ns;
  }
  const std::lock_guard lock(m_mutex);
  // Spans count against the same bound as events, a chunk's worth at a time.
  if (m_spans.size() % detail::trace_chunk::size == 0 && !take_chunk()) {
    m_dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  try {
    m_spans.push_back(r);
  } catch (...) {
    m_dropped.fetch_add(1, std::memory_order_relaxed); // out of memory: dropped
  }
}

std::vector<recorded_span> trace_recorder::spans() const {
  const std::lock_guard lock(m_mutex);
  return m_spans;
}

std::string trace_recorder::lane_name(const void* lane_key) const {
  const std::lock_guard lock(m_mutex);
  const auto it = m_lane_names.find(lane_key);
  return it != m_lane_names.end() ? it->second : std::string();
}

void trace_recorder::name_executor(const executor* ex, std::string name) {
  const std::lock_guard lock(m_mutex);
  m_executor_names[ex] = std::move(name);
}

void trace_recorder::name_lane(const void* lane_key, std::string name) {
  const std::lock_guard lock(m_mutex);
  m_lane_names[lane_key] = std::move(name);
}

std::uint64_t trace_recorder::recorded() const noexcept {
  std::uint64_t n = 0;
  const std::lock_guard lock(m_mutex);
  for (const auto& b : m_threads) {
    for (const detail::trace_chunk* c = b->head.get(); c != nullptr;
         c = c->next.load(std::memory_order_acquire)) {
      n += c->count.load(std::memory_order_acquire);
    }
  }
  return n;
}

void trace_recorder::write_json(const std::string& path) const {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) {
    throw std::runtime_error("cuawait trace: cannot open " + path + " for writing");
  }
  write_json(out);
  out.flush();
  if (!out) {
    throw std::runtime_error("cuawait trace: cannot write " + path);
  }
}

} // namespace cuawait
