// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The grid run (`--grid`): job sizes x concurrency levels, each cell running the
//! reference `threads_per_job` and the other selected modes `--repeat` times. This file
//! turns its runs into the ratio tables (reference µs/job / mode µs/job, medians) and the
//! JSON document. CPU-only, so tests cover it.

#include "results.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace cuawait::bench {

//! One job size of a grid run and its floor, measured before its cells ran.
struct grid_size {
  std::int64_t bytes = 0;
  floor_measurements measured;
  floor_terms floor;
};

//! "4 KiB", "64 MiB", or "1000 B" when not a whole number of KiB.
[[nodiscard]] inline std::string size_label(std::int64_t bytes) {
  if (bytes >= (std::int64_t{1} << 20) && bytes % (std::int64_t{1} << 20) == 0) {
    return std::to_string(bytes >> 20) + " MiB";
  }
  if (bytes >= 1024 && bytes % 1024 == 0) {
    return std::to_string(bytes >> 10) + " KiB";
  }
  return std::to_string(bytes) + " B";
}

//! The median of `v` (the mean of the middle two for an even count); NaN when empty.
[[nodiscard]] inline double median(std::vector<double> v) {
  if (v.empty()) {
    return NAN;
  }
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2;
}

//! What the repetitions of one mode in one cell came to.
struct grid_cell {
  //! µs per job of each repetition (NaN for one that failed or was skipped).
  std::vector<double> us;
  std::int64_t jobs = 0;
  std::string family;
  bool any_failed = false;
  bool any_skipped = false;
  //! The median over the repetitions when every one ran correctly, else NaN.
  [[nodiscard]] double median_us() const { return any_failed || any_skipped ? NAN : median(us); }
};

//! The repetitions of `mode` at (`bytes`, `level`) among `runs`.
[[nodiscard]] inline grid_cell find_cell(const std::vector<mode_run>& runs, const std::string& mode,
                                         std::int64_t bytes, int level) {
  grid_cell c;
  for (const mode_run& r : runs) {
    if (r.mode != mode || r.bytes != bytes || r.concurrency != level) {
      continue;
    }
    c.jobs = r.jobs;
    c.family = r.family;
    c.us.push_back(r.ok() ? r.us_per_job() : NAN);
    c.any_skipped = c.any_skipped || !r.skipped.empty();
    c.any_failed = c.any_failed || (r.skipped.empty() && !r.ok());
  }
  return c;
}

//! The modes among `runs`, in order of first appearance.
[[nodiscard]] inline std::vector<std::string> modes_of(const std::vector<mode_run>& runs) {
  std::vector<std::string> modes;
  for (const mode_run& r : runs) {
    if (std::find(modes.begin(), modes.end(), r.mode) == modes.end()) {
      modes.push_back(r.mode);
    }
  }
  return modes;
}

//! reference µs/job / mode µs/job of one cell (above 1: the mode is faster); NaN unless
//! both ran correctly in every repetition.
[[nodiscard]] inline double cell_ratio(const grid_cell& reference, const grid_cell& mode) {
  const double ref = reference.median_us();
  const double m = mode.median_us();
  return std::isfinite(ref) && std::isfinite(m) && m > 0 ? ref / m : NAN;
}

namespace detail {
//! A table cell: the value, or why there is none.
inline std::string cell_text(const grid_cell& c, double v, const char* f) {
  if (c.us.empty()) {
    return "-";
  }
  if (c.any_failed) {
    return "FAIL";
  }
  if (c.any_skipped) {
    return "skip";
  }
  return fmt(f, v);
}

inline std::string grid_header(const char* first, const std::vector<int>& levels, bool floor) {
  char buf[32];
  std::string line;
  std::snprintf(buf, sizeof buf, "%-10s", first);
  line += buf;
  if (floor) {
    std::snprintf(buf, sizeof buf, " %8s", "floor");
    line += buf;
  }
  for (const int c : levels) {
    std::snprintf(buf, sizeof buf, " %8d", c);
    line += buf;
  }
  return line + "\n";
}
} // namespace detail

//! The grid's tables: the reference's µs per job (medians) beside each size's floor, then
//! per other mode reference µs/job / mode µs/job (>1: the mode is faster). Columns are
//! the concurrency levels, rows the job sizes. FAIL: a repetition failed or was wrong.
[[nodiscard]] inline std::string format_grid_tables(const std::vector<mode_run>& runs,
                                                    const std::vector<grid_size>& sizes,
                                                    const std::vector<int>& levels, int repeat,
                                                    const std::string& reference) {
  std::string out;
  char buf[64];
  out += "grid: " + reference + " us/job (median of " + std::to_string(repeat) +
         "), the floor us/job beside it\n";
  out += detail::grid_header("size", levels, true);
  for (const grid_size& s : sizes) {
    std::snprintf(buf, sizeof buf, "%-10s %8s", size_label(s.bytes).c_str(),
                  detail::fmt("%.2f", s.floor.floor_us).c_str());
    out += buf;
    for (const int c : levels) {
      const grid_cell ref = find_cell(runs, reference, s.bytes, c);
      std::snprintf(buf, sizeof buf, " %8s",
                    detail::cell_text(ref, ref.median_us(), "%.2f").c_str());
      out += buf;
    }
    out += "\n";
  }
  for (const std::string& mode : modes_of(runs)) {
    if (mode == reference) {
      continue;
    }
    out += "\ngrid: " + reference + " us/job / " + mode + " us/job (medians of " +
           std::to_string(repeat) + "; >1: " + mode + " faster)\n";
    out += detail::grid_header("size", levels, false);
    for (const grid_size& s : sizes) {
      std::snprintf(buf, sizeof buf, "%-10s", size_label(s.bytes).c_str());
      out += buf;
      for (const int c : levels) {
        const grid_cell ref = find_cell(runs, reference, s.bytes, c);
        const grid_cell m = find_cell(runs, mode, s.bytes, c);
        std::string text = detail::cell_text(m, cell_ratio(ref, m), "%.2f");
        if (text != "FAIL" && text != "skip" && !m.us.empty() && !std::isfinite(ref.median_us())) {
          text = "noref"; // the mode ran, the reference did not
        }
        std::snprintf(buf, sizeof buf, " %8s", text.c_str());
        out += buf;
      }
      out += "\n";
    }
  }
  return out;
}

//! The grid's JSON document: program, date, command line, parameters, machine, then
//! `grid` (reference mode, repetitions, sizes with their floors, levels, and one record per
//! mode and cell: jobs, median and every repetition's µs per job, the ratio to the
//! reference, floor / measured), `runs` (every run, as in the ordinary document, with its
//! size and repetition; ratios against its size's floor and best baseline) and `ok`.
[[nodiscard]] inline std::string make_grid_json(const run_header& h,
                                                const std::vector<grid_size>& sizes,
                                                const std::vector<mode_run>& runs,
                                                const std::string& reference) {
  json_writer j;
  j.begin_object();
  j.field("program", h.program).field("date_utc", h.date_utc).field("command_line", h.command_line);
  detail::write_parameters(j, h);
  detail::write_machine(j, h.machine);
  j.key("grid").begin_object();
  j.field("reference_mode", reference)
      .field("repeat", h.opts.repeat)
      .field("cell_bytes", h.opts.grid_cell_bytes);
  j.key("sizes").begin_array();
  for (const grid_size& s : sizes) {
    j.begin_object().field("bytes", s.bytes).key("floor");
    detail::write_floor(j, s.measured, s.floor);
    j.key("best_baseline");
    detail::write_best(j, best_baseline(runs, s.bytes));
    j.end_object();
  }
  j.end_array();
  j.key("levels").begin_array();
  for (const int c : h.opts.concurrency) {
    j.value(c);
  }
  j.end_array();
  j.key("cells").begin_array();
  const std::vector<std::string> modes = modes_of(runs);
  for (const grid_size& s : sizes) {
    for (const int c : h.opts.concurrency) {
      const grid_cell ref = find_cell(runs, reference, s.bytes, c);
      for (const std::string& mode : modes) {
        const grid_cell m = find_cell(runs, mode, s.bytes, c);
        if (m.us.empty()) {
          continue;
        }
        j.begin_object()
            .field("bytes", s.bytes)
            .field("concurrency", c)
            .field("mode", mode)
            .field("family", m.family)
            .field("jobs", m.jobs)
            .field("us_per_job_median", m.median_us());
        j.key("us_per_job_runs").begin_array();
        for (const double us : m.us) {
          j.value(us);
        }
        j.end_array();
        j.field("reference_over_mode", cell_ratio(ref, m))
            .field("floor_over_measured", floor_ratio(s.floor.floor_us, m.median_us()))
            .field("ok", !m.any_failed && !m.any_skipped)
            .field("skipped", m.any_skipped)
            .end_object();
      }
    }
  }
  j.end_array().end_object();
  bool all_ok = true;
  j.key("runs").begin_array();
  for (const mode_run& r : runs) {
    all_ok = all_ok && (r.ok() || !r.skipped.empty());
    double floor_us = NAN;
    for (const grid_size& s : sizes) {
      if (s.bytes == r.bytes) {
        floor_us = s.floor.floor_us;
      }
    }
    detail::write_run(j, r, floor_us, best_baseline(runs, r.bytes));
  }
  j.end_array();
  j.field("ok", all_ok);
  j.end_object();
  return j.str() + "\n";
}

} // namespace cuawait::bench
