// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The arithmetic of kernels A and B, the per-job input stamped into each job's buffer, and
//! the checker that compares every job's sampled output with the same arithmetic on the CPU.
//!
//! Kernels and CPU both use an explicit fused multiply-add (`__fmaf_rn` on the GPU, `std::fmaf`
//! here), so results match bit for bit whatever the compilers' contraction settings.
//! CPU-only (no CUDA header), so tests cover it; kernels.cu includes it for the constants.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace cuawait::bench {

//! Kernel A: `v = v * kernel_a_mul + kernel_a_add`, `iters` times.
inline constexpr float kernel_a_mul = 1.0001f;
inline constexpr float kernel_a_add = 0.5f;
//! Kernel B: `v = v * kernel_b_mul + kernel_b_add` (that is, `v * 0.9999f - 0.25f`).
inline constexpr float kernel_b_mul = 0.9999f;
inline constexpr float kernel_b_add = -0.25f;

//! splitmix64: a cheap, well-mixed hash for positions and values.
[[nodiscard]] constexpr std::uint64_t mix64(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

//! Position of sample `k` of `job` in a buffer of `n` floats: the first and the last
//! element, then pseudo-random positions that differ from job to job.
[[nodiscard]] constexpr std::size_t sample_position(std::int64_t job, int k,
                                                    std::size_t n) noexcept {
  if (k == 0) {
    return 0;
  }
  if (k == 1) {
    return n - 1;
  }
  return static_cast<std::size_t>(
      mix64((static_cast<std::uint64_t>(job) << 16) ^ static_cast<std::uint64_t>(k)) % n);
}

//! The input of `job` at `pos`: a multiple of 1/1024 in [-512, 512), exact in a float,
//! a function of the job and the position only (so repeated positions agree).
[[nodiscard]] constexpr float input_value(std::int64_t job, std::size_t pos) noexcept {
  const std::uint64_t h = mix64(static_cast<std::uint64_t>(job) * 0x100000001b3ull ^
                                (static_cast<std::uint64_t>(pos) << 1));
  return static_cast<float>(static_cast<std::int32_t>(h & 0xFFFFF)) / 1024.0f - 512.0f;
}

//! Kernel A then kernel B on one element, as the GPU computes it.
[[nodiscard]] inline float reference_output(float v, int iters) noexcept {
  for (int i = 0; i < iters; ++i) {
    v = std::fmaf(v, kernel_a_mul, kernel_a_add);
  }
  for (int i = 0; i < iters; ++i) {
    v = std::fmaf(v, kernel_b_mul, kernel_b_add);
  }
  return v;
}

//! Writes `job`'s distinct input at each of its sample positions of `buf` (n floats).
//! O(samples): the stamp is what makes each job's input distinct at the checked places.
inline void stamp_input(std::int64_t job, float* buf, std::size_t n, int samples) noexcept {
  for (int k = 0; k < samples; ++k) {
    const std::size_t p = sample_position(job, k, n);
    buf[p] = input_value(job, p);
  }
}

//! Records what every job produced and compares it with the CPU reference after the timed
//! region. `record` may be called concurrently for different jobs (each job's slots are
//! its own); one job must be recorded by one thread at a time.
class job_checker {
public:
  //! Precomputes the expected samples of `jobs` jobs of `n` floats (the costly part, done
  //! once per run, outside every timed region).
  job_checker(std::int64_t jobs, std::size_t n, int iters, int samples)
      : m_jobs(jobs), m_n(n), m_samples(samples),
        m_expected(static_cast<std::size_t>(jobs) * samples), m_observed(m_expected.size()),
        m_seen(static_cast<std::size_t>(jobs)) {
    for (std::int64_t j = 0; j < jobs; ++j) {
      for (int k = 0; k < samples; ++k) {
        m_expected[index(j, k)] = reference_output(input_value(j, sample_position(j, k, n)), iters);
      }
    }
  }

  [[nodiscard]] std::int64_t jobs() const noexcept { return m_jobs; }
  [[nodiscard]] int samples() const noexcept { return m_samples; }

  //! Forgets every recorded result (before the next mode run).
  void reset() {
    std::fill(m_observed.begin(), m_observed.end(), std::nanf(""));
    std::fill(m_seen.begin(), m_seen.end(), std::uint8_t{0});
  }

  //! Reads `job`'s samples out of its output buffer `buf`. O(samples).
  void record(std::int64_t job, const float* buf) noexcept {
    for (int k = 0; k < m_samples; ++k) {
      m_observed[index(job, k)] = buf[sample_position(job, k, m_n)];
    }
    if (m_seen[static_cast<std::size_t>(job)] < 255) {
      ++m_seen[static_cast<std::size_t>(job)];
    }
  }

  //! The verdict over the first `jobs` jobs.
  struct verdict {
    std::int64_t jobs_checked = 0;
    std::int64_t samples_checked = 0;
    //! Jobs never recorded, or recorded more than once.
    std::int64_t jobs_not_once = 0;
    //! Sampled elements that differ from the reference (bit for bit).
    std::int64_t mismatches = 0;
    //! The first few problems, one line each.
    std::string first_problems;
    [[nodiscard]] bool ok() const noexcept { return jobs_not_once == 0 && mismatches == 0; }
  };

  //! Compares the first `jobs` jobs (all when negative) with the reference.
  [[nodiscard]] verdict check(std::int64_t jobs = -1) const {
    verdict v;
    const std::int64_t count = jobs < 0 ? m_jobs : std::min(jobs, m_jobs);
    int reported = 0;
    auto note = [&](const std::string& line) {
      if (reported++ < 5) {
        v.first_problems += line + "\n";
      }
    };
    for (std::int64_t j = 0; j < count; ++j) {
      ++v.jobs_checked;
      const unsigned seen = m_seen[static_cast<std::size_t>(j)];
      if (seen != 1) {
        ++v.jobs_not_once;
        note("job " + std::to_string(j) + " was completed " + std::to_string(seen) + " times");
        continue;
      }
      for (int k = 0; k < m_samples; ++k) {
        ++v.samples_checked;
        const float got = m_observed[index(j, k)];
        const float want = m_expected[index(j, k)];
        if (std::bit_cast<std::uint32_t>(got) != std::bit_cast<std::uint32_t>(want)) {
          ++v.mismatches;
          note("job " + std::to_string(j) + " element " +
               std::to_string(sample_position(j, k, m_n)) + ": got " + std::to_string(got) +
               ", expected " + std::to_string(want));
        }
      }
    }
    return v;
  }

private:
  [[nodiscard]] std::size_t index(std::int64_t job, int k) const noexcept {
    return static_cast<std::size_t>(job) * static_cast<std::size_t>(m_samples) +
           static_cast<std::size_t>(k);
  }

  std::int64_t m_jobs;
  std::size_t m_n;
  int m_samples;
  std::vector<float> m_expected;
  std::vector<float> m_observed;
  std::vector<std::uint8_t> m_seen;
};

} // namespace cuawait::bench
