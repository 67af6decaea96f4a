// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! A run spread over several processes (MPI ranks), seen by the program without MPI: the
//! group of processes, each one's share of the batch, and the report each rank sends to
//! rank 0 at the end of the run, from which rank 0 writes the features file and the summary.

#include "batch.hpp"

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace cuawait::images {

//! The processes one run is spread over. The program calls it from its main thread only.
class rank_group {
public:
  rank_group() = default;
  rank_group(const rank_group&) = delete;
  rank_group& operator=(const rank_group&) = delete;
  virtual ~rank_group() = default;

  //! This process's rank, 0 to size() - 1.
  [[nodiscard]] virtual int rank() const noexcept = 0;
  //! The number of processes.
  [[nodiscard]] virtual int size() const noexcept = 0;
  //! Collective and blocking: every rank gives `mine`; rank 0 gets every rank's, in rank
  //! order (its own first), the others an empty vector.
  //! @throws std::runtime_error when the exchange fails
  [[nodiscard]] virtual std::vector<std::string> gather(const std::string& mine) = 0;
};

//! The positions of a batch of `count` jobs that rank `rank` of `size` runs: round-robin
//! by position (rank, rank + size, ...), so that each rank gets a slice of every part of
//! the batch (neighbouring files are often alike in size).
[[nodiscard]] std::vector<std::size_t> share_of(std::size_t count, int rank, int size);

//! What one rank sends to rank 0 once its share is done.
struct rank_report {
  int code = 0;           //!< the rank's own exit code
  std::string fatal;      //!< why the rank failed as a whole (before or outside its images)
  std::size_t images = 0; //!< jobs in its share
  //! Its timed region on the system clock (µs since the epoch); meaningful when images > 0.
  double wall_start_us = 0;
  double wall_end_us = 0;
  //! Its jobs' outcomes, each with the job's position in the whole run's list of jobs.
  std::vector<std::pair<std::size_t, job_outcome>> outcomes;
};

//! The report as text (one item a line), for `rank_group::gather`.
[[nodiscard]] std::string encode_report(const rank_report& report);

//! Reads a report written by `encode_report`.
//! @throws std::runtime_error for text that is not one
[[nodiscard]] rank_report decode_report(const std::string& text);

} // namespace cuawait::images
