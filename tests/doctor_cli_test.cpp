// SPDX-License-Identifier: Apache-2.0
// cuawait-doctor's advice and printed forms (tools/doctor/report.hpp) on hand-made figures.
// The CLI itself is run without a GPU by the tests doctor_cli.no_gpu and
// doctor_cli.no_gpu_json (tests/doctor_cli_run.cmake).
#include "doctor/report.hpp"
#include "trace_check/json.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

namespace dc = cuawait::tools::doctor_cli;

bool has_line(const std::vector<std::string>& lines, const std::string& part) {
  for (const std::string& l : lines) {
    if (l.find(part) != std::string::npos) {
      return true;
    }
  }
  return false;
}

dc::copy_figure copy(const char* dir, const char* mem, std::size_t bytes, double gbs) {
  dc::copy_figure c;
  c.direction = dir;
  c.memory = mem;
  c.bytes = bytes;
  c.repeats = 10;
  c.gb_per_s = gbs;
  c.us_per_copy = static_cast<double>(bytes) / (gbs * 1e3);
  return c;
}

dc::strategy_figure strategy(const char* name, double p50) {
  dc::strategy_figure s;
  s.name = name;
  s.available = true;
  s.round_trip = {p50, 2 * p50, 500};
  return s;
}

//! A machine like the H200 host: fast pinned copies, slow pageable ones, timeline fastest.
dc::machine_report machine() {
  dc::machine_report r;
  r.device_count = 1;
  r.device = {0, "Test GPU", 9, 0, 132, 140};
  r.hardware_threads = 16;
  r.launch_enqueue = {2.0, 3.0, 500};
  r.launch_complete = {5.0, 8.0, 500};
  r.copies = {copy("h2d", "pinned", 64 << 10, 10),  copy("h2d", "pinned", 64 << 20, 50),
              copy("h2d", "pageable", 64 << 10, 5), copy("h2d", "pageable", 64 << 20, 12),
              copy("d2h", "pinned", 64 << 20, 50),  copy("d2h", "pageable", 64 << 20, 9)};
  r.strategies = {strategy("timeline", 8), strategy("event_poll", 9),
                  strategy("host_callback", 30)};
  r.default_strategy = "timeline";
  r.seconds = 3.5;
  return r;
}

TEST(DoctorCli, PercentilesOfASortedCopy) {
  std::vector<double> v{5, 1, 4, 2, 3};
  const dc::latency l = dc::percentiles(v);
  EXPECT_EQ(l.samples, 5u);
  EXPECT_EQ(l.p50_us, 3);
  EXPECT_EQ(l.p99_us, 5);
  std::vector<double> none;
  EXPECT_EQ(dc::percentiles(none).samples, 0u);
}

TEST(DoctorCli, KeepsTheDefaultStrategyWhenItIsFastest) {
  const auto a = dc::advice(machine());
  EXPECT_TRUE(has_line(a, "expect: a co_await of a short kernel resumes about 8.0 us")) << a[0];
  EXPECT_TRUE(has_line(a, "strategy: keep the default (timeline"));
  EXPECT_TRUE(has_line(a, "pool: runtime_options::threads = 16"));
  EXPECT_TRUE(has_line(a, "copies: pinned 50.0 GB/s, pageable 12.0 GB/s"));
  EXPECT_TRUE(has_line(a, "copies: a 64 KiB copy reaches 20% of the link"));
}

TEST(DoctorCli, NamesAFasterStrategyOrOneThatWorks) {
  auto r = machine();
  r.strategies[1].round_trip.p50_us = 4; // event_poll twice as fast
  EXPECT_TRUE(has_line(dc::advice(r), "try CUAWAIT_STRATEGY=event_poll"));
  r.strategies[0].available = false; // no cuStreamWriteValue64
  r.strategies[0].why_not = "cuStreamWriteValue64 unavailable";
  EXPECT_TRUE(has_line(dc::advice(r), "the default (timeline) is not available here; use "
                                      "CUAWAIT_STRATEGY=event_poll"));
  EXPECT_NE(dc::to_text(r).find("round trip timeline      not available: cuStreamWriteValue64"),
            std::string::npos)
      << dc::to_text(r);
}

TEST(DoctorCli, TextHasALineEachForLaunchCopiesAndStrategies) {
  const std::string t = dc::to_text(machine());
  EXPECT_EQ(t.rfind("device 0 of 1: Test GPU, compute capability 9.0, 132 SMs", 0), 0u) << t;
  EXPECT_NE(t.find("launch: enqueue 2.0 us, launch to finish seen 5.0 us (p50; p99 8.0 us)\n"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("copy h2d pinned  : 64 KiB 10.0 GB/s, 64 MiB 50.0 GB/s\n"), std::string::npos)
      << t;
  EXPECT_NE(t.find("round trip timeline      p50 8.0 us, p99 16.0 us (default)\n"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("probes took 3.5 s\n"), std::string::npos) << t;
}

TEST(DoctorCli, JsonIsValidAndCarriesTheFigures) {
  const auto doc = cuawait::tools::json::parse(dc::to_json(machine()));
  ASSERT_TRUE(doc.find("gpu")->as_bool());
  EXPECT_EQ(doc.find("device")->find("name")->as_string(), "Test GPU");
  EXPECT_EQ(doc.find("copies")->as_array().size(), 6u);
  const auto& strategies = doc.find("strategies")->as_array();
  ASSERT_EQ(strategies.size(), 3u);
  EXPECT_TRUE(strategies[0].find("default")->as_bool());
  EXPECT_EQ(strategies[0].find("round_trip")->find("p50_us")->as_number(), 8.0);
  EXPECT_FALSE(doc.find("advice")->as_array().empty());
}

TEST(DoctorCli, WithoutADeviceOnlyTheMessage) {
  dc::machine_report r;
  r.no_device_reason = "no CUDA device found (test); nothing to probe";
  EXPECT_EQ(dc::to_text(r), "cuawait-doctor: no CUDA device found (test); nothing to probe\n");
  const auto doc = cuawait::tools::json::parse(dc::to_json(r));
  EXPECT_FALSE(doc.find("gpu")->as_bool());
  EXPECT_EQ(doc.find("message")->as_string(), r.no_device_reason);
  EXPECT_TRUE(dc::advice(r).empty());
}

} // namespace
