// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The results of a run: one record per mode run, the best baseline, the ratios to the
//! floor and to the best baseline, and their three renderings (terminal table, JSON, SVG).
//! CPU-only, so tests cover it.

#include "floor.hpp"
#include "json_writer.hpp"
#include "options.hpp"
#include "svg_plot.hpp"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace cuawait::bench {

//! One mode run at one concurrency level.
struct mode_run {
  std::string mode;
  //! "baseline" or "cuawait".
  std::string family;
  int concurrency = 1;
  //! Bytes per job of the run's workload.
  std::int64_t bytes = 0;
  //! Which repetition of its grid cell the run was (0 outside grid runs).
  int repetition = 0;
  //! Host threads the mode used (driving thread included).
  int threads = 1;
  std::int64_t jobs = 0;
  //! Wall time of the timed region.
  double seconds = NAN;
  //! Set when the run could not start (e.g. "skipped: at most 1024 streams").
  std::string skipped;
  //! The error that stopped the run, if any (the run then counts as failed).
  std::string error;
  std::int64_t jobs_checked = 0;
  std::int64_t samples_checked = 0;
  std::int64_t jobs_not_once = 0;
  std::int64_t mismatches = 0;
  //! Peak host RSS increase during the run (scaling runs), bytes.
  double rss_delta_bytes = NAN;

  [[nodiscard]] bool ran() const noexcept { return skipped.empty() && error.empty(); }
  [[nodiscard]] bool ok() const noexcept {
    return skipped.empty() && error.empty() && jobs_not_once == 0 && mismatches == 0;
  }
  [[nodiscard]] double us_per_job() const noexcept {
    return ran() && jobs > 0 ? seconds * 1e6 / static_cast<double>(jobs) : NAN;
  }
  [[nodiscard]] double rss_per_pipeline() const noexcept {
    return rss_delta_bytes / static_cast<double>(concurrency);
  }
};

//! The fastest correct baseline run (of jobs of `bytes` bytes; of any size when negative),
//! or nullptr when none ran.
[[nodiscard]] inline const mode_run* best_baseline(const std::vector<mode_run>& runs,
                                                   std::int64_t bytes = -1) noexcept {
  const mode_run* best = nullptr;
  for (const mode_run& r : runs) {
    if (r.family == "baseline" && r.ok() && std::isfinite(r.us_per_job()) &&
        (bytes < 0 || r.bytes == bytes) &&
        (best == nullptr || r.us_per_job() < best->us_per_job())) {
      best = &r;
    }
  }
  return best;
}

//! Speed-up of `r` over `best` (best µs / r's µs: above 1 is faster). NaN without either.
[[nodiscard]] inline double speedup(const mode_run& r, const mode_run* best) noexcept {
  return best != nullptr && r.ok() ? best->us_per_job() / r.us_per_job() : NAN;
}

namespace detail {
inline std::string fmt(const char* f, double v) {
  if (!std::isfinite(v)) {
    return "-";
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}
} // namespace detail

//! The terminal table: per mode run, µs per job, floor / measured, speed-up over the best
//! baseline and the check; RSS per pipeline in scaling runs.
[[nodiscard]] inline std::string format_table(const std::vector<mode_run>& runs,
                                              const floor_terms& floor, bool scaling) {
  const mode_run* best = best_baseline(runs);
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "%-20s %7s %7s %9s %10s %12s %12s %9s  %s\n", "mode", "conc",
                "threads", "jobs", "us/job", "floor/meas", "vs best base", "RSS/pipe", "check");
  out += line;
  out += std::string(110, '-') + "\n";
  for (const mode_run& r : runs) {
    std::string check;
    if (!r.skipped.empty()) {
      check = r.skipped;
    } else if (!r.error.empty()) {
      check = "FAILED: " + r.error;
    } else if (!r.ok()) {
      check = "WRONG: " + std::to_string(r.mismatches) + " mismatches, " +
              std::to_string(r.jobs_not_once) + " jobs not completed once";
    } else {
      check = "ok (" + std::to_string(r.samples_checked) + " samples)";
    }
    std::snprintf(line, sizeof line, "%-20s %7d %7d %9lld %10s %12s %12s %9s  ", r.mode.c_str(),
                  r.concurrency, r.threads, static_cast<long long>(r.jobs),
                  detail::fmt("%.2f", r.us_per_job()).c_str(),
                  detail::fmt("%.3f", floor_ratio(floor.floor_us, r.us_per_job())).c_str(),
                  detail::fmt("%.2fx", speedup(r, best)).c_str(),
                  scaling ? detail::fmt("%.1fK", r.rss_per_pipeline() / 1024).c_str() : "-");
    out += line + check + "\n";
  }
  std::snprintf(line, sizeof line,
                "floor %.2f us/job (%s): H2D %.2f, D2H %.2f, both ways %.2f, kernels %.2f, CPU "
                "%.2f\n",
                floor.floor_us, floor.limit.c_str(), floor.h2d_us, floor.d2h_us, floor.both_us,
                floor.kernel_us, floor.cpu_us);
  out += line;
  if (best != nullptr) {
    std::snprintf(line, sizeof line, "best baseline: %s at %d, %.2f us/job\n", best->mode.c_str(),
                  best->concurrency, best->us_per_job());
    out += line;
  } else {
    out += "best baseline: none ran\n";
  }
  return out;
}

//! The plot: one line per mode, µs per job against concurrency, the floor dashed.
[[nodiscard]] inline plot_spec make_plot(const std::vector<mode_run>& runs,
                                         const floor_terms& floor, const std::string& title) {
  plot_spec spec;
  spec.title = title;
  std::map<std::string, std::size_t> index;
  for (const mode_run& r : runs) {
    if (!r.ok()) {
      continue;
    }
    auto [it, inserted] = index.try_emplace(r.mode, spec.series.size());
    if (inserted) {
      spec.series.push_back({r.mode, {}});
    }
    spec.series[it->second].points.emplace_back(r.concurrency, r.us_per_job());
  }
  spec.hlines.push_back({"floor (" + floor.limit + ")", floor.floor_us});
  return spec;
}

//! The machine the run measured.
struct machine_info {
  std::string gpu_name;
  int device = 0;
  int sms = 0;
  int compute_major = 0;
  int compute_minor = 0;
  double gpu_memory_bytes = 0;
  int driver_version = 0;
  int runtime_version = 0;
  int host_cores = 0;
  std::string host_cpu;
  std::string host_name;
};

//! Everything for the JSON document besides the runs.
struct run_header {
  std::string program = "cuawait-bench-pipeline";
  std::string date_utc;
  std::string command_line;
  options opts;
  machine_info machine;
  floor_measurements measured;
  floor_terms floor;
  int pool_threads = 0;
};

namespace detail {
inline void write_parameters(json_writer& j, const run_header& h) {
  j.key("parameters").begin_object();
  j.field("preset", h.opts.preset_name)
      .field("jobs", h.opts.w.jobs)
      .field("bytes", h.opts.w.bytes)
      .field("iters", h.opts.w.iters)
      .field("cpu_us", h.opts.w.cpu_us)
      .field("threads", h.pool_threads)
      .field("samples", h.opts.samples)
      .field("quick", h.opts.quick)
      .field("scaling", h.opts.scaling)
      .field("grid", h.opts.grid);
  j.key("concurrency").begin_array();
  for (const int c : h.opts.concurrency) {
    j.value(c);
  }
  j.end_array();
  j.key("modes").begin_array();
  for (const std::string& m : h.opts.modes) {
    j.value(m);
  }
  j.end_array();
  j.key("batch").begin_object();
  j.field("max_batch", h.opts.batch.max_batch) // 0: automatic (auto_max_batch)
      .field("wait_us", h.opts.batch.wait_us)
      .field("in_flight", h.opts.batch.in_flight)
      .field("streams", h.opts.batch.streams);
  j.end_object().end_object();
}

inline void write_machine(json_writer& j, const machine_info& m) {
  j.key("machine").begin_object();
  j.field("gpu", m.gpu_name)
      .field("device", m.device)
      .field("sms", m.sms)
      .field("compute_capability",
             std::to_string(m.compute_major) + "." + std::to_string(m.compute_minor))
      .field("gpu_memory_bytes", m.gpu_memory_bytes)
      .field("driver_version", m.driver_version)
      .field("runtime_version", m.runtime_version)
      .field("host_cores", m.host_cores)
      .field("host_cpu", m.host_cpu)
      .field("host_name", m.host_name)
      .end_object();
}

//! The floor's measurements and terms, as the value of the current key.
inline void write_floor(json_writer& j, const floor_measurements& fm, const floor_terms& f) {
  j.begin_object()
      .field("h2d_bytes_per_s", fm.h2d_bytes_per_s)
      .field("d2h_bytes_per_s", fm.d2h_bytes_per_s)
      .field("both_ways_bytes_per_s", fm.both_bytes_per_s)
      .field("kernel_us_per_job", fm.kernel_us_per_job)
      .field("cpu_us_per_job_one_thread", fm.cpu_us_per_job_one_thread)
      .field("cores", fm.cores)
      .field("h2d_us", f.h2d_us)
      .field("d2h_us", f.d2h_us)
      .field("both_ways_us", f.both_us)
      .field("kernel_us", f.kernel_us)
      .field("cpu_us", f.cpu_us)
      .field("floor_us", f.floor_us)
      .field("limit", f.limit)
      .end_object();
}

//! The best baseline run (or null), as the value of the current key.
inline void write_best(json_writer& j, const mode_run* best) {
  if (best != nullptr) {
    j.begin_object()
        .field("mode", best->mode)
        .field("concurrency", best->concurrency)
        .field("us_per_job", best->us_per_job())
        .end_object();
  } else {
    j.value(NAN);
  }
}

//! One run's record, an element of the current array.
inline void write_run(json_writer& j, const mode_run& r, double floor_us, const mode_run* best) {
  j.begin_object()
      .field("mode", r.mode)
      .field("family", r.family)
      .field("concurrency", r.concurrency)
      .field("bytes", r.bytes)
      .field("repetition", r.repetition)
      .field("threads", r.threads)
      .field("jobs", r.jobs)
      .field("seconds", r.seconds)
      .field("us_per_job", r.us_per_job())
      .field("jobs_per_s", r.ran() ? static_cast<double>(r.jobs) / r.seconds : NAN)
      .field("floor_over_measured", floor_ratio(floor_us, r.us_per_job()))
      .field("speedup_over_best_baseline", speedup(r, best))
      .field("ok", r.ok())
      .field("skipped", r.skipped)
      .field("error", r.error)
      .field("jobs_checked", r.jobs_checked)
      .field("samples_checked", r.samples_checked)
      .field("jobs_not_completed_once", r.jobs_not_once)
      .field("mismatches", r.mismatches)
      .field("rss_delta_bytes", r.rss_delta_bytes)
      .field("rss_bytes_per_pipeline", r.rss_per_pipeline())
      .end_object();
}
} // namespace detail

//! The JSON document: parameters, machine, floor (measurements and terms), every run with
//! its ratios, the best baseline and the overall verdict; `extra`, when given, adds keys
//! of its own at the end (a spread run's "spread").
[[nodiscard]] inline std::string make_json(const run_header& h, const std::vector<mode_run>& runs,
                                           const std::function<void(json_writer&)>& extra = {}) {
  json_writer j;
  j.begin_object();
  j.field("program", h.program).field("date_utc", h.date_utc).field("command_line", h.command_line);
  detail::write_parameters(j, h);
  detail::write_machine(j, h.machine);
  j.key("floor");
  detail::write_floor(j, h.measured, h.floor);
  const mode_run* best = best_baseline(runs);
  j.key("best_baseline");
  detail::write_best(j, best);
  bool all_ok = true;
  j.key("runs").begin_array();
  for (const mode_run& r : runs) {
    all_ok = all_ok && (r.ok() || !r.skipped.empty());
    detail::write_run(j, r, h.floor.floor_us, best);
  }
  j.end_array();
  j.field("ok", all_ok);
  if (extra) {
    extra(j);
  }
  j.end_object();
  return j.str() + "\n";
}

} // namespace cuawait::bench
