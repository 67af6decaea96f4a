// SPDX-License-Identifier: Apache-2.0
// The pipeline benchmark's CPU reference and result checker: distinct inputs, the kernels'
// arithmetic, and a checker that catches wrong, missing and repeated jobs.

#include "../host_work.hpp"
#include "../reference.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <vector>

namespace {

using namespace cuawait::bench;

TEST(PipelineReference, SamplesIncludeFirstAndLastAndStayInRange) {
  constexpr std::size_t n = 1000;
  for (std::int64_t job = 0; job < 50; ++job) {
    EXPECT_EQ(sample_position(job, 0, n), 0u);
    EXPECT_EQ(sample_position(job, 1, n), n - 1);
    for (int k = 2; k < 16; ++k) {
      EXPECT_LT(sample_position(job, k, n), n);
    }
  }
  EXPECT_EQ(sample_position(7, 5, 1), 0u);
}

TEST(PipelineReference, InputsDifferBetweenJobsAndAreExactFloats) {
  std::set<float> first_elements;
  for (std::int64_t job = 0; job < 1000; ++job) {
    const float v = input_value(job, 0);
    EXPECT_GE(v, -512.0f);
    EXPECT_LT(v, 512.0f);
    EXPECT_EQ(v * 1024.0f, std::floor(v * 1024.0f));
    first_elements.insert(v);
  }
  // 20 random bits per value: collisions among 1000 jobs are rare, not the rule.
  EXPECT_GT(first_elements.size(), 990u);
}

TEST(PipelineReference, ReferenceAppliesKernelAThenKernelBWithFusedMultiplyAdd) {
  float a = 3.0f;
  for (int i = 0; i < 7; ++i) {
    a = std::fmaf(a, 1.0001f, 0.5f);
  }
  for (int i = 0; i < 7; ++i) {
    a = std::fmaf(a, 0.9999f, -0.25f);
  }
  EXPECT_EQ(reference_output(3.0f, 7), a);
  // One iteration by hand: (3 * 1.0001 + 0.5) then (x * 0.9999 - 0.25), each rounded once.
  const float x = std::fmaf(3.0f, 1.0001f, 0.5f);
  EXPECT_EQ(reference_output(3.0f, 1), std::fmaf(x, 0.9999f, -0.25f));
  EXPECT_NE(reference_output(3.0f, 1), 3.0f);
}

//! Runs "the GPU" on the CPU: kernel A then B on every sampled element of `buf`.
void fake_gpu(std::vector<float>& buf, int iters) {
  for (float& v : buf) {
    v = reference_output(v, iters);
  }
}

TEST(PipelineReference, CorrectJobsPass) {
  constexpr std::size_t n = 4096;
  constexpr int samples = 16, iters = 5;
  job_checker checker(20, n, iters, samples);
  checker.reset();
  host_work work(workload{20, n * 4, iters, 0}, samples, checker);
  std::vector<float> buf(n, 0.0f);
  for (std::int64_t job = 0; job < 20; ++job) {
    work.pre(job, buf.data());
    fake_gpu(buf, iters);
    work.post(job, buf.data());
  }
  const auto v = checker.check();
  EXPECT_TRUE(v.ok()) << v.first_problems;
  EXPECT_EQ(v.jobs_checked, 20);
  EXPECT_EQ(v.samples_checked, 20 * samples);
}

TEST(PipelineReference, SkippedKernelMissingJobAndRepeatedJobAreCaught) {
  constexpr std::size_t n = 4096;
  constexpr int samples = 8, iters = 3;
  job_checker checker(4, n, iters, samples);
  checker.reset();
  host_work work(workload{4, n * 4, iters, 0}, samples, checker);
  std::vector<float> buf(n, 0.0f);
  // job 0: correct; job 1: the GPU step is skipped; job 2: done twice; job 3: never done.
  for (std::int64_t job : {0, 1, 2, 2}) {
    work.pre(job, buf.data());
    if (job != 1) {
      fake_gpu(buf, iters);
    }
    work.post(job, buf.data());
  }
  const auto v = checker.check();
  EXPECT_FALSE(v.ok());
  EXPECT_EQ(v.mismatches, samples); // every sample of job 1
  EXPECT_EQ(v.jobs_not_once, 2);    // jobs 2 and 3
  EXPECT_NE(v.first_problems.find("job 1 element"), std::string::npos) << v.first_problems;
}

TEST(PipelineReference, ResultOfAnotherJobIsCaught) {
  constexpr std::size_t n = 1 << 16;
  constexpr int samples = 16, iters = 2;
  job_checker checker(2, n, iters, samples);
  checker.reset();
  host_work work(workload{2, n * 4, iters, 0}, samples, checker);
  std::vector<float> a(n, 0.0f), b(n, 0.0f);
  work.pre(0, a.data());
  work.pre(1, b.data());
  fake_gpu(a, iters);
  fake_gpu(b, iters);
  work.post(0, b.data()); // swapped buffers
  work.post(1, a.data());
  const auto v = checker.check();
  EXPECT_GE(v.mismatches, 2 * 2); // at least the first and last element of both
}

TEST(PipelineReference, ResetForgetsTheLastRun) {
  job_checker checker(3, 64, 1, 4);
  checker.reset();
  std::vector<float> buf(64, 0.0f);
  host_work work(workload{3, 256, 1, 0}, 4, checker);
  for (std::int64_t job = 0; job < 3; ++job) {
    work.pre(job, buf.data());
    fake_gpu(buf, 1);
    work.post(job, buf.data());
  }
  ASSERT_TRUE(checker.check().ok());
  checker.reset();
  EXPECT_EQ(checker.check().jobs_not_once, 3);
  EXPECT_EQ(checker.check(2).jobs_checked, 2);
}

TEST(PipelineReference, SpinReadingTakesAtLeastTheTimeAsked) {
  std::vector<float> buf(1000, 1.0f);
  const auto t0 = std::chrono::steady_clock::now();
  (void)spin_reading(buf.data(), buf.size(), 2000.0);
  const double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(us, 2000.0); // a lower bound only: never an upper timing bound in a test
  EXPECT_EQ(spin_reading(buf.data(), buf.size(), 0.0), 0.0f);
}

} // namespace
