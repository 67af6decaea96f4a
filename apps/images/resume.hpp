// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Resuming a batch (`--skip-existing`) and bounding it (`--limit`): which jobs run, which
//! records of an earlier run are kept, and the features file that merges the two, in input
//! order, so that a resumed run's `features.jsonl` equals an uninterrupted run's.

#include "batch.hpp"
#include "inputs.hpp"

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace cuawait::images {

//! The records of an earlier run's `features.jsonl`, by their "file" value.
class earlier_records {
public:
  //! Reads `path`; a missing or unreadable file has no records, and a line that is not a
  //! record (a half-written one from a crash, say) is ignored.
  [[nodiscard]] static earlier_records read(const std::filesystem::path& path);

  //! The record (one line, no newline) of the image named `name`, or nullptr.
  [[nodiscard]] const std::string* find(std::string_view name) const;

private:
  // Key: the record's start up to its "file" value, `{"file":"<escaped name>"`.
  std::unordered_map<std::string, std::string> m_by_key;
};

//! What a run does with the jobs of the batch.
struct run_plan {
  std::vector<job> todo;          //!< the jobs to run now, in input order
  std::vector<std::size_t> where; //!< each todo job's position in the whole batch
  //! By position in the whole batch: the kept record of an image skipped because its
  //! outputs exist, or empty.
  std::vector<std::string> kept;
  std::size_t skipped = 0; //!< jobs skipped because their outputs exist
  std::size_t left = 0;    //!< jobs left for a later run by the limit
};

//! Plans a run over `all`. With `skip_existing`, a job is skipped when its edge image
//! exists under `config.out_dir` in `config.format` AND the features file there has its
//! record: an image whose record was lost (a crash before the features were written) runs
//! again. Then at most `limit` jobs (0: no limit) are kept to run, the first in input order.
[[nodiscard]] run_plan plan_run(const std::vector<job>& all, const batch_config& config,
                                bool skip_existing, std::size_t limit);

//! The features file of a run: for every job of the batch in input order, its kept record
//! or, when it ran and succeeded, its new record; one per line.
[[nodiscard]] std::string merged_features(const run_plan& plan, std::size_t batch_size,
                                          const std::vector<job_outcome>& outcomes);

} // namespace cuawait::images
