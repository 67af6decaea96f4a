// SPDX-License-Identifier: Apache-2.0
// The pipeline benchmark spread over processes, without MPI: each rank's share of the jobs,
// the record each rank sends to rank 0 and rank 0's summary.

#include "../spread.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace cuawait::bench;

rank_run ran(const std::string& mode, int level, std::int64_t jobs, double start, double end) {
  rank_run r;
  r.mode = mode;
  r.concurrency = level;
  r.jobs = jobs;
  r.start_s = start;
  r.end_s = end;
  r.state = "ok";
  return r;
}

TEST(PipelineSpread, SharesCoverEveryJobOnceAndDifferByAtMostOne) {
  for (const int size : {1, 2, 3, 4, 7}) {
    for (const std::int64_t total :
         {std::int64_t{7}, std::int64_t{256}, std::int64_t{3000}, std::int64_t{3001}}) {
      std::int64_t sum = 0;
      std::int64_t lo = total;
      std::int64_t hi = 0;
      for (int r = 0; r < size; ++r) {
        const std::int64_t n = jobs_of_rank(total, r, size);
        sum += n;
        lo = std::min(lo, n);
        hi = std::max(hi, n);
      }
      EXPECT_EQ(sum, total) << total << " jobs, " << size << " ranks";
      EXPECT_LE(hi - lo, 1) << total << " jobs, " << size << " ranks";
    }
  }
  EXPECT_EQ(jobs_of_rank(3001, 0, 2), 1501);
  EXPECT_EQ(jobs_of_rank(3001, 1, 2), 1500);
  EXPECT_EQ(jobs_of_rank(5, 0, 1), 5);
}

TEST(PipelineSpread, RankPathsDifferFromRankZerosOwn) {
  EXPECT_EQ(rank_path("t.json", 0), "t.json");
  EXPECT_EQ(rank_path("t.json", 1), "t.rank1.json");
  EXPECT_EQ(rank_path("dir.d/trace", 2), "dir.d/trace.rank2");
  EXPECT_EQ(rank_path("", 3), "");
}

TEST(PipelineSpread, RecordsSurviveTheTripToRankZero) {
  mode_run ok;
  ok.mode = "coro_batched_pool";
  ok.concurrency = 16;
  ok.jobs = 1500;
  ok.seconds = 0.25;
  mode_run failed = ok;
  failed.mode = "handsm";
  failed.error = "cudaErrorMemoryAllocation: out of memory\nsecond line";
  mode_run skipped = ok;
  skipped.mode = "threads_per_op";
  skipped.skipped = "skipped: at most 8 in flight";
  mode_run wrong = ok;
  wrong.mismatches = 3;

  const std::vector<rank_run> sent{rank_run_of(ok, 0.5), rank_run_of(failed, 0.1),
                                   rank_run_of(skipped, 0), rank_run_of(wrong, 0.2)};
  const std::vector<rank_run> got = decode_rank_runs(encode_rank_runs(sent));
  ASSERT_EQ(got.size(), sent.size());
  EXPECT_EQ(got[0].mode, "coro_batched_pool");
  EXPECT_EQ(got[0].concurrency, 16);
  EXPECT_EQ(got[0].jobs, 1500);
  EXPECT_TRUE(got[0].ok());
  EXPECT_DOUBLE_EQ(got[0].start_s, 0.5);
  EXPECT_DOUBLE_EQ(got[0].end_s, 0.75);
  EXPECT_DOUBLE_EQ(got[0].jobs_per_s(), 6000);
  EXPECT_EQ(got[1].state, "failed");
  EXPECT_EQ(got[1].why, "cudaErrorMemoryAllocation: out of memory second line");
  EXPECT_TRUE(std::isnan(got[1].start_s));
  EXPECT_TRUE(std::isnan(got[1].jobs_per_s()));
  EXPECT_EQ(got[2].state, "skipped");
  EXPECT_EQ(got[2].why, "skipped: at most 8 in flight");
  EXPECT_EQ(got[3].state, "failed");
  EXPECT_EQ(got[3].why, "wrong results: 3 mismatches, 0 jobs not completed once");
  EXPECT_THROW((void)decode_rank_runs("coro 16 x\n"), std::runtime_error);
  EXPECT_THROW((void)decode_rank_runs("coro 16 10 0 1 maybe\n"), std::runtime_error);
}

TEST(PipelineSpread, TotalThroughputSpansFirstStartToLastEnd) {
  const std::vector<std::vector<rank_run>> per_rank{
      {ran("coro_per_op_pool", 8, 1500, 0.10, 1.10), ran("handsm", 8, 1500, 0.0, 0.5)},
      {ran("coro_per_op_pool", 8, 1500, 0.30, 2.10), ran("handsm", 8, 1500, 0.0, 0.5)}};
  const std::vector<spread_run> runs = merge_rank_runs(per_rank);
  ASSERT_EQ(runs.size(), 2U);
  EXPECT_EQ(runs[0].mode, "coro_per_op_pool");
  EXPECT_EQ(runs[0].jobs(), 3000);
  EXPECT_DOUBLE_EQ(runs[0].seconds(), 2.0);
  EXPECT_DOUBLE_EQ(runs[0].jobs_per_s(), 1500);
  EXPECT_DOUBLE_EQ(runs[0].ranks[0].jobs_per_s(), 1500);
  EXPECT_DOUBLE_EQ(runs[0].ranks[1].jobs_per_s(), 1500.0 / 1.8);
  EXPECT_TRUE(runs[0].ok());
  EXPECT_DOUBLE_EQ(runs[1].jobs_per_s(), 6000);

  const std::string table = format_spread(runs, 2);
  EXPECT_NE(table.find("spread over 2 processes"), std::string::npos) << table;
  EXPECT_NE(
      table.find("coro_per_op_pool           8      3000     2.0000           1500  1500 833 | ok"),
      std::string::npos)
      << table;
  EXPECT_NE(table.find("[total] coro_per_op_pool concurrency 8: 1500 jobs/s over 2 processes "
                       "(per rank: 1500, 833)\n"),
            std::string::npos)
      << table;
}

TEST(PipelineSpread, AFailureOnOneRankFailsTheRunAndIsNamed) {
  rank_run bad = ran("coro_graph", 16, 1500, NAN, NAN);
  bad.state = "failed";
  bad.why = "cudaErrorLaunchFailure";
  const std::vector<spread_run> runs =
      merge_rank_runs({{ran("coro_graph", 16, 1500, 0, 1)}, {bad}});
  ASSERT_EQ(runs.size(), 1U);
  EXPECT_FALSE(runs[0].ok());
  EXPECT_FALSE(runs[0].skipped());
  EXPECT_TRUE(std::isnan(runs[0].jobs_per_s()));
  EXPECT_EQ(runs[0].problems(), "rank 1: cudaErrorLaunchFailure");
  const std::string table = format_spread(runs, 2);
  EXPECT_NE(table.find("FAILED: rank 1: cudaErrorLaunchFailure"), std::string::npos) << table;
  EXPECT_NE(table.find("[total] coro_graph concurrency 16: - jobs/s over 2 processes (per rank: "
                       "1500, -) FAILED\n"),
            std::string::npos)
      << table;
}

TEST(PipelineSpread, RanksThatRanOtherRunsAreABug) {
  EXPECT_THROW((void)merge_rank_runs({{ran("a", 8, 1, 0, 1)}, {ran("b", 8, 1, 0, 1)}}),
               std::runtime_error);
  EXPECT_THROW((void)merge_rank_runs({{ran("a", 8, 1, 0, 1)}, {ran("a", 16, 1, 0, 1)}}),
               std::runtime_error);
  EXPECT_THROW((void)merge_rank_runs({{ran("a", 8, 1, 0, 1)}, {}}), std::runtime_error);
}

TEST(PipelineSpread, JsonHasTheTotalAndEveryRank) {
  const std::vector<spread_run> runs = merge_rank_runs(
      {{ran("coro_per_op_pool", 8, 2, 0, 1)}, {ran("coro_per_op_pool", 8, 2, 0, 2)}});
  json_writer j;
  j.begin_object().key("spread");
  write_spread_json(j, runs, 2);
  j.end_object();
  const std::string s = j.str();
  EXPECT_NE(s.find("\"processes\": 2,"), std::string::npos) << s;
  EXPECT_NE(s.find("\"jobs\": 4,"), std::string::npos) << s;       // the total
  EXPECT_NE(s.find("\"jobs_per_s\": 2,"), std::string::npos) << s; // 4 jobs in 2 s
  EXPECT_NE(s.find("\"jobs_per_s\": 1,"), std::string::npos) << s; // rank 1: 2 in 2 s
  EXPECT_NE(s.find("\"ranks\": ["), std::string::npos) << s;
}

} // namespace
