// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The CPU side of one job: pre-processing (stamp the job's input, then busy-spin `cpu_us`
//! reading the buffer) and post-processing (busy-spin reading the output, then record the
//! samples the checker compares). Every mode calls exactly these two, so CPU work is equal.
//! CPU-only, so tests cover it.

#include "options.hpp"
#include "reference.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace cuawait::bench {

//! Where `spin_reading` stores its sum, so the reads cannot be optimised away. Per thread,
//! so that threads spinning at once do not share a cache line.
inline thread_local volatile float spin_sink = 0.0f;

//! Busy-spins at least `us` microseconds reading `buf` (n floats) cyclically, so the time
//! is spent touching the job's memory as decoding or normalising would. Returns the sum
//! read (callers may ignore it; it keeps the reads from being optimised away).
inline float spin_reading(const float* buf, std::size_t n, double us) noexcept {
  if (us <= 0 || n == 0) {
    return 0.0f;
  }
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + std::chrono::duration_cast<clock::duration>(
                                           std::chrono::duration<double, std::micro>(us));
  float acc = 0.0f;
  std::size_t i = 0;
  do {
    // A block of reads between clock reads: the clock costs ~20 ns, 256 reads ~100 ns.
    for (int r = 0; r < 256; ++r) {
      acc += buf[i];
      if (++i == n) {
        i = 0;
      }
    }
  } while (clock::now() < deadline);
  spin_sink = acc;
  return acc;
}

//! What a mode needs to run jobs: the workload and the two CPU steps of each job.
class host_work {
public:
  host_work(const workload& w, int samples, job_checker& checker) noexcept
      : m_w(w), m_n(w.floats()), m_samples(samples), m_checker(&checker) {}

  [[nodiscard]] const workload& w() const noexcept { return m_w; }
  //! Floats per job.
  [[nodiscard]] std::size_t n() const noexcept { return m_n; }

  //! CPU pre-processing of `job` into its host buffer `buf` (n floats), before the H2D copy.
  void pre(std::int64_t job, float* buf) const noexcept {
    stamp_input(job, buf, m_n, m_samples);
    (void)spin_reading(buf, m_n, m_w.cpu_us);
  }

  //! CPU post-processing of `job`'s output `buf`, after the D2H copy completed.
  void post(std::int64_t job, const float* buf) const noexcept {
    (void)spin_reading(buf, m_n, m_w.cpu_us);
    m_checker->record(job, buf);
  }

private:
  workload m_w;
  std::size_t m_n;
  int m_samples;
  job_checker* m_checker;
};

} // namespace cuawait::bench
