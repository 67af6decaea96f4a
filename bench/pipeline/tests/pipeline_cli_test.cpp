// SPDX-License-Identifier: Apache-2.0
// cuawait-bench-pipeline's command line: presets, overrides, validation naming the option.

#include "../cli.hpp"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

namespace {

using namespace cuawait::bench;

const std::vector<mode_description> test_modes{
    {"sync_per_op", "baseline", "traditional blocking loop"},
    {"threads_per_op", "baseline", "threads"},
    {"coro_batched", "cuawait", "one await per job"},
};

struct parsed {
  parse_outcome outcome;
  std::string out;
  std::string err;
};

parsed parse(std::vector<std::string> args,
             const std::vector<mode_description>& modes = test_modes) {
  args.insert(args.begin(), "cuawait-bench-pipeline");
  std::vector<const char*> argv;
  for (const std::string& a : args) {
    argv.push_back(a.c_str());
  }
  std::ostringstream out, err;
  parsed p{parse_command_line(static_cast<int>(argv.size()), argv.data(), modes, out, err), {}, {}};
  p.out = out.str();
  p.err = err.str();
  return p;
}

TEST(PipelineCli, DefaultsAreW1AtEightSixteenThirtyTwo) {
  const parsed p = parse({});
  ASSERT_TRUE(p.outcome.opts.has_value());
  const options& o = *p.outcome.opts;
  EXPECT_EQ(o.preset_name, "W1");
  EXPECT_EQ(o.w.jobs, 3000);
  EXPECT_EQ(o.w.bytes, 262144);
  EXPECT_EQ(o.w.iters, 50);
  EXPECT_EQ(o.w.cpu_us, 0);
  EXPECT_EQ(o.concurrency, (std::vector<int>{8, 16, 32}));
  EXPECT_EQ(o.modes, (std::vector<std::string>{"all"}));
}

TEST(PipelineCli, PresetsMatchWorkloadMd) {
  const parsed w2 = parse({"--preset", "W2"});
  ASSERT_TRUE(w2.outcome.opts);
  EXPECT_EQ(w2.outcome.opts->w.cpu_us, 20);
  EXPECT_EQ(w2.outcome.opts->w.jobs, 3000);
  const parsed w3 = parse({"--preset", "w3"});
  ASSERT_TRUE(w3.outcome.opts);
  EXPECT_EQ(w3.outcome.opts->preset_name, "W3");
  EXPECT_EQ(w3.outcome.opts->w.jobs, 1000);
  EXPECT_EQ(w3.outcome.opts->w.bytes, 4194304);
  EXPECT_EQ(w3.outcome.opts->w.iters, 200);
  EXPECT_EQ(w3.outcome.opts->w.cpu_us, 20);
}

TEST(PipelineCli, ExplicitValuesOverrideThePresetWhateverTheOrder) {
  const parsed p = parse({"--jobs", "10", "--preset", "W3", "--cpu-us", "1.5"});
  ASSERT_TRUE(p.outcome.opts);
  EXPECT_EQ(p.outcome.opts->w.jobs, 10);
  EXPECT_EQ(p.outcome.opts->w.bytes, 4194304);
  EXPECT_DOUBLE_EQ(p.outcome.opts->w.cpu_us, 1.5);
  EXPECT_EQ(p.outcome.opts->preset_name, "W3+custom");
  const parsed c = parse({"--bytes", "4096"});
  ASSERT_TRUE(c.outcome.opts);
  EXPECT_EQ(c.outcome.opts->preset_name, "custom");
}

TEST(PipelineCli, ListsAreCommaSeparatedAndLevelsSorted) {
  const parsed p = parse({"--concurrency", "32,8,8,1", "--modes", "sync_per_op,cuawait"});
  ASSERT_TRUE(p.outcome.opts);
  EXPECT_EQ(p.outcome.opts->concurrency, (std::vector<int>{1, 8, 32}));
  EXPECT_EQ(p.outcome.opts->modes, (std::vector<std::string>{"sync_per_op", "cuawait"}));
}

TEST(PipelineCli, DevicesAreCommaSeparatedAndTheFirstIsTheDevice) {
  const parsed none = parse({});
  ASSERT_TRUE(none.outcome.opts);
  EXPECT_TRUE(none.outcome.opts->devices.empty());
  EXPECT_EQ(none.outcome.opts->device, 0);
  const parsed p = parse({"--devices", "2,0,2"});
  ASSERT_TRUE(p.outcome.opts);
  EXPECT_EQ(p.outcome.opts->devices, (std::vector<int>{2, 0, 2}));
  EXPECT_EQ(p.outcome.opts->device, 2);
}

void expect_refused(std::vector<std::string> args, const std::string& option) {
  const parsed p = parse(std::move(args));
  EXPECT_FALSE(p.outcome.opts.has_value());
  EXPECT_EQ(p.outcome.exit_code, 2);
  EXPECT_NE(p.err.find(option), std::string::npos)
      << "message does not name " << option << ": " << p.err;
}

TEST(PipelineCli, BadValuesAreRefusedNamingTheOption) {
  expect_refused({"--jobs", "0"}, "--jobs");
  expect_refused({"--jobs", "-5"}, "--jobs");
  expect_refused({"--bytes", "6"}, "--bytes");
  expect_refused({"--bytes", "0"}, "--bytes");
  expect_refused({"--bytes", "abc"}, "--bytes");
  expect_refused({"--iters", "0"}, "--iters");
  expect_refused({"--cpu-us", "-1"}, "--cpu-us");
  expect_refused({"--cpu-us", "nan"}, "--cpu-us");
  expect_refused({"--concurrency", "8,0"}, "--concurrency");
  expect_refused({"--threads", "-1"}, "--threads");
  expect_refused({"--samples", "1"}, "--samples");
  expect_refused({"--timeout", "0"}, "--timeout");
  expect_refused({"--floor-copy-bytes", "1048576"}, "--floor-copy-bytes");
  expect_refused({"--modes", "sync_per_op,nope"}, "--modes");
  expect_refused({"--preset", "W9"}, "--preset");
  expect_refused({"--devices", "0,-1"}, "--devices");
  expect_refused({"--devices", "0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0"}, "--devices");
  expect_refused({"--no-such-option"}, "--no-such-option");
}

TEST(PipelineCli, UnknownModeMessageListsTheKnownOnes) {
  const parsed p = parse({"--modes", "nope"});
  EXPECT_NE(p.err.find("coro_batched"), std::string::npos) << p.err;
}

TEST(PipelineCli, HelpExplainsEveryOptionAndModeAndExitsZero) {
  const parsed p = parse({"--help"});
  EXPECT_FALSE(p.outcome.opts.has_value());
  EXPECT_EQ(p.outcome.exit_code, 0);
  for (const char* s : {"--preset",
                        "--jobs",
                        "--bytes",
                        "--iters",
                        "--cpu-us",
                        "--concurrency",
                        "--threads",
                        "--modes",
                        "--json",
                        "--svg",
                        "--quick",
                        "--scaling",
                        "--grid",
                        "--grid-bytes",
                        "--repeat",
                        "--grid-cell-bytes",
                        "--batch",
                        "--batch-wait-us",
                        "--batch-in-flight",
                        "--batch-streams",
                        "sync_per_op",
                        "coro_batched",
                        "W3"}) {
    EXPECT_NE(p.out.find(s), std::string::npos) << s;
  }
}

TEST(PipelineCli, BatchKnobsDefaultToAutomaticSizeTwentyMicrosecondsSixteenInFlightFourStreams) {
  const parsed p = parse({});
  ASSERT_TRUE(p.outcome.opts);
  const batch_knobs& b = p.outcome.opts->batch;
  EXPECT_EQ(b.max_batch, 0);
  EXPECT_DOUBLE_EQ(b.wait_us, 20);
  EXPECT_EQ(b.in_flight, 16);
  EXPECT_EQ(b.streams, 4);
}

TEST(PipelineCli, BatchKnobsAreTakenFromTheCommandLine) {
  const parsed p = parse({"--batch", "48", "--batch-wait-us", "7.5", "--batch-in-flight", "12",
                          "--batch-streams", "8", "--preset", "W3"});
  ASSERT_TRUE(p.outcome.opts) << p.err;
  const batch_knobs& b = p.outcome.opts->batch;
  EXPECT_EQ(b.max_batch, 48);
  EXPECT_DOUBLE_EQ(b.wait_us, 7.5);
  EXPECT_EQ(b.in_flight, 12);
  EXPECT_EQ(b.streams, 8);
  // The knobs are not workload parameters: the preset stays unmodified.
  EXPECT_EQ(p.outcome.opts->preset_name, "W3");
}

TEST(PipelineCli, BadBatchKnobsAreRefusedNamingTheOption) {
  expect_refused({"--batch", "-1"}, "--batch");
  expect_refused({"--batch", "65537"}, "--batch");
  expect_refused({"--batch-wait-us", "-0.5"}, "--batch-wait-us");
  expect_refused({"--batch-wait-us", "inf"}, "--batch-wait-us");
  expect_refused({"--batch-in-flight", "0"}, "--batch-in-flight");
  expect_refused({"--batch-streams", "0"}, "--batch-streams");
  expect_refused({"--batch-streams", "65"}, "--batch-streams");
}

TEST(PipelineCli, AutomaticBatchIsAQuarterOfThePipelinesCappedByJobsAndBytes) {
  constexpr std::int64_t w1 = 262144;
  constexpr std::int64_t w3 = 4194304;
  EXPECT_EQ(auto_max_batch(512, w1), 64); // the job cap (16 MiB too)
  EXPECT_EQ(auto_max_batch(4096, w1), 64);
  EXPECT_EQ(auto_max_batch(128, w1), 32); // a quarter
  EXPECT_EQ(auto_max_batch(8, w1), 2);
  EXPECT_EQ(auto_max_batch(3, w1), 1);    // never 0
  EXPECT_EQ(auto_max_batch(1000, w3), 4); // the byte cap: 16 MiB
  EXPECT_EQ(auto_max_batch(1000, std::int64_t{1} << 30), 1);
  EXPECT_EQ(auto_max_batch(100000, 4096), 64);
}

TEST(PipelineCli, TheLeadsH200CommandsParse) {
  for (const char* preset : {"W1", "W3"}) {
    const parsed p = parse({"--preset", preset, "--modes",
                            "baselines,coro_graph_batched,coro_staged,coro_batched_pool",
                            "--concurrency", "8,16,32,512,1024,2048"},
                           {{"sync_per_op", "baseline", ""},
                            {"coro_graph_batched", "cuawait", ""},
                            {"coro_staged", "cuawait", ""},
                            {"coro_batched_pool", "cuawait", ""}});
    ASSERT_TRUE(p.outcome.opts) << preset << ": " << p.err;
    EXPECT_EQ(p.outcome.opts->concurrency, (std::vector<int>{8, 16, 32, 512, 1024, 2048}));
  }
}

TEST(PipelineCli, QuickCapsJobs) {
  const parsed p = parse({"--preset", "W3", "--quick"});
  ASSERT_TRUE(p.outcome.opts);
  EXPECT_EQ(p.outcome.opts->w.jobs, quick_jobs);
  const parsed small = parse({"--jobs", "10", "--quick"});
  ASSERT_TRUE(small.outcome.opts);
  EXPECT_EQ(small.outcome.opts->w.jobs, 10);
}

TEST(PipelineCli, ScalingUsesFourKibJobsAndTheSixLevels) {
  const parsed p = parse({"--scaling"});
  ASSERT_TRUE(p.outcome.opts);
  const options& o = *p.outcome.opts;
  EXPECT_EQ(o.w.bytes, 4096);
  EXPECT_EQ(o.concurrency, (std::vector<int>{1, 10, 100, 1000, 10000, 100000}));
  EXPECT_EQ(jobs_for_run(o, 100000), 200000);
  EXPECT_EQ(jobs_for_run(o, 10), o.w.jobs);
  const parsed q = parse({"--scaling", "--quick"});
  ASSERT_TRUE(q.outcome.opts);
  EXPECT_EQ(q.outcome.opts->concurrency.back(), quick_scaling_max_level);
}

TEST(PipelineCli, OrdinaryRunsUseTheWorkloadsJobsAtEveryLevel) {
  const parsed p = parse({"--concurrency", "1000"});
  ASSERT_TRUE(p.outcome.opts);
  EXPECT_EQ(jobs_for_run(*p.outcome.opts, 1000), 3000);
}

const std::vector<mode_description> grid_modes{
    {"sync_per_op", "baseline", ""},      {"threads_per_op", "baseline", ""},
    {"threads_per_job", "baseline", ""},  {"coro_batched", "cuawait", ""},
    {"coro_batched_pool", "cuawait", ""}, {"coro_per_op_pool", "cuawait", ""}};

TEST(PipelineCli, GridRunsSevenSizesAtFiveLevelsWithTheThreeModesThreeTimes) {
  const parsed p = parse({"--grid"}, grid_modes);
  ASSERT_TRUE(p.outcome.opts) << p.err;
  const options& o = *p.outcome.opts;
  EXPECT_TRUE(o.grid);
  EXPECT_EQ(o.grid_bytes, grid_default_bytes);
  EXPECT_EQ(o.grid_bytes.size(), 7u);
  EXPECT_EQ(o.concurrency, (std::vector<int>{2, 4, 8, 16, 32}));
  EXPECT_EQ(o.modes,
            (std::vector<std::string>{"threads_per_job", "coro_batched_pool", "coro_per_op_pool"}));
  EXPECT_EQ(o.repeat, 3);
  EXPECT_EQ(o.preset_name, "grid");
  options cell = o;
  cell.w.bytes = 4096;
  EXPECT_EQ(jobs_for_run(cell, 2), grid_max_jobs);
}

TEST(PipelineCli, GridTakesSizesLevelsModesAndRepeatAndAlwaysRunsTheReference) {
  const parsed p = parse({"--grid", "--grid-bytes", "65536,4096,65536", "--concurrency", "16",
                          "--modes", "coro_batched", "--repeat", "5", "--iters", "20", "--cpu-us",
                          "5", "--grid-cell-bytes", "1048576"},
                         grid_modes);
  ASSERT_TRUE(p.outcome.opts) << p.err;
  const options& o = *p.outcome.opts;
  EXPECT_EQ(o.grid_bytes, (std::vector<std::int64_t>{4096, 65536}));
  EXPECT_EQ(o.concurrency, (std::vector<int>{16}));
  EXPECT_EQ(o.modes, (std::vector<std::string>{"threads_per_job", "coro_batched"}));
  EXPECT_EQ(o.repeat, 5);
  EXPECT_EQ(o.w.iters, 20);
  EXPECT_EQ(o.preset_name, "grid+custom");
  options cell = o;
  cell.w.bytes = 65536;
  EXPECT_EQ(jobs_for_run(cell, 16), grid_min_jobs); // 16 by bytes, raised to the minimum
  const parsed q = parse({"--grid", "--quick"}, grid_modes);
  ASSERT_TRUE(q.outcome.opts);
  options small = *q.outcome.opts;
  small.w.bytes = 4096;
  EXPECT_EQ(jobs_for_run(small, 2), quick_jobs);
}

TEST(PipelineCli, BadGridValuesAreRefusedNamingTheOption) {
  expect_refused({"--grid", "--bytes", "4096"}, "--bytes");
  expect_refused({"--grid", "--jobs", "10"}, "--jobs");
  expect_refused({"--grid", "--scaling"}, "--grid");
  expect_refused({"--grid-bytes", "4096"}, "--grid-bytes");
  expect_refused({"--grid", "--grid-bytes", "6"}, "--grid-bytes");
  expect_refused({"--grid", "--repeat", "0"}, "--repeat");
  expect_refused({"--grid", "--grid-cell-bytes", "1000"}, "--grid-cell-bytes");
}

TEST(PipelineCli, OrdinaryRunsStillDefaultToAllModes) {
  const parsed p = parse({"--concurrency", "2,4"}, grid_modes);
  ASSERT_TRUE(p.outcome.opts);
  EXPECT_FALSE(p.outcome.opts->grid);
  EXPECT_EQ(p.outcome.opts->modes, (std::vector<std::string>{"all"}));
}

} // namespace

namespace {

TEST(PipelineCli, TraceNamesOneFilePerModeRun) {
  const parsed p = parse({"--trace", "out/t.json"});
  ASSERT_TRUE(p.outcome.opts.has_value());
  EXPECT_EQ(p.outcome.opts->trace_path, "out/t.json");
  EXPECT_EQ(trace_path_for("out/t.json", "coro_batched", 16), "out/t-coro_batched-c16.json");
  EXPECT_EQ(trace_path_for("out.d/t", "coro_mapped", 8), "out.d/t-coro_mapped-c8.json");
  EXPECT_EQ(trace_path_for("", "coro_mapped", 8), "");
  EXPECT_TRUE(parse({}).outcome.opts->trace_path.empty());
}

} // namespace
