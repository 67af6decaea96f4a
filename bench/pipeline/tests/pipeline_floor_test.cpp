// SPDX-License-Identifier: Apache-2.0
// The pipeline benchmark's floor arithmetic (docs/WORKLOAD.md "The floor").

#include "../floor.hpp"

#include <gtest/gtest.h>

#include <cmath>

namespace {

using namespace cuawait::bench;

floor_measurements h200_like() {
  floor_measurements m;
  m.h2d_bytes_per_s = 55.5e9;
  m.d2h_bytes_per_s = 55.3e9;
  m.both_bytes_per_s = 101.7e9;
  m.kernel_us_per_job = 2.0;
  m.cpu_us_per_job_one_thread = 40.0;
  m.cores = 16;
  return m;
}

TEST(PipelineFloor, EachTermFollowsItsDefinition) {
  const workload w{3000, 262144, 50, 20};
  const floor_terms t = compute_floor(w, h200_like());
  EXPECT_NEAR(t.h2d_us, 262144 / 55.5e9 * 1e6, 1e-9);
  EXPECT_NEAR(t.d2h_us, 262144 / 55.3e9 * 1e6, 1e-9);
  EXPECT_NEAR(t.both_us, 2 * 262144 / 101.7e9 * 1e6, 1e-9);
  EXPECT_DOUBLE_EQ(t.kernel_us, 2.0);
  EXPECT_DOUBLE_EQ(t.cpu_us, 2.5);
  EXPECT_DOUBLE_EQ(t.floor_us, t.both_us);
  EXPECT_EQ(t.limit, "PCIe both ways");
}

TEST(PipelineFloor, W3IsBoundByPcieBothWays) {
  const floor_terms t = compute_floor(workload{1000, 4194304, 200, 20}, h200_like());
  EXPECT_NEAR(t.floor_us, 82.5, 0.1); // 82.5 on the H200 (PCIe both ways)
}

TEST(PipelineFloor, TheLargestTermWins) {
  floor_measurements m = h200_like();
  m.kernel_us_per_job = 50;
  EXPECT_EQ(compute_floor(workload{}, m).limit, "kernels");
  m = h200_like();
  m.cpu_us_per_job_one_thread = 1600; // 100 us over 16 cores
  const floor_terms t = compute_floor(workload{}, m);
  EXPECT_EQ(t.limit, "CPU");
  EXPECT_DOUBLE_EQ(t.floor_us, 100);
}

TEST(PipelineFloor, AFailedMeasurementNeverLowersTheFloor) {
  floor_measurements m = h200_like();
  m.both_bytes_per_s = 0;
  EXPECT_TRUE(std::isinf(compute_floor(workload{}, m).floor_us));
  m = h200_like();
  m.cores = 0; // treated as one core
  EXPECT_DOUBLE_EQ(compute_floor(workload{}, m).cpu_us, 40.0);
}

TEST(PipelineFloor, RatioIsFloorOverMeasured) {
  EXPECT_DOUBLE_EQ(floor_ratio(5.0, 10.0), 0.5);
  EXPECT_DOUBLE_EQ(floor_ratio(5.0, 5.0), 1.0);
  EXPECT_TRUE(std::isnan(floor_ratio(5.0, NAN)));
  EXPECT_TRUE(std::isnan(floor_ratio(5.0, 0.0)));
}

} // namespace
