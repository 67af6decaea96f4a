// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The floor of docs/WORKLOAD.md: the least time per job that the machine allows, from
//! measurements made in the same run before the modes. CPU-only, so tests cover it.

#include "options.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <string>
#include <utility>

namespace cuawait::bench {

//! What the run measured before the modes.
struct floor_measurements {
  //! Pinned host to device, one way, bytes per second (copies of >= 64 MiB).
  double h2d_bytes_per_s = 0;
  //! Device to pinned host, one way.
  double d2h_bytes_per_s = 0;
  //! Both directions at once: total bytes moved (both ways) per second.
  double both_bytes_per_s = 0;
  //! Kernels A and B of one job, GPU time per job with many streams overlapping.
  double kernel_us_per_job = 0;
  //! CPU pre- and post-processing of one job on one thread.
  double cpu_us_per_job_one_thread = 0;
  //! Host cores the CPU work can spread over.
  int cores = 1;
};

//! Each term of the floor per job, in microseconds, and the largest (the floor).
struct floor_terms {
  double h2d_us = 0;
  double d2h_us = 0;
  double both_us = 0;
  double kernel_us = 0;
  double cpu_us = 0;
  double floor_us = 0;
  //! Which term sets the floor: "H2D", "D2H", "PCIe both ways", "kernels" or "CPU".
  std::string limit;
};

//! `max(H2D time, D2H time, bytes both ways at the bidirectional rate, kernel time per job,
//! CPU time per job / cores)` for one job of `w`. A rate of zero or less makes its term
//! infinite (a failed measurement must not make the floor look easy).
[[nodiscard]] inline floor_terms compute_floor(const workload& w, const floor_measurements& m) {
  auto per_job_us = [](double bytes, double rate) {
    return rate > 0 ? bytes / rate * 1e6 : INFINITY;
  };
  floor_terms t;
  const double bytes = static_cast<double>(w.bytes);
  t.h2d_us = per_job_us(bytes, m.h2d_bytes_per_s);
  t.d2h_us = per_job_us(bytes, m.d2h_bytes_per_s);
  t.both_us = per_job_us(2 * bytes, m.both_bytes_per_s);
  t.kernel_us = m.kernel_us_per_job;
  t.cpu_us = m.cpu_us_per_job_one_thread / std::max(1, m.cores);
  const std::pair<double, const char*> terms[] = {{t.h2d_us, "H2D"},
                                                  {t.d2h_us, "D2H"},
                                                  {t.both_us, "PCIe both ways"},
                                                  {t.kernel_us, "kernels"},
                                                  {t.cpu_us, "CPU"}};
  const auto* top =
      std::max_element(std::begin(terms), std::end(terms),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
  t.floor_us = top->first;
  t.limit = top->second;
  return t;
}

//! floor / measured: 1.0 means at the floor, 0.5 twice the floor. NaN without a measurement.
[[nodiscard]] inline double floor_ratio(double floor_us, double measured_us) noexcept {
  return measured_us > 0 && std::isfinite(measured_us) ? floor_us / measured_us : NAN;
}

} // namespace cuawait::bench
