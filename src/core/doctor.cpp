// SPDX-License-Identifier: Apache-2.0
#include "cuawait/doctor.hpp"

#include "cuawait/completion_reactor.hpp"

#include <algorithm>
#include <cstdio>
#include <ostream>
#include <thread>
#include <utility>

namespace cuawait {

namespace {

using std::chrono::nanoseconds;

double ratio(double num, double den) noexcept { return den == 0 ? 0.0 : num / den; }
double pct(double num, double den) noexcept { return 100.0 * ratio(num, den); }
double us(std::uint64_t ns) noexcept { return static_cast<double>(ns) / 1e3; }
double ms(nanoseconds d) noexcept { return static_cast<double>(d.count()) / 1e6; }
double num(std::uint64_t v) noexcept { return static_cast<double>(v); }

//! `printf`-style formatting into a std::string (advice lines carry a few numbers).
template <class... Args>
std::string format(const char* fmt, Args... args) {
  char buf[512];
  const int n = std::snprintf(buf, sizeof buf, fmt, args...);
  return n < 0 ? std::string() : std::string(buf, std::min<std::size_t>(sizeof buf - 1, n));
}

//! A number as the report prints it: integers plainly, others with up to 3 significant
//! decimals.
std::string show(double v) {
  if (v < 1e15 && v > -1e15 &&
      (v == static_cast<double>(static_cast<long long>(v)) || v >= 100 || v <= -100)) {
    return format("%.0f", v);
  }
  return format("%.3g", v);
}

//! Builds the findings of one snapshot.
class examination {
public:
  examination(const doctor_snapshot& s, const doctor_thresholds& t) : m_s(s), m_t(t) {}

  std::vector<doctor_finding> run() {
    wait_failures();
    single_stream();
    default_streams();
    const bool saturated = pool_rules();
    late_detection();
    slow_resumption(saturated);
    pinned_pool();
    graph_caches();
    batchers();
    std::stable_sort(m_out.begin(), m_out.end(), [](const auto& a, const auto& b) {
      return static_cast<int>(a.severity) > static_cast<int>(b.severity);
    });
    return std::move(m_out);
  }

private:
  doctor_finding& add(doctor_rule r, doctor_severity sev, std::string advice,
                      std::vector<doctor_measure> evidence) {
    return m_out.emplace_back(doctor_finding{r, sev, std::move(advice), std::move(evidence)});
  }

  [[nodiscard]] std::uint64_t resolved() const noexcept {
    return m_s.reactor.completions + m_s.reactor.cancelled;
  }

  void wait_failures() {
    const reactor_stats& r = m_s.reactor;
    if (r.failures == 0) {
      return;
    }
    add(doctor_rule::wait_failures, doctor_severity::error,
        format("%llu GPU waits failed (an error in the awaited work, or a lost context): "
               "CUAWAIT_LOG=error names each",
               static_cast<unsigned long long>(r.failures)),
        {{"failed waits", num(r.failures), ""}, {"completed waits", num(r.completions), ""}});
  }

  void single_stream() {
    const reactor_stats& r = m_s.reactor;
    if (r.submitted < m_t.min_waits || r.peak_pending < m_t.single_stream_min_peak_pending ||
        r.peak_busy_lanes > 1) {
      return;
    }
    add(doctor_rule::single_stream, doctor_severity::warning,
        format("every GPU wait was on one stream: up to %zu waits were in flight at once but "
               "their work never overlapped; give each job or stage a stream of its own "
               "(cuda::stream_pool)",
               r.peak_pending),
        {{"waits", num(r.submitted), ""},
         {"lanes used", num(r.lanes_created), ""},
         {"peak pending waits", num(r.peak_pending), ""},
         {"peak lanes busy at once", num(r.peak_busy_lanes), ""},
         {"mean pending waits while busy", ratio(num(r.pending_wait_ns), num(r.busy_ns)), ""}});
  }

  void default_streams() {
    const std::uint64_t all = m_s.reactor.submitted + m_s.reactor.ready;
    if (m_s.legacy_stream_waits != 0) {
      add(doctor_rule::legacy_default_stream, doctor_severity::warning,
          "GPU work awaited on the legacy default stream, which serialises with every "
          "blocking stream: use created non-blocking streams (cuda::stream)",
          {{"waits on the legacy default stream", num(m_s.legacy_stream_waits), ""},
           {"share of all waits", pct(num(m_s.legacy_stream_waits), num(all)), "%"}});
    }
    if (m_s.per_thread_stream_waits != 0) {
      add(doctor_rule::per_thread_default_stream, doctor_severity::info,
          "GPU work awaited on the per-thread default stream: waits of several threads share "
          "one lane and may be seen late (never early); give each job a stream of its own",
          {{"waits on the per-thread default stream", num(m_s.per_thread_stream_waits), ""},
           {"share of all waits", pct(num(m_s.per_thread_stream_waits), num(all)), "%"}});
    }
  }

  //! pool_too_small and cpu_bound. Returns true when the pool is saturated.
  bool pool_rules() {
    if (!m_s.pool) {
      return false;
    }
    const thread_pool_stats& p = *m_s.pool;
    if (m_s.reactor.submitted + m_s.reactor.ready == 0) {
      return false; // no GPU work awaited: a CPU-only use of the pool is not judged
    }
    const std::uint64_t measured = p.busy_ns + p.idle_ns;
    if (measured < static_cast<std::uint64_t>(m_t.min_pool_time.count()) ||
        p.busy_fraction() < m_t.busy_fraction) {
      return false;
    }
    const reactor_stats& r = m_s.reactor;
    const double gpu_busy = pct(num(r.busy_ns), num(r.age_ns));
    const bool more_cores = m_s.hardware_threads > p.workers;
    std::vector<doctor_measure> evidence{
        {"workers", num(p.workers), ""},
        {"hardware threads", num(m_s.hardware_threads), ""},
        {"workers busy", 100.0 * p.busy_fraction(), "%"},
        {"mean backlog at a pick", p.mean_backlog(), ""},
        {"time with GPU waits pending", gpu_busy, "%"},
        {"resume latency p50", us(r.resume_latency_quantile(0.5)), "us"}};
    if (p.mean_backlog() >= m_t.backlog_per_pick) {
      add(doctor_rule::pool_too_small, doctor_severity::warning,
          more_cores
              ? format("ready coroutines queue for a worker (%.1f waiting at each pick, "
                       "workers busy %.0f%%): raise runtime_options::threads (%zu now, "
                       "%zu hardware threads) or bound the jobs in flight",
                       p.mean_backlog(), 100.0 * p.busy_fraction(), p.workers, m_s.hardware_threads)
              : format("ready coroutines queue for a worker (%.1f waiting at each pick, "
                       "workers busy %.0f%%) and every core has a worker: bound the jobs "
                       "in flight, and never block a worker (await instead of blocking "
                       "calls)",
                       p.mean_backlog(), 100.0 * p.busy_fraction()),
          std::move(evidence));
      return true;
    }
    add(doctor_rule::cpu_bound, doctor_severity::warning,
        format("CPU-bound: workers busy %.0f%% of the time, so GPU work waits for the CPU; "
               "make the CPU stages cheaper or move them to the GPU%s",
               100.0 * p.busy_fraction(),
               more_cores ? ", or add threads (runtime_options::threads)" : ""),
        std::move(evidence));
    return true;
  }

  void late_detection() {
    const reactor_stats& r = m_s.reactor;
    if (r.completions < m_t.min_waits || m_s.source_notifies) {
      return;
    }
    const double share = ratio(num(r.completions_after_spin), num(r.completions));
    if (share < m_t.late_detection_share) {
      return;
    }
    const std::string strategy = m_s.strategy.empty() ? "" : " (strategy " + m_s.strategy + ")";
    add(doctor_rule::late_detection, doctor_severity::warning,
        format("GPU work outlasts the spin window: %.0f%% of completions were found by a timed "
               "poll, up to %.3g ms late%s; for long kernels use a notifying strategy "
               "(CUAWAIT_STRATEGY=host_callback) or raise reactor_options::spin_window",
               100.0 * share, ms(m_s.park_poll), strategy.c_str()),
        {{"completions", num(r.completions), ""},
         {"found after the spin window", num(r.completions_after_spin), ""},
         {"spin window", ms(m_s.spin_window), "ms"},
         {"park poll period", ms(m_s.park_poll), "ms"}});
  }

  void slow_resumption(bool saturated) {
    const reactor_stats& r = m_s.reactor;
    // With idle workers polling, the worker that finds a completion runs it next: the only
    // delay is the work queued before it on that worker, which the pool rules judge (and
    // which batches of completions found together make unavoidable). The rule is for the
    // hand-off from a reactor thread, and for reactors driven without a known pool.
    if (r.completions < m_t.min_waits || saturated || (m_s.pool && !m_s.reactor_thread)) {
      return;
    }
    const std::uint64_t p50 = r.resume_latency_quantile(0.5);
    if (p50 < static_cast<std::uint64_t>(m_t.slow_resumption_p50.count())) {
      return;
    }
    std::string advice =
        format("coroutines resume %.0f us (median) after their work was seen finished; ", us(p50));
    if (m_s.reactor_thread) {
      advice += "the reactor thread hands each to an executor whose threads are parked or "
                "busy: let idle pool workers poll (runtime_options::reactor_thread = false, "
                "CUAWAIT_REACTOR_THREAD=0)";
    } else {
      advice += "whatever polls the reactor resumes them late: poll more often, or let the "
                "idle workers of a thread_pool poll it (thread_pool::set_idle_source)";
    }
    add(doctor_rule::slow_resumption, doctor_severity::warning, std::move(advice),
        {{"resume latency p50", us(p50), "us"},
         {"resume latency p99", us(r.resume_latency_quantile(0.99)), "us"},
         {"completions", num(r.completions), ""}});
  }

  void pinned_pool() {
    if (!m_s.pinned) {
      return;
    }
    const auto& p = *m_s.pinned;
    const double requests = num(p.misses) + num(p.reuses);
    if (p.misses < m_t.pinned_min_misses ||
        ratio(num(p.misses), requests) < m_t.pinned_miss_share) {
      return;
    }
    add(doctor_rule::pinned_pool_misses, doctor_severity::warning,
        format("%zu pinned allocations missed the pool's cache and called cudaHostAlloc in the "
               "request path (about 1 ms per 4 MiB): pinned_pool::reserve() before the hot "
               "path, or raise pinned_pool_options::max_cached_bytes",
               p.misses),
        {{"misses", num(p.misses), ""},
         {"reuses", num(p.reuses), ""},
         {"miss share", pct(num(p.misses), requests), "%"},
         {"bytes held", num(p.bytes_held), "B"}});
  }

  void graph_caches() {
    for (const doctor_graph_cache& g : m_s.graph_caches) {
      const graph_cache_stats& c = g.stats;
      if (c.reinstantiations >= m_t.graph_min_reinstantiations &&
          ratio(num(c.reinstantiations), num(c.hits)) >= m_t.graph_reinstantiation_share) {
        add(doctor_rule::graph_reinstantiations, doctor_severity::warning,
            format("graph cache '%s': %llu of %llu hits were re-instantiated because the "
                   "graph's shape changed; keep a key's topology fixed, or give each shape "
                   "its own key",
                   g.name.c_str(), static_cast<unsigned long long>(c.reinstantiations),
                   static_cast<unsigned long long>(c.hits)),
            {{"hits", num(c.hits), ""},
             {"re-instantiations", num(c.reinstantiations), ""},
             {"updates in place", num(c.updates), ""}});
      }
      const double lookups = num(c.hits) + num(c.misses);
      if (c.evictions >= m_t.graph_min_evictions &&
          ratio(num(c.misses), lookups) >= m_t.graph_miss_share) {
        add(doctor_rule::graph_cache_evictions, doctor_severity::warning,
            format("graph cache '%s': %.0f%% of lookups missed and %llu entries were evicted; "
                   "raise its capacity (%zu entries now) to hold the keys in use",
                   g.name.c_str(), pct(num(c.misses), lookups),
                   static_cast<unsigned long long>(c.evictions), c.size),
            {{"lookups", lookups, ""},
             {"misses", num(c.misses), ""},
             {"evictions", num(c.evictions), ""}});
      }
    }
  }

  void batchers() {
    for (const doctor_batcher& b : m_s.batchers) {
      const batch_stats& st = b.stats;
      if (b.max_batch == 0 || st.batches < m_t.batch_min_batches) {
        continue;
      }
      const double fill = st.mean_batch() / static_cast<double>(b.max_batch);
      if (fill >= m_t.batch_fill) {
        continue;
      }
      // Most went at once because none of the batcher's batches was on the GPU: the jobs come
      // slower than the GPU runs them, so waiting for company would only add latency.
      const bool idle = 2 * st.idle_batches >= st.batches;
      add(doctor_rule::batches_underfilled, idle ? doctor_severity::info : doctor_severity::warning,
          idle ? format("batcher '%s': batches went out %.0f%% full on average (%.1f of %zu jobs), "
                        "%.0f%% of them at once because none was on the GPU: the jobs come "
                        "slower than the GPU runs them, so batching costs them no latency and "
                        "saves little; submit them without a batcher if that is the usual load",
                        b.name.c_str(), 100.0 * fill, st.mean_batch(), b.max_batch,
                        pct(num(st.idle_batches), num(st.batches)))
               : format("batcher '%s': batches went out %.0f%% full on average (%.1f of %zu "
                        "jobs; %.0f%% left on max_wait): raise batch_options::max_wait, lower "
                        "max_batch, or submit these jobs without a batcher",
                        b.name.c_str(), 100.0 * fill, st.mean_batch(), b.max_batch,
                        pct(num(st.timed_batches), num(st.batches))),
          {{"batches", num(st.batches), ""},
           {"jobs", num(st.jobs), ""},
           {"mean fill", 100.0 * fill, "%"},
           {"lone jobs", num(st.lone_jobs), ""},
           {"mean added latency", st.mean_wait_us(), "us"}});
    }
  }

  const doctor_snapshot& m_s;
  const doctor_thresholds& m_t;
  std::vector<doctor_finding> m_out;
};

std::string summary_of(const doctor_snapshot& s) {
  const reactor_stats& r = s.reactor;
  std::string out =
      format("cuawait doctor: %llu GPU waits (%llu more were ready at once) on %llu lanes over "
             "%.3g s; waits pending %.0f%% of the time; resume latency p50 ",
             static_cast<unsigned long long>(r.submitted), static_cast<unsigned long long>(r.ready),
             static_cast<unsigned long long>(r.lanes_created), static_cast<double>(r.age_ns) / 1e9,
             pct(num(r.busy_ns), num(r.age_ns)));
  out += show(us(r.resume_latency_quantile(0.5))) + " us, p99 " +
         show(us(r.resume_latency_quantile(0.99))) + " us";
  if (s.pool) {
    out += format("; pool of %zu workers busy %.0f%%", s.pool->workers,
                  100.0 * s.pool->busy_fraction());
  }
  if (!s.strategy.empty()) {
    out += "; strategy " + s.strategy;
  }
  return out;
}

} // namespace

const char* to_string(doctor_severity s) noexcept {
  switch (s) {
  case doctor_severity::info:
    return "info";
  case doctor_severity::warning:
    return "warning";
  case doctor_severity::error:
    return "error";
  }
  return "?";
}

const char* to_string(doctor_rule r) noexcept {
  switch (r) {
  case doctor_rule::wait_failures:
    return "wait_failures";
  case doctor_rule::single_stream:
    return "single_stream";
  case doctor_rule::legacy_default_stream:
    return "legacy_default_stream";
  case doctor_rule::per_thread_default_stream:
    return "per_thread_default_stream";
  case doctor_rule::late_detection:
    return "late_detection";
  case doctor_rule::slow_resumption:
    return "slow_resumption";
  case doctor_rule::pool_too_small:
    return "pool_too_small";
  case doctor_rule::cpu_bound:
    return "cpu_bound";
  case doctor_rule::pinned_pool_misses:
    return "pinned_pool_misses";
  case doctor_rule::graph_reinstantiations:
    return "graph_reinstantiations";
  case doctor_rule::graph_cache_evictions:
    return "graph_cache_evictions";
  case doctor_rule::batches_underfilled:
    return "batches_underfilled";
  }
  return "?";
}

const doctor_finding* doctor_report::find(doctor_rule r) const noexcept {
  for (const doctor_finding& f : findings) {
    if (f.rule == r) {
      return &f;
    }
  }
  return nullptr;
}

std::string doctor_report::to_string() const {
  std::string out = summary + "\n";
  if (findings.empty()) {
    out += "  no findings\n";
  }
  for (const doctor_finding& f : findings) {
    out += "  ";
    out += cuawait::to_string(f.severity);
    out += " ";
    out += cuawait::to_string(f.rule);
    out += ": " + f.advice + "\n    evidence:";
    const char* sep = " ";
    for (const doctor_measure& m : f.evidence) {
      out += sep + m.name + " " + show(m.value) + (m.unit.empty() ? "" : " " + m.unit);
      sep = ", ";
    }
    out += "\n";
  }
  return out;
}

std::ostream& operator<<(std::ostream& os, const doctor_report& r) { return os << r.to_string(); }

doctor_snapshot doctor::snapshot(const completion_reactor& reactor, const thread_pool* pool) {
  doctor_snapshot s;
  s.reactor = reactor.stats();
  s.spin_window = reactor.options().spin_window;
  s.park_poll = reactor.options().park_poll;
  s.reactor_thread = reactor.options().start_thread;
  s.source_notifies = reactor.source().notifies();
  if (pool != nullptr) {
    s.pool = pool->stats();
  }
  s.hardware_threads = std::thread::hardware_concurrency();
  return s;
}

doctor_report doctor::examine(const doctor_snapshot& s) const {
  doctor_report r;
  r.summary = summary_of(s);
  r.findings = examination(s, m_thresholds).run();
  return r;
}

} // namespace cuawait
