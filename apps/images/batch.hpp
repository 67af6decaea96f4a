// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `batch`: the state of one run over a list of jobs, the CPU stages every mode shares
//! (load and preprocess, postprocess and write), and the sync and threads modes.

#include "engine.hpp"
#include "image.hpp"
#include "inputs.hpp"
#include "progress.hpp"
#include "trace_log.hpp"

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace cuawait::images {

//! The parameters of a run that the stages need.
struct batch_config {
  int threads = 1;
  bool write = true;
  std::filesystem::path out_dir;
  std::uint64_t seed = 1;
  int width = 1024; //!< of synthetic images
  int height = 1024;
  decode_limits limits;
};

//! What became of one job.
struct job_outcome {
  bool done = false;  //!< processed (successfully or not); false when skipped by a stop
  std::string error;  //!< empty on success
  std::string record; //!< the JSON Lines record on success
};

//! Creates a worker's engine; called on the worker's own thread.
using engine_factory = std::function<std::unique_ptr<stage_engine>()>;

//! One run over `jobs`. The CPU stages are thread-safe for distinct job indexes.
class batch {
public:
  batch(batch_config config, const std::vector<job>& jobs, trace_log& log,
        progress_reporter& progress, const std::atomic<bool>& stop);

  //! Stage 1 (CPU): reads and decodes (or synthesises) job `i`. Records a span.
  //! @throws image_error for a bad input
  [[nodiscard]] image8 load(int i) const;

  //! Stage 1b (CPU): converts to normalised grayscale floats in `out`.
  void preprocess(const image8& img, std::span<float> out) const;

  //! Last stage (CPU): writes the edge image (unless writing is off), keeps the record and
  //! reports progress. Records a span.
  //! @throws std::runtime_error when the file cannot be written
  void finish(int i, const image_result& result);

  //! Marks job `i` as failed with `reason` and reports it.
  void fail(int i, const std::string& reason);

  //! Runs job `i` start to end on `engine`, turning any exception into a failure.
  void run_job(int i, stage_engine& engine);

  //! The sync mode: every job in order on the calling thread, with one engine.
  void run_sync(const engine_factory& make);

  //! The threads mode: `config.threads` threads, each with its own engine, taking jobs in
  //! order from a shared counter.
  void run_threads(const engine_factory& make);

  //! True once a stop was requested (SIGINT); modes start no new job after it.
  [[nodiscard]] bool stopping() const { return m_stop.load(std::memory_order_relaxed); }

  [[nodiscard]] const std::vector<job>& jobs() const { return m_jobs; }
  [[nodiscard]] const batch_config& config() const { return m_config; }
  [[nodiscard]] trace_log& log() const { return m_log; }
  [[nodiscard]] const std::vector<job_outcome>& outcomes() const { return m_outcomes; }

private:
  batch_config m_config;
  const std::vector<job>& m_jobs;
  trace_log& m_log;
  progress_reporter& m_progress;
  const std::atomic<bool>& m_stop;
  std::vector<job_outcome> m_outcomes;
};

} // namespace cuawait::images
