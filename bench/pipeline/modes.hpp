// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The mode registry: every way of running the pipeline (the raw-CUDA baselines and the
//! cuawait modes) behind one signature, so that main runs, times and checks them alike.

#include "host_work.hpp"
#include "options.hpp"

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace cuawait::bench {

//! The timed region of one mode run. A mode starts it once its setup (streams, buffers,
//! threads) is done and stops it when the last job's post-processing finished, before
//! tearing down.
class timed_region {
public:
  using clock = std::chrono::steady_clock;
  void start() noexcept { m_start = clock::now(); }
  void stop() noexcept { m_stop = clock::now(); }
  [[nodiscard]] double seconds() const noexcept {
    return std::chrono::duration<double>(m_stop - m_start).count();
  }
  [[nodiscard]] bool valid() const noexcept { return m_stop > m_start; }
  //! When the region started and stopped (a run spread over processes places every rank's
  //! region on one time line, from the barrier that starts the run).
  [[nodiscard]] clock::time_point started() const noexcept { return m_start; }
  [[nodiscard]] clock::time_point stopped() const noexcept { return m_stop; }

private:
  clock::time_point m_start{};
  clock::time_point m_stop{};
};

//! What a mode run gets.
struct mode_context {
  //! The CPU steps of every job (pre, post) and the workload.
  host_work& work;
  //! Jobs of this run: job ids 0 .. jobs-1, each processed exactly once.
  std::int64_t jobs = 0;
  //! Pipelines in flight (threads, streams or coroutines, by mode).
  int concurrency = 1;
  //! Worker threads for the pool modes.
  int pool_threads = 1;
  //! Grid of kernels A and B for this workload.
  int grid = 1;
  //! The device's multiprocessors.
  int sms = 1;
  //! The batcher's knobs (batched modes).
  batch_knobs batch{};
  //! Where a cuawait mode writes the trace of its waits (`--trace`); empty: no trace.
  std::string trace_path{};
  //! `--devices`: the devices the cuawait modes spread jobs over; fewer than two: the one
  //! device of today's runs.
  std::vector<int> devices{};
  //! Set by a mode that spread its jobs over `devices`: the jobs each one ran.
  std::vector<std::int64_t> jobs_per_device{};

  //! Pipelines worth creating: `concurrency`, but never more than there are jobs (a
  //! pipeline beyond that would never take one, yet would hold buffers).
  [[nodiscard]] std::int64_t pipelines() const noexcept {
    return concurrency < jobs ? concurrency : jobs;
  }
};

//! Thrown by a mode's setup when the run cannot be done on this machine (e.g. its buffers
//! do not fit in memory): the run is reported as skipped with the message, not as failed.
class mode_skipped : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

//! Runs the mode: process every job of `ctx` and time the work in `timer`. Throws on any
//! failure (a `cuda_error`, a stall); the checker judges the results afterwards.
using mode_fn = void (*)(mode_context& ctx, timed_region& timer);

//! One registered mode.
struct mode_entry {
  mode_description desc;
  mode_fn run = nullptr;
  //! Sequential by definition (runs once, at concurrency 1, whatever the levels).
  bool sequential = false;
  //! Most pipelines in flight the mode can run (higher levels are skipped and say so).
  int max_concurrency = 1 << 30;
  //! Host threads the mode uses at `concurrency` with `pool_threads` workers.
  int (*threads_used)(int concurrency, int pool_threads) = nullptr;
};

//! Appends the raw-CUDA baselines: sync_per_op, threads_per_op, threads_per_job, handsm
//! (baselines.cpp).
void register_baselines(std::vector<mode_entry>& modes);

//! Appends the cuawait modes (coro_modes.cu); appends nothing when they are not built.
void register_cuawait_modes(std::vector<mode_entry>& modes);

//! Appends the graph modes coro_graph, coro_graph_batched and coro_staged_batched
//! (graph_modes.cu, from the graphs issue).
void register_graph_modes(std::vector<mode_entry>& modes);

//! Appends coro_staged, the mode for large jobs (staged_modes.cpp).
void register_staged_modes(std::vector<mode_entry>& modes);

} // namespace cuawait::bench
