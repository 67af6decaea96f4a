// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! A run of cuawait-bench-pipeline spread over several processes (MPI ranks), seen without
//! MPI: the group of processes, each rank's share of a mode run's jobs, the record of its
//! part that each rank sends to rank 0, and rank 0's summary (total and per-rank
//! throughput). CPU-only, so tests cover it; mpi_group.hpp is the group over MPI.

#include "json_writer.hpp"
#include "results.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace cuawait::bench {

//! The processes a run is spread over. Called from the main thread only, between mode runs.
class process_group {
public:
  process_group() = default;
  process_group(const process_group&) = delete;
  process_group& operator=(const process_group&) = delete;
  virtual ~process_group() = default;

  //! This process's rank, 0 to size() - 1.
  [[nodiscard]] virtual int rank() const noexcept = 0;
  //! The number of processes.
  [[nodiscard]] virtual int size() const noexcept = 0;
  //! Collective: returns once every rank has called it.
  //! @throws std::runtime_error when the exchange fails
  virtual void barrier() = 0;
  //! Collective: true when every rank's `mine` is true.
  //! @throws std::runtime_error when the exchange fails
  [[nodiscard]] virtual bool all(bool mine) = 0;
  //! Collective: rank 0 gets every rank's `mine` in rank order (its own first), the others
  //! an empty vector.
  //! @throws std::runtime_error when the exchange fails
  [[nodiscard]] virtual std::vector<std::string> gather(const std::string& mine) = 0;
};

//! The jobs of a mode run of `total` jobs that rank `rank` of `size` runs: `total / size`,
//! one more for each of the first `total % size` ranks. Every rank runs job ids 0 to its
//! share - 1 (the jobs are alike: only their number matters).
[[nodiscard]] constexpr std::int64_t jobs_of_rank(std::int64_t total, int rank, int size) noexcept {
  if (size <= 1) {
    return total;
  }
  const std::int64_t n = size;
  return total / n + (rank < total % n ? 1 : 0);
}

//! `path` as rank `rank` writes it: rank 0 keeps it, the others insert ".rank<N>" before the
//! extension (t.json, t.rank1.json), so that no two processes write one file.
[[nodiscard]] inline std::string rank_path(const std::string& path, int rank) {
  if (rank == 0 || path.empty()) {
    return path;
  }
  const std::string tag = ".rank" + std::to_string(rank);
  const auto slash = path.find_last_of('/');
  const auto dot = path.find_last_of('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash + 2) || dot == 0) {
    return path + tag;
  }
  return path.substr(0, dot) + tag + path.substr(dot);
}

//! One rank's part of one mode run, as it sends it to rank 0.
struct rank_run {
  std::string mode;
  int concurrency = 1;
  std::int64_t jobs = 0;
  //! Its timed region, in seconds from the barrier that started the mode run on every rank
  //! (so that the regions of all ranks lie on one time line, whatever their hosts' clocks).
  double start_s = NAN;
  double end_s = NAN;
  //! "ok", "skipped", "failed" (an error or wrong results).
  std::string state = "failed";
  //! Why it was skipped or failed.
  std::string why;

  [[nodiscard]] bool ok() const noexcept { return state == "ok"; }
  [[nodiscard]] double seconds() const noexcept { return end_s - start_s; }
  [[nodiscard]] double jobs_per_s() const noexcept {
    return ok() && seconds() > 0 ? static_cast<double>(jobs) / seconds() : NAN;
  }
};

//! The record of `r`, whose region started `start_s` seconds after the run's barrier.
[[nodiscard]] inline rank_run rank_run_of(const mode_run& r, double start_s) {
  rank_run p;
  p.mode = r.mode;
  p.concurrency = r.concurrency;
  p.jobs = r.jobs;
  if (!r.skipped.empty()) {
    p.state = "skipped";
    p.why = r.skipped;
  } else if (!r.error.empty()) {
    p.why = r.error;
  } else if (!r.ok()) {
    p.why = "wrong results: " + std::to_string(r.mismatches) + " mismatches, " +
            std::to_string(r.jobs_not_once) + " jobs not completed once";
  } else {
    p.state = "ok";
    p.start_s = start_s;
    p.end_s = start_s + r.seconds;
  }
  return p;
}

//! A rank's records as text, one run a line, for `process_group::gather`.
[[nodiscard]] inline std::string encode_rank_runs(const std::vector<rank_run>& runs) {
  std::ostringstream out;
  out.precision(17);
  for (const rank_run& r : runs) {
    std::string why = r.why;
    std::replace(why.begin(), why.end(), '\n', ' ');
    std::replace(why.begin(), why.end(), '\r', ' ');
    out << r.mode << ' ' << r.concurrency << ' ' << r.jobs << ' ' << r.start_s << ' ' << r.end_s
        << ' ' << r.state << ' ' << why << '\n';
  }
  return out.str();
}

//! Reads the text of `encode_rank_runs`. @throws std::runtime_error for text that is not one
[[nodiscard]] inline std::vector<rank_run> decode_rank_runs(const std::string& text) {
  std::vector<rank_run> runs;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    rank_run r;
    std::string start, end;
    fields >> r.mode >> r.concurrency >> r.jobs >> start >> end >> r.state;
    if (fields.fail() || (r.state != "ok" && r.state != "skipped" && r.state != "failed")) {
      throw std::runtime_error("malformed rank record: " + line.substr(0, 80));
    }
    // "nan" is written for a region that did not run; std::stod reads it back.
    r.start_s = std::stod(start);
    r.end_s = std::stod(end);
    std::getline(fields >> std::ws, r.why);
    runs.push_back(std::move(r));
  }
  return runs;
}

//! One mode run over every rank: the ranks' parts in rank order.
struct spread_run {
  std::string mode;
  int concurrency = 1;
  std::vector<rank_run> ranks;

  [[nodiscard]] std::int64_t jobs() const noexcept {
    std::int64_t n = 0;
    for (const rank_run& r : ranks) {
      n += r.jobs;
    }
    return n;
  }
  [[nodiscard]] bool ok() const noexcept {
    return !ranks.empty() &&
           std::all_of(ranks.begin(), ranks.end(), [](const rank_run& r) { return r.ok(); });
  }
  [[nodiscard]] bool skipped() const noexcept {
    return std::any_of(ranks.begin(), ranks.end(),
                       [](const rank_run& r) { return r.state == "skipped"; });
  }
  //! From the first rank's start to the last rank's end (NaN unless every rank ran).
  [[nodiscard]] double seconds() const noexcept {
    if (!ok()) {
      return NAN;
    }
    double first = std::numeric_limits<double>::max();
    double last = std::numeric_limits<double>::lowest();
    for (const rank_run& r : ranks) {
      first = std::min(first, r.start_s);
      last = std::max(last, r.end_s);
    }
    return last - first;
  }
  //! Every rank's jobs over `seconds()`.
  [[nodiscard]] double jobs_per_s() const noexcept {
    const double s = seconds();
    return s > 0 ? static_cast<double>(jobs()) / s : NAN;
  }
  //! Empty when every rank ran and checked, else "rank N: why" for each rank that did not.
  [[nodiscard]] std::string problems() const {
    std::string p;
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      if (!ranks[i].ok()) {
        p += (p.empty() ? "" : "; ") + ("rank " + std::to_string(i) + ": ") +
             (ranks[i].why.empty() ? ranks[i].state : ranks[i].why);
      }
    }
    return p;
  }
};

//! The runs of every rank (`per_rank[r]`: rank r's records, each rank the same mode runs in
//! the same order) as spread runs. @throws std::runtime_error when the ranks' lists differ
[[nodiscard]] inline std::vector<spread_run>
merge_rank_runs(const std::vector<std::vector<rank_run>>& per_rank) {
  std::vector<spread_run> runs;
  if (per_rank.empty()) {
    return runs;
  }
  auto differs = [](std::size_t r) {
    return std::runtime_error("rank " + std::to_string(r) +
                              " ran other mode runs than rank 0 (a bug of the spread run)");
  };
  for (std::size_t r = 1; r < per_rank.size(); ++r) {
    if (per_rank[r].size() != per_rank.front().size()) {
      throw differs(r);
    }
  }
  for (std::size_t i = 0; i < per_rank.front().size(); ++i) {
    spread_run s;
    s.mode = per_rank.front()[i].mode;
    s.concurrency = per_rank.front()[i].concurrency;
    for (std::size_t r = 0; r < per_rank.size(); ++r) {
      if (per_rank[r][i].mode != s.mode || per_rank[r][i].concurrency != s.concurrency) {
        throw differs(r);
      }
      s.ranks.push_back(per_rank[r][i]);
    }
    runs.push_back(std::move(s));
  }
  return runs;
}

//! Rank 0's summary of a spread run: a table row per mode run with its total throughput
//! (every rank's jobs from the first start to the last end) and each rank's own, then the
//! same as one "[total] MODE concurrency C: N jobs/s over P processes (per rank: ...)"
//! line per mode run.
[[nodiscard]] inline std::string format_spread(const std::vector<spread_run>& runs, int processes) {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line,
                "spread over %d processes (MPI): each mode run's jobs split between the ranks, "
                "each rank running the given concurrency; total = all jobs from the first "
                "rank's start to the last rank's end\n",
                processes);
  out += line;
  std::snprintf(line, sizeof line, "%-20s %7s %9s %10s %14s  %s\n", "mode", "conc", "jobs",
                "seconds", "total jobs/s", "per rank jobs/s | check");
  out += line;
  out += std::string(100, '-') + "\n";
  for (const spread_run& s : runs) {
    std::string per_rank;
    for (const rank_run& r : s.ranks) {
      per_rank += (per_rank.empty() ? "" : " ") + detail::fmt("%.0f", r.jobs_per_s());
    }
    const std::string check =
        s.ok() ? "ok" : (s.skipped() ? "skipped: " : "FAILED: ") + s.problems();
    std::snprintf(line, sizeof line, "%-20s %7d %9lld %10s %14s  ", s.mode.c_str(), s.concurrency,
                  static_cast<long long>(s.jobs()), detail::fmt("%.4f", s.seconds()).c_str(),
                  detail::fmt("%.0f", s.jobs_per_s()).c_str());
    out += line + per_rank + " | " + check + "\n";
  }
  // The same figures, one line per mode run, for scripts to read.
  for (const spread_run& s : runs) {
    std::string per_rank;
    for (const rank_run& r : s.ranks) {
      per_rank += (per_rank.empty() ? "" : ", ") + detail::fmt("%.0f", r.jobs_per_s());
    }
    std::snprintf(line, sizeof line, "[total] %s concurrency %d: %s jobs/s over %d processes",
                  s.mode.c_str(), s.concurrency, detail::fmt("%.0f", s.jobs_per_s()).c_str(),
                  processes);
    out += line + (" (per rank: " + per_rank + ")") + (s.ok() ? "" : " FAILED") + "\n";
  }
  return out;
}

//! The spread runs as the value of the current key of `j` (the JSON document's "spread").
inline void write_spread_json(json_writer& j, const std::vector<spread_run>& runs, int processes) {
  j.begin_object().field("processes", processes);
  j.key("runs").begin_array();
  for (const spread_run& s : runs) {
    j.begin_object()
        .field("mode", s.mode)
        .field("concurrency", s.concurrency)
        .field("jobs", s.jobs())
        .field("seconds", s.seconds())
        .field("jobs_per_s", s.jobs_per_s())
        .field("ok", s.ok())
        .field("problems", s.problems());
    j.key("ranks").begin_array();
    for (const rank_run& r : s.ranks) {
      j.begin_object()
          .field("jobs", r.jobs)
          .field("start_s", r.start_s)
          .field("end_s", r.end_s)
          .field("jobs_per_s", r.jobs_per_s())
          .field("state", r.state)
          .field("why", r.why)
          .end_object();
    }
    j.end_array().end_object();
  }
  j.end_array().end_object();
}

} // namespace cuawait::bench
