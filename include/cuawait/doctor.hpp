// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `doctor`: turns the statistics cuawait keeps (the completion reactor's, the thread
//! pool's, and what the CUDA layer adds: pinned-pool misses, graph caches, batchers, waits
//! on the default streams) into findings: what is wrong, a one-line advice, and the numbers
//! that show it. CUDA-free; docs/DOCTOR.md describes each finding.
//!
//! ```cpp
//! cuawait::doctor_snapshot s = cuawait::doctor::snapshot(reactor, &pool);
//! s.batchers.push_back({"resize", batcher.stats(), 32});   // optional extras
//! std::cout << cuawait::doctor{}.examine(s);
//! ```
//! With a `runtime`: `std::cout << rt.report();`, or `CUAWAIT_DOCTOR=1` prints the report
//! when the runtime is destroyed.
//!
//! The counters are cumulative since the reactor and the pool were created, so a report
//! covers their whole life.

#include "cuawait/gpu_counters.hpp"
#include "cuawait/reactor_stats.hpp"
#include "cuawait/thread_pool.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

namespace cuawait {

class completion_reactor;

//! How bad a finding is.
enum class doctor_severity : std::uint8_t {
  info,    //!< worth knowing; may be intended
  warning, //!< costs throughput or latency
  error,   //!< something failed
};

//! What a finding is about (docs/DOCTOR.md has a section per rule).
enum class doctor_rule : std::uint8_t {
  wait_failures,             //!< GPU waits failed or the context was lost
  single_stream,             //!< all waits on one lane while several were in flight
  legacy_default_stream,     //!< waits on the legacy default stream
  per_thread_default_stream, //!< waits on the per-thread default stream
  late_detection,            //!< work outlasted the spin window; completions seen late
  slow_resumption,           //!< long delay from "seen finished" to "coroutine runs"
  pool_too_small,            //!< ready coroutines queue for busy workers
  cpu_bound,                 //!< workers busy nearly all the time
  pinned_pool_misses,        //!< cudaHostAlloc in the request path
  graph_reinstantiations,    //!< cached graphs re-instantiated (shape changes)
  graph_cache_evictions,     //!< the graph cache is too small for the keys used
  batches_underfilled,       //!< batches go out mostly empty
};

//! "info", "warning", "error".
[[nodiscard]] const char* to_string(doctor_severity s) noexcept;
//! The rule's name as in docs/DOCTOR.md ("single_stream"...).
[[nodiscard]] const char* to_string(doctor_rule r) noexcept;

//! One measured number behind a finding.
struct doctor_measure {
  std::string name; //!< what was measured ("peak pending waits")
  double value = 0; //!< its value
  std::string unit; //!< "", "%", "us", "ms", "s"...
};

//! One finding: the rule, how bad, what to do, and the numbers that show it.
struct doctor_finding {
  doctor_rule rule = doctor_rule::wait_failures;
  doctor_severity severity = doctor_severity::info;
  std::string advice;                   //!< one line: what happens and what to do
  std::vector<doctor_measure> evidence; //!< the numbers
};

//! When each rule speaks. Every default is documented in docs/DOCTOR.md; override any.
struct doctor_thresholds {
  //! Waits (suspended) that must have completed before the wait rules speak.
  std::uint64_t min_waits = 32;
  //! single_stream: at least this many waits pending at once, never on more than one lane.
  std::size_t single_stream_min_peak_pending = 2;
  //! late_detection: share of completions found after the spin window had lapsed.
  double late_detection_share = 0.2;
  //! slow_resumption: median delay from "the reactor saw it finished" to "it runs" (judged
  //! only with a reactor thread, or without a known pool: see docs/DOCTOR.md).
  std::chrono::nanoseconds slow_resumption_p50 = std::chrono::microseconds(100);
  //! Worker time (summed over workers) measured before the pool rules speak.
  std::chrono::nanoseconds min_pool_time = std::chrono::milliseconds(20);
  //! cpu_bound / pool_too_small: share of worker time spent running coroutines.
  double busy_fraction = 0.85;
  //! pool_too_small: mean handles still queued when a worker took one.
  double backlog_per_pick = 4.0;
  //! pinned_pool_misses: misses at least this many and this share of requests.
  std::uint64_t pinned_min_misses = 16;
  double pinned_miss_share = 0.05;
  //! graph_reinstantiations: at least this many and this share of hits.
  std::uint64_t graph_min_reinstantiations = 4;
  double graph_reinstantiation_share = 0.1;
  //! graph_cache_evictions: at least this many evictions and this share of lookups missed.
  std::uint64_t graph_min_evictions = 16;
  double graph_miss_share = 0.2;
  //! batches_underfilled: at least this many batches, filled below this share on average.
  std::uint64_t batch_min_batches = 16;
  double batch_fill = 0.5;
};

//! A graph cache's counters, named.
struct doctor_graph_cache {
  std::string name;
  graph_cache_stats stats;
};

//! A batcher's counters, named, with its `batch_options::max_batch`.
struct doctor_batcher {
  std::string name;
  batch_stats stats;
  std::size_t max_batch = 0;
};

//! Everything the doctor reads. `doctor::snapshot` fills the reactor and pool parts; the
//! CUDA layer (`runtime::snapshot`) the rest; a user may add graph caches and batchers.
struct doctor_snapshot {
  reactor_stats reactor;
  std::chrono::nanoseconds spin_window{}; //!< the reactor's `reactor_options::spin_window`
  std::chrono::nanoseconds park_poll{};   //!< its `park_poll`
  bool reactor_thread = false;            //!< it has a polling thread of its own
  bool source_notifies = false;           //!< its source notifies completions
  std::string strategy;                   //!< the completion strategy's name ("" unknown)

  std::optional<thread_pool_stats> pool; //!< the pool whose workers run the coroutines
  std::size_t hardware_threads = 0;      //!< `std::thread::hardware_concurrency()`

  std::uint64_t legacy_stream_waits = 0;       //!< waits on the legacy default stream
  std::uint64_t per_thread_stream_waits = 0;   //!< waits on the per-thread default stream
  std::optional<size_class_pool_stats> pinned; //!< the pinned host memory pool
  std::vector<doctor_graph_cache> graph_caches;
  std::vector<doctor_batcher> batchers;
};

//! The doctor's answer: a summary line and the findings, worst first.
struct doctor_report {
  std::string summary; //!< waits, lanes, latency, pool load: one line
  std::vector<doctor_finding> findings;

  //! True when there is nothing to act on.
  [[nodiscard]] bool clean() const noexcept { return findings.empty(); }
  //! The finding of rule `r`, or nullptr.
  [[nodiscard]] const doctor_finding* find(doctor_rule r) const noexcept;
  //! The report as printed: the summary, then per finding a line
  //! `<severity> <rule>: <advice>` and an indented line of evidence.
  [[nodiscard]] std::string to_string() const;
};

//! Prints `r.to_string()`.
std::ostream& operator<<(std::ostream& os, const doctor_report& r);

//! Applies the rules (docs/DOCTOR.md) to snapshots.
class doctor {
public:
  explicit doctor(doctor_thresholds thresholds = {}) : m_thresholds(thresholds) {}

  //! The reactor's statistics and configuration, and the pool's when given.
  [[nodiscard]] static doctor_snapshot snapshot(const completion_reactor& reactor,
                                                const thread_pool* pool = nullptr);

  //! The findings for `s`, worst first. Pure: the same snapshot gives the same report.
  [[nodiscard]] doctor_report examine(const doctor_snapshot& s) const;

  [[nodiscard]] const doctor_thresholds& thresholds() const noexcept { return m_thresholds; }

private:
  doctor_thresholds m_thresholds;
};

} // namespace cuawait
