// SPDX-License-Identifier: Apache-2.0
// The pipeline benchmark's grid run (--grid): jobs per cell, medians, the ratio tables
// against threads_per_job and the JSON document.

#include "../grid.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace {

using namespace cuawait::bench;

constexpr std::int64_t kib = 1024;
constexpr std::int64_t mib = 1024 * 1024;

std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) {
    ++n;
  }
  return n;
}

mode_run run(const std::string& mode, std::int64_t bytes, int conc, double us_per_job,
             int rep = 0) {
  mode_run r;
  r.mode = mode;
  r.family = mode.rfind("threads", 0) == 0 ? "baseline" : "cuawait";
  r.bytes = bytes;
  r.concurrency = conc;
  r.repetition = rep;
  r.jobs = 1000;
  r.seconds = us_per_job * 1e-6 * 1000;
  return r;
}

TEST(PipelineGrid, JobsPerCellFollowTheByteBudgetWithinItsBounds) {
  constexpr std::int64_t budget = grid_default_cell_bytes; // 256 MiB
  EXPECT_EQ(grid_jobs(budget, 4 * kib, 2), grid_max_jobs); // 65,536 capped
  EXPECT_EQ(grid_jobs(budget, 64 * kib, 16), 4096);
  EXPECT_EQ(grid_jobs(budget, 256 * kib, 2), 1024);
  EXPECT_EQ(grid_jobs(budget, 1 * mib, 32), 256);
  EXPECT_EQ(grid_jobs(budget, 4 * mib, 2), grid_min_jobs); // 64 raised to the minimum
  EXPECT_EQ(grid_jobs(budget, 64 * mib, 16), grid_min_jobs);
  EXPECT_EQ(grid_jobs(budget, 64 * mib, 32), 8 * 32); // every pipeline carries 8 jobs
}

TEST(PipelineGrid, DefaultGridMovesAboutAHundredGibPerModeAndRepetition) {
  // What keeps the default grid (3 modes x 3 repetitions) near 4 minutes on an H200 at
  // ~55 GB/s each way: a bound on the bytes it moves, not a timing.
  double bytes = 0;
  for (const std::int64_t b : grid_default_bytes) {
    for (const int c : grid_default_levels) {
      bytes += static_cast<double>(grid_jobs(grid_default_cell_bytes, b, c)) * b;
    }
  }
  EXPECT_GT(bytes, 50.0 * (1 << 30));
  EXPECT_LT(bytes, 120.0 * (1 << 30));
}

TEST(PipelineGrid, MedianAndSizeLabels) {
  EXPECT_DOUBLE_EQ(median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_TRUE(std::isnan(median({})));
  EXPECT_EQ(size_label(4 * kib), "4 KiB");
  EXPECT_EQ(size_label(64 * mib), "64 MiB");
  EXPECT_EQ(size_label(1536 * kib), "1536 KiB");
  EXPECT_EQ(size_label(1000), "1000 B");
}

std::vector<mode_run> two_by_two() {
  std::vector<mode_run> runs;
  for (const std::int64_t b : {64 * kib, 32 * mib}) {
    for (const int c : {2, 4}) {
      for (int rep = 0; rep < 3; ++rep) {
        runs.push_back(run("threads_per_job", b, c, 10.0 + rep, rep));  // median 11
        runs.push_back(run("coro_batched_pool", b, c, 5.5 - rep, rep)); // median 4.5
        runs.push_back(run("coro_per_op_pool", b, c, 22, rep));
      }
    }
  }
  return runs;
}

std::vector<grid_size> sizes() {
  std::vector<grid_size> s(2);
  s[0].bytes = 64 * kib;
  s[0].floor.floor_us = 1.2;
  s[1].bytes = 32 * mib;
  s[1].floor.floor_us = 600;
  return s;
}

TEST(PipelineGrid, CellsTakeTheMedianAndFailWhenAnyRepetitionFailed) {
  std::vector<mode_run> runs = two_by_two();
  const grid_cell ref = find_cell(runs, "threads_per_job", 64 * kib, 2);
  const grid_cell coro = find_cell(runs, "coro_batched_pool", 64 * kib, 2);
  EXPECT_EQ(ref.us.size(), 3u);
  EXPECT_DOUBLE_EQ(ref.median_us(), 11);
  EXPECT_DOUBLE_EQ(coro.median_us(), 4.5);
  EXPECT_NEAR(cell_ratio(ref, coro), 11 / 4.5, 1e-12);
  runs[1].mismatches = 1; // one wrong repetition fails the cell
  const grid_cell wrong = find_cell(runs, "coro_batched_pool", 64 * kib, 2);
  EXPECT_TRUE(wrong.any_failed);
  EXPECT_TRUE(std::isnan(cell_ratio(ref, wrong)));
}

TEST(PipelineGrid, OneTablePerModePairWithRatiosAgainstTheReference) {
  std::vector<mode_run> runs = two_by_two();
  runs.push_back(run("coro_per_op_pool", 32 * mib, 8, 1));
  runs.back().skipped = "skipped: too big";
  const std::string t = format_grid_tables(runs, sizes(), {2, 4, 8}, 3, grid_reference_mode);
  EXPECT_EQ(count(t, "grid: threads_per_job us/job / "), 2u) << t;
  EXPECT_NE(t.find("/ coro_batched_pool us/job"), std::string::npos);
  EXPECT_NE(t.find("/ coro_per_op_pool us/job"), std::string::npos);
  EXPECT_NE(t.find("2.44"), std::string::npos) << t; // 11 / 4.5
  EXPECT_NE(t.find("0.50"), std::string::npos) << t; // 11 / 22
  EXPECT_NE(t.find("11.00"), std::string::npos) << t;
  EXPECT_NE(t.find("skip"), std::string::npos) << t;
  EXPECT_NE(t.find("32 MiB"), std::string::npos);
  EXPECT_NE(t.find("600.00"), std::string::npos) << t; // the floor beside the reference
}

TEST(PipelineGrid, JsonCarriesSizesCellsAndEveryRun) {
  const std::vector<mode_run> runs = two_by_two();
  run_header h;
  h.opts.grid = true;
  h.opts.concurrency = {2, 4};
  const std::string json = make_grid_json(h, sizes(), runs, grid_reference_mode);
  EXPECT_NE(json.find("\"reference_mode\": \"threads_per_job\""), std::string::npos);
  EXPECT_NE(json.find("\"grid\": true"), std::string::npos);
  // 2 sizes x 2 levels x 3 modes cells, then 36 runs.
  EXPECT_EQ(count(json, "\"us_per_job_median\""), 12u);
  EXPECT_EQ(count(json, "\"repetition\""), runs.size());
  EXPECT_NE(json.find("\"us_per_job_median\": 4.5"), std::string::npos) << json;
  EXPECT_NE(json.find("\"reference_over_mode\": 0.5"), std::string::npos) << json;
  EXPECT_NE(json.find("\"ok\": true\n}"), std::string::npos); // overall verdict last
}

TEST(PipelineGrid, BestBaselineIsTakenPerJobSize) {
  std::vector<mode_run> runs{run("threads_per_job", 4 * kib, 2, 5),
                             run("threads_per_job", 64 * mib, 2, 1200),
                             run("threads_per_op", 64 * mib, 4, 1100)};
  EXPECT_EQ(best_baseline(runs)->bytes, 4 * kib);
  const mode_run* big = best_baseline(runs, 64 * mib);
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(big->mode, "threads_per_op");
  EXPECT_EQ(best_baseline(runs, 1 * mib), nullptr);
}

} // namespace
