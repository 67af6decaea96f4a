// SPDX-License-Identifier: Apache-2.0

#include "trace_log.hpp"

#include <gtest/gtest.h>

#include <thread>

namespace ci = cuawait::images;

TEST(TraceLog, MeasureTakesUnionsAndTheirOverlap) {
  ci::trace_log log;
  const int cpu = log.cpu_lane();
  const int gpu0 = log.add_gpu_lane("GPU stream 0");
  const int gpu1 = log.add_gpu_lane("GPU stream 1");
  log.record(cpu, 0, "decode+preprocess", 0, 10);
  log.record(cpu, 0, "postprocess", 30, 40);
  log.record(gpu0, 0, "blur", 5, 20);
  log.record(gpu1, 1, "blur", 15, 35); // overlaps stream 0: counted once
  const ci::utilisation u = log.measure(0, 50);
  EXPECT_TRUE(u.has_gpu);
  EXPECT_EQ(u.wall_us, 50);
  EXPECT_EQ(u.gpu_busy_us, 30);                 // [5, 35]
  EXPECT_EQ(u.cpu_busy_us, 20);                 // [0, 10] + [30, 40]
  EXPECT_EQ(u.overlap_us, 5 + 5);               // [5, 10] + [30, 35]
  EXPECT_EQ(log.measure(8, 12).gpu_busy_us, 4); // clipped to the window
}

TEST(TraceLog, EachThreadGetsItsOwnCpuLane) {
  ci::trace_log log;
  const int mine = log.cpu_lane();
  EXPECT_EQ(log.cpu_lane(), mine);
  int other = -1;
  std::thread([&] { other = log.cpu_lane(); }).join();
  EXPECT_NE(other, mine);
  ASSERT_EQ(log.lanes().size(), 2U);
  EXPECT_EQ(log.lanes()[1].name, "CPU thread 1");
  ci::trace_log second; // a new log starts its lanes afresh on this thread
  EXPECT_EQ(second.cpu_lane(), 0);
}
