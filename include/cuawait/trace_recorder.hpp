// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `trace_recorder`: records every wait (suspension, completion, resumption) into
//! per-thread buffers of bounded size and writes them as a Chrome / Perfetto trace
//! (`traceEvents` JSON; open it in ui.perfetto.dev or chrome://tracing).
//!
//! The trace has one track per thread that suspended, completed or resumed a wait (process
//! "cuawait threads", named after its executor) and one per lane, i.e. CUDA stream
//! (process "cuawait lanes"). Each wait is a slice on its lane, from when its work could
//! start (its suspension, or the completion of the wait before it on the same lane, since a
//! lane finishes in order) to when the reactor saw it finish; a flow arrow goes from the
//! `co_await` on the suspending thread to that slice, and a second one from the slice to
//! the resumption on the thread that resumed it. Withdrawn waits are marked (`withdrawn`),
//! as are failed or cancelled ones (`status`). Spans of other work (`record_span`: CPU
//! stages on threads, GPU work timed on the GPU) are slices on their thread's track or on a
//! GPU track of their lane.
//!
//! ```cpp
//! cuawait::trace_recorder rec;
//! cuawait::observer_set observers;
//! observers.add(rec);
//! observers.install(reactor);
//! ... run ...
//! reactor.set_trace({});
//! rec.write_json("trace.json");
//! ```
//! With a `runtime`: `CUAWAIT_TRACE=trace.json ./app`, or `rt.start_trace()` and
//! `rt.write_trace(path)`.

#include "cuawait/wait_observer.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace cuawait {

class executor;

//! How much a `trace_recorder` keeps.
struct trace_options {
  //! Events kept at most (about 3 per wait, 48 bytes each); later ones are dropped and
  //! counted. The memory is taken in chunks of 1,024 events as threads need it.
  std::size_t max_events = std::size_t{1} << 20;
  //! Record one wait in this many (1: all). Sampling keeps whole waits.
  std::uint32_t sample_every = 1;
};

//! A span of work that is not a wait: a CPU stage of a job on the calling thread, or GPU
//! work on a lane (e.g. a kernel timed with events), given on the recorder's clock
//! (`observer_clock_ns()`). Spans appear in the trace next to the waits and are what
//! `timeline_svg` (trace_timeline.hpp) draws.
struct trace_span {
  const char* name = "";      //!< static storage: a stage name ("decode", "blur")
  std::uint64_t start_ns = 0; //!< `observer_clock_ns()` time
  std::uint64_t end_ns = 0;   //!< at or after `start_ns`
  std::int64_t item = -1;     //!< the job it belongs to (an image number), -1 none
  //! nullptr: on the calling thread's track (CPU work); else on the track of this lane key
  //! (the `cudaStream_t` of GPU work; name it with `name_lane`).
  const void* lane = nullptr;
};

//! A recorded span, with where it was recorded.
struct recorded_span {
  trace_span span;
  std::uint32_t thread = 0;       //!< `observed_thread_ordinal()` of the recording thread
  const executor* exec = nullptr; //!< its executor at the time
};

namespace detail {
struct trace_thread_buffer;
}

//! Records wait events cheaply: each thread appends to its own buffer (no lock, no shared
//! counter once its buffer exists); a new thread or a full chunk takes a lock once.
//! `write_json` may run while events are recorded (it sees a prefix of them). Thread-safe.
class trace_recorder final : public wait_observer {
public:
  explicit trace_recorder(trace_options options = {});
  trace_recorder(const trace_recorder&) = delete;
  trace_recorder& operator=(const trace_recorder&) = delete;
  ~trace_recorder();

  void observe(const wait_info& e) noexcept override;

  //! Names the threads that run `ex` ("pool", "run loop") in the trace. Thread-safe.
  void name_executor(const executor* ex, std::string name);
  //! Names a lane ("stream 3") in the trace; unnamed lanes show their key. Thread-safe.
  void name_lane(const void* lane_key, std::string name);

  //! Records a span (see `trace_span`). Takes the recorder's lock: meant for a few spans
  //! per job, not for every wait. Spans past `max_events` are dropped and counted.
  //! Thread-safe.
  void record_span(const trace_span& s) noexcept;
  //! The spans recorded so far, in recording order. Thread-safe.
  [[nodiscard]] std::vector<recorded_span> spans() const;
  //! The name given to a lane with `name_lane`, or "".
  [[nodiscard]] std::string lane_name(const void* lane_key) const;
  //! Time zero of the trace (`observer_clock_ns()` at construction).
  [[nodiscard]] std::uint64_t base_ns() const noexcept { return m_base_ns; }

  //! Writes the trace as Chrome / Perfetto JSON.
  void write_json(std::ostream& out) const;
  //! Writes the trace to the file `path`. @throws std::runtime_error when it cannot.
  void write_json(const std::string& path) const;

  //! Events recorded so far.
  [[nodiscard]] std::uint64_t recorded() const noexcept;
  //! Events dropped because `max_events` was reached.
  [[nodiscard]] std::uint64_t dropped() const noexcept {
    return m_dropped.load(std::memory_order_relaxed);
  }

private:
  detail::trace_thread_buffer* buffer_for_this_thread() noexcept;
  bool take_chunk() noexcept;

  trace_options m_options;
  std::uint64_t m_serial;  // tells thread caches of different recorders apart
  std::uint64_t m_base_ns; // time zero of the trace
  mutable std::mutex m_mutex;
  std::vector<std::unique_ptr<detail::trace_thread_buffer>> m_threads;
  std::unordered_map<const executor*, std::string> m_executor_names;
  std::unordered_map<const void*, std::string> m_lane_names;
  std::vector<recorded_span> m_spans;
  std::atomic<std::size_t> m_chunks_left;
  std::atomic<std::uint64_t> m_dropped{0};
};

} // namespace cuawait
