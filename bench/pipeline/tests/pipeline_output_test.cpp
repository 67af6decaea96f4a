// SPDX-License-Identifier: Apache-2.0
// The pipeline benchmark's outputs: JSON writer, SVG plot, best baseline and table.

#include "../results.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>

namespace {

using namespace cuawait::bench;

std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) {
    ++n;
  }
  return n;
}

TEST(PipelineJson, WritesNestedValuesWithEscapingAndNullForNonFinite) {
  json_writer j;
  j.begin_object()
      .field("name", std::string("a\"b\\c\n\x01"))
      .field("n", std::int64_t{42})
      .field("x", 1.5)
      .field("nan", NAN)
      .field("inf", INFINITY)
      .field("ok", true);
  j.key("list").begin_array().value(1).value(2).end_array();
  j.key("empty").begin_object().end_object();
  j.end_object();
  EXPECT_EQ(j.str(), "{\n  \"name\": \"a\\\"b\\\\c\\n\\u0001\",\n  \"n\": 42,\n  \"x\": 1.5,\n"
                     "  \"nan\": null,\n  \"inf\": null,\n  \"ok\": true,\n  \"list\": [\n"
                     "    1,\n    2\n  ],\n  \"empty\": {}\n}");
}

TEST(PipelineJson, MisuseThrows) {
  json_writer j;
  j.begin_object();
  EXPECT_THROW(j.value(1), std::logic_error);
  EXPECT_THROW(j.end_array(), std::logic_error);
  EXPECT_THROW((void)j.str(), std::logic_error);
  json_writer a;
  a.begin_array();
  EXPECT_THROW(a.key("k"), std::logic_error);
}

mode_run run(std::string mode, std::string family, int conc, double seconds,
             std::int64_t jobs = 1000) {
  mode_run r;
  r.mode = std::move(mode);
  r.family = std::move(family);
  r.concurrency = conc;
  r.jobs = jobs;
  r.seconds = seconds;
  return r;
}

TEST(PipelineResults, BestBaselineIsTheFastestCorrectBaseline) {
  std::vector<mode_run> runs{
      run("sync_per_op", "baseline", 1, 0.046), run("threads_per_op", "baseline", 16, 0.0104),
      run("handsm", "baseline", 8, 0.005), run("coro_batched", "cuawait", 16, 0.001)};
  runs[2].mismatches = 1; // a wrong baseline never counts as best
  const mode_run* best = best_baseline(runs);
  ASSERT_NE(best, nullptr);
  EXPECT_EQ(best->mode, "threads_per_op");
  EXPECT_DOUBLE_EQ(best->us_per_job(), 10.4);
  EXPECT_NEAR(speedup(runs[3], best), 10.4, 1e-9);
  EXPECT_TRUE(std::isnan(speedup(runs[2], best)));
  EXPECT_EQ(best_baseline({run("coro_batched", "cuawait", 8, 1)}), nullptr);
}

TEST(PipelineResults, SkippedAndFailedRunsHaveNoTime) {
  mode_run r = run("handsm", "baseline", 100000, 1);
  r.skipped = "skipped";
  EXPECT_TRUE(std::isnan(r.us_per_job()));
  EXPECT_FALSE(r.ok());
  mode_run f = run("handsm", "baseline", 8, 1);
  f.error = "boom";
  EXPECT_FALSE(f.ok());
  EXPECT_TRUE(std::isnan(f.us_per_job()));
}

TEST(PipelineResults, TableAndJsonCarryEveryRun) {
  std::vector<mode_run> runs{run("sync_per_op", "baseline", 1, 0.046),
                             run("coro_batched", "cuawait", 16, 0.006)};
  runs[1].mismatches = 3;
  floor_terms f;
  f.floor_us = 4.7;
  f.limit = "H2D";
  const std::string table = format_table(runs, f, false);
  EXPECT_NE(table.find("sync_per_op"), std::string::npos);
  EXPECT_NE(table.find("WRONG: 3 mismatches"), std::string::npos) << table;
  EXPECT_NE(table.find("best baseline: sync_per_op"), std::string::npos);
  run_header h;
  h.floor = f;
  const std::string json = make_json(h, runs);
  EXPECT_EQ(count(json, "\"mode\": \"coro_batched\""), 1u);
  EXPECT_NE(json.find("\"floor_us\": 4.7"), std::string::npos);
  EXPECT_NE(json.find("\"ok\": false\n}"), std::string::npos) << json; // overall verdict last
}

TEST(PipelineSvg, OneLinePerModeWithAtLeastTwoPointsAndAFloorLine) {
  plot_spec spec;
  spec.title = "W1 <test> & co";
  spec.series.push_back({"threads_per_op", {{8, 11.4}, {16, 10.4}, {32, 11.5}}});
  spec.series.push_back({"sync_per_op", {{1, 46.3}}});
  spec.series.push_back({"broken", {{NAN, 1}, {0, 2}, {8, INFINITY}}});
  spec.hlines.push_back({"floor", 4.7});
  const std::string svg = render_svg(spec);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_EQ(count(svg, "<polyline"), 1u);
  EXPECT_EQ(count(svg, "<circle"), 4u);
  EXPECT_EQ(count(svg, "class=\"series\""), 3u);
  EXPECT_EQ(count(svg, "class=\"hline\""), 1u);
  EXPECT_NE(svg.find("W1 &lt;test&gt; &amp; co"), std::string::npos);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("inf"), std::string::npos);
}

TEST(PipelineSvg, EmptyPlotIsStillADocument) {
  const std::string svg = render_svg(plot_spec{});
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
}

TEST(PipelineSvg, ScalingLevelsGetPowerOfTenTicksAndOnlyCorrectRunsArePlotted) {
  std::vector<mode_run> runs;
  for (int c : {1, 10, 100, 1000, 10000, 100000}) {
    runs.push_back(run("coro_batched", "cuawait", c, 0.01, 200000));
  }
  runs.push_back(run("handsm", "baseline", 8, 0.01));
  runs.back().error = "failed";
  floor_terms f;
  f.floor_us = 0.1;
  f.limit = "H2D";
  const plot_spec spec = make_plot(runs, f, "scaling");
  ASSERT_EQ(spec.series.size(), 1u);
  EXPECT_EQ(spec.series[0].points.size(), 6u);
  const std::string svg = render_svg(spec);
  EXPECT_NE(svg.find(">100000</text>"), std::string::npos);
}

} // namespace
