// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The parameters of one run of cuawait-bench-pipeline: the workload of docs/WORKLOAD.md, the
//! modes to run, the outputs; the named presets W1, W2, W3 and the validation that refuses
//! a bad value with a message naming the option. CPU-only, so tests cover it.

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace cuawait::bench {

//! A mode as the help text lists it.
struct mode_description {
  std::string name;
  //! "baseline" or "cuawait".
  std::string family;
  std::string description;
};

//! One pipeline workload: `jobs` independent jobs of `bytes` of floats each, kernels A and B
//! looping `iters` times per element, and `cpu_us` of CPU pre- and post-processing each.
struct workload {
  std::int64_t jobs = 3000;
  std::int64_t bytes = 262144;
  int iters = 50;
  double cpu_us = 0;

  //! Floats per job.
  [[nodiscard]] std::size_t floats() const noexcept { return static_cast<std::size_t>(bytes / 4); }
};

//! A named workload of docs/WORKLOAD.md.
struct preset {
  std::string_view name;
  std::string_view description;
  workload w;
};

//! W1, W2 and W3 exactly as docs/WORKLOAD.md defines them.
inline constexpr std::array<preset, 3> presets{{
    {"W1", "small", {3000, 262144, 50, 0}},
    {"W2", "small + CPU", {3000, 262144, 50, 20}},
    {"W3", "medium", {1000, 4194304, 200, 20}},
}};

//! The preset called `name` (case-insensitive), or nullptr.
[[nodiscard]] inline const preset* find_preset(std::string_view name) noexcept {
  for (const preset& p : presets) {
    if (std::equal(p.name.begin(), p.name.end(), name.begin(), name.end(), [](char a, char b) {
          return std::toupper(static_cast<unsigned char>(a)) ==
                 std::toupper(static_cast<unsigned char>(b));
        })) {
      return &p;
    }
  }
  return nullptr;
}

//! The concurrency levels of the scaling run (4 KiB jobs): 1 to 100,000 pipelines in flight.
inline const std::vector<int> scaling_levels{1, 10, 100, 1000, 10000, 100000};

//! The grid run (`--grid`): the job sizes and concurrency levels of the ratio table
//! (docs/BENCHMARK.md), the modes each cell runs (the reference `threads_per_job` first), and the
//! jobs per cell: `grid_cell_bytes` moved each way per cell, at least `grid_min_jobs` (and 8 per
//! pipeline, so that every pipeline carries several jobs), at most `grid_max_jobs`.
inline const std::vector<std::int64_t> grid_default_bytes{
    std::int64_t{4} << 10, std::int64_t{64} << 10, std::int64_t{256} << 10, std::int64_t{1} << 20,
    std::int64_t{4} << 20, std::int64_t{32} << 20, std::int64_t{64} << 20};
inline const std::vector<int> grid_default_levels{2, 4, 8, 16, 32};
inline const char* const grid_reference_mode = "threads_per_job";
inline const std::vector<std::string> grid_default_modes{grid_reference_mode, "coro_batched_pool",
                                                         "coro_per_op_pool"};
inline constexpr std::int64_t grid_default_cell_bytes = std::int64_t{256} << 20;
inline constexpr std::int64_t grid_min_jobs = 200;
inline constexpr std::int64_t grid_max_jobs = 20000;
inline constexpr int grid_jobs_per_pipeline = 8;

//! Jobs in one grid cell of `bytes`-byte jobs at `level` pipelines:
//! `cell_bytes / bytes`, at least max(`grid_min_jobs`, 8 per pipeline), at most `grid_max_jobs`.
[[nodiscard]] constexpr std::int64_t grid_jobs(std::int64_t cell_bytes, std::int64_t bytes,
                                               int level) noexcept {
  const std::int64_t by_bytes = bytes > 0 ? cell_bytes / bytes : grid_max_jobs;
  const std::int64_t per_pipeline = std::int64_t{grid_jobs_per_pipeline} * level;
  const std::int64_t floor_jobs = grid_min_jobs > per_pipeline ? grid_min_jobs : per_pipeline;
  const std::int64_t jobs = by_bytes > floor_jobs ? by_bytes : floor_jobs;
  return jobs < grid_max_jobs ? jobs : grid_max_jobs;
}

//! The batcher's knobs in `coro_graph_batched` and `coro_staged_batched` (see
//! docs/GRAPHS.md for what each does). The defaults are a reasoned guess for many pipelines
//! (C >= 128), where the goals are measured; a sweep on the H200 should confirm them.
struct batch_knobs {
  //! Jobs per batch at most (`batch_options::max_batch`); 0: automatic,
  //! `auto_max_batch(pipelines, bytes)`.
  int max_batch = 0;
  //! The longest a job waits for company before its partial batch goes, microseconds.
  double wait_us = 20;
  //! Batches on the GPU at once at most (`batch_options::max_in_flight`).
  int in_flight = 16;
  //! Streams the batcher hands batches to in turn.
  int streams = 4;
};

//! Largest automatic batch, in jobs and in bytes. A batch exists to share the host's cost
//! per operation among its jobs; 16 MiB per merged copy (64 W1 jobs, 4 W3 jobs) is well
//! past the size at which a copy runs at the link's rate, and a larger batch only lengthens
//! the pipeline's fill and drain (the first batch's H2D and the last one's D2H each use one
//! direction of the link only).
inline constexpr int auto_max_batch_cap = 64;
inline constexpr std::int64_t auto_max_batch_bytes = std::int64_t{16} << 20;

//! The automatic batch size for `pipelines` pipelines of `bytes`-byte jobs: a quarter of
//! the pipelines, so that at least four batches circulate (while some are on the GPU,
//! others are being formed), at most `auto_max_batch_cap` jobs and `auto_max_batch_bytes`,
//! at least 1.
[[nodiscard]] constexpr int auto_max_batch(std::int64_t pipelines, std::int64_t bytes) noexcept {
  std::int64_t b = pipelines / 4;
  b = b < auto_max_batch_cap ? b : auto_max_batch_cap;
  const std::int64_t by_bytes = bytes > 0 ? auto_max_batch_bytes / bytes : b;
  b = b < by_bytes ? b : by_bytes;
  return static_cast<int>(b < 1 ? 1 : b);
}

//! Everything one run needs. Defaults are W1 at concurrency 8, 16 and 32.
struct options {
  workload w;
  //! The preset the workload started from, or "custom" when no preset was named.
  std::string preset_name = "W1";
  //! Pipelines in flight (threads, streams or coroutines, by mode); each mode runs once per
  //! level, except `sync_per_op`, which is sequential by definition.
  std::vector<int> concurrency{8, 16, 32};
  //! Worker threads for the modes that run on the pool; 0 means one per host core.
  int threads = 0;
  //! Mode names or groups ("all", "baselines", "cuawait"), in the order given.
  std::vector<std::string> modes{"all"};
  std::string json_path;
  std::string svg_path;
  //! Smoke run: at most `quick_jobs` jobs per mode, fewer floor repetitions.
  bool quick = false;
  //! The scaling run: 4 KiB jobs at 1 to 100,000 pipelines in flight, with host memory.
  bool scaling = false;
  //! The grid run: every size of `grid_bytes` at every level, `repeat` runs per mode and
  //! cell, the median reported (see `grid_jobs` for the jobs per cell).
  bool grid = false;
  std::vector<std::int64_t> grid_bytes = grid_default_bytes;
  //! Runs per mode and grid cell; the grid reports their median.
  int repeat = 3;
  //! Bytes each grid cell moves each way (sets its jobs, see `grid_jobs`).
  std::int64_t grid_cell_bytes = grid_default_cell_bytes;
  //! Output elements compared with the CPU reference per job.
  int samples = 16;
  //! CUDA device ordinal.
  int device = 0;
  //! `--devices`: the devices the cuawait modes spread jobs over (`device_scheduler`); empty:
  //! `device` only. The first becomes `device` (queries, baselines). A device may repeat
  //! (two contexts on one GPU, to run the several-device path on one).
  std::vector<int> devices;
  //! A mode run that takes longer than this is reported and the program exits (code 3).
  double timeout_s = 300;
  //! Size of each copy that measures the link's bandwidth (at least 64 MiB).
  std::int64_t floor_copy_bytes = std::int64_t{64} << 20;
  //! The batcher's knobs (batched modes).
  batch_knobs batch;
  //! `--trace`: base path of the traces of the cuawait mode runs (see trace_scope.hpp).
  std::string trace_path;
};

//! Jobs per mode run in a `--quick` run.
inline constexpr std::int64_t quick_jobs = 256;

//! Largest job size accepted (16 GiB), far above any device's memory per pipeline.
inline constexpr std::int64_t max_bytes = std::int64_t{1} << 34;

//! Refuses invalid options with `std::invalid_argument` whose message starts with the
//! option's name, e.g. "--bytes: must be a positive multiple of 4 (got 6)". `known_modes`
//! lists the mode names this build can run; groups are accepted besides them.
inline void validate(const options& o, const std::vector<std::string>& known_modes) {
  auto fail = [](std::string_view opt, const std::string& why) {
    throw std::invalid_argument(std::string(opt) + ": " + why);
  };
  if (o.w.jobs < 1 || o.w.jobs > 1'000'000'000) {
    fail("--jobs", "must be between 1 and 1e9 (got " + std::to_string(o.w.jobs) + ")");
  }
  if (o.w.bytes < 4 || o.w.bytes % 4 != 0 || o.w.bytes > max_bytes) {
    fail("--bytes", "must be a positive multiple of 4 of at most 16 GiB (got " +
                        std::to_string(o.w.bytes) + ")");
  }
  if (o.w.iters < 1 || o.w.iters > 10'000'000) {
    fail("--iters", "must be between 1 and 1e7, so that results can be checked (got " +
                        std::to_string(o.w.iters) + ")");
  }
  if (!std::isfinite(o.w.cpu_us) || o.w.cpu_us < 0 || o.w.cpu_us > 1e7) {
    fail("--cpu-us",
         "must be between 0 and 1e7 microseconds (got " + std::to_string(o.w.cpu_us) + ")");
  }
  if (o.concurrency.empty()) {
    fail("--concurrency", "needs at least one level");
  }
  for (int c : o.concurrency) {
    if (c < 1 || c > 1'000'000) {
      fail("--concurrency", "each level must be between 1 and 1e6 (got " + std::to_string(c) + ")");
    }
  }
  if (o.threads < 0 || o.threads > 4096) {
    fail("--threads",
         "must be between 0 (one per core) and 4096 (got " + std::to_string(o.threads) + ")");
  }
  if (o.samples < 2 || o.samples > 4096) {
    fail("--samples", "must be between 2 and 4096 (got " + std::to_string(o.samples) + ")");
  }
  if (o.device < 0) {
    fail("--device", "must be a device ordinal >= 0 (got " + std::to_string(o.device) + ")");
  }
  if (o.devices.size() > 16) {
    fail("--devices", "at most 16 devices (got " + std::to_string(o.devices.size()) + ")");
  }
  for (int d : o.devices) {
    if (d < 0) {
      fail("--devices", "each must be a device ordinal >= 0 (got " + std::to_string(d) + ")");
    }
  }
  if (!std::isfinite(o.timeout_s) || o.timeout_s <= 0) {
    fail("--timeout",
         "must be a positive number of seconds (got " + std::to_string(o.timeout_s) + ")");
  }
  if (o.floor_copy_bytes < (std::int64_t{64} << 20) || o.floor_copy_bytes > max_bytes) {
    fail("--floor-copy-bytes",
         "must be between 64 MiB and 16 GiB (got " + std::to_string(o.floor_copy_bytes) + ")");
  }
  if (o.batch.max_batch < 0 || o.batch.max_batch > 65536) {
    fail("--batch", "must be between 0 (automatic) and 65536 jobs (got " +
                        std::to_string(o.batch.max_batch) + ")");
  }
  if (!std::isfinite(o.batch.wait_us) || o.batch.wait_us < 0 || o.batch.wait_us > 1e6) {
    fail("--batch-wait-us",
         "must be between 0 and 1e6 microseconds (got " + std::to_string(o.batch.wait_us) + ")");
  }
  if (o.batch.in_flight < 1 || o.batch.in_flight > 1024) {
    fail("--batch-in-flight",
         "must be between 1 and 1024 batches (got " + std::to_string(o.batch.in_flight) + ")");
  }
  if (o.batch.streams < 1 || o.batch.streams > 64) {
    fail("--batch-streams",
         "must be between 1 and 64 streams (got " + std::to_string(o.batch.streams) + ")");
  }
  if (o.grid && o.scaling) {
    fail("--grid", "cannot be combined with --scaling");
  }
  if (o.grid_bytes.empty()) {
    fail("--grid-bytes", "needs at least one size");
  }
  for (const std::int64_t b : o.grid_bytes) {
    if (b < 4 || b % 4 != 0 || b > max_bytes) {
      fail("--grid-bytes", "each size must be a positive multiple of 4 of at most 16 GiB (got " +
                               std::to_string(b) + ")");
    }
  }
  if (o.repeat < 1 || o.repeat > 99) {
    fail("--repeat", "must be between 1 and 99 (got " + std::to_string(o.repeat) + ")");
  }
  if (o.grid_cell_bytes < (std::int64_t{1} << 20) || o.grid_cell_bytes > max_bytes) {
    fail("--grid-cell-bytes",
         "must be between 1 MiB and 16 GiB (got " + std::to_string(o.grid_cell_bytes) + ")");
  }
  if (o.modes.empty()) {
    fail("--modes", "needs at least one mode");
  }
  for (const std::string& m : o.modes) {
    const bool group = m == "all" || m == "baselines" || m == "cuawait";
    if (!group && std::find(known_modes.begin(), known_modes.end(), m) == known_modes.end()) {
      std::string list;
      for (const std::string& k : known_modes) {
        list += (list.empty() ? "" : ", ") + k;
      }
      fail("--modes", "unknown mode '" + m + "' (known: all, baselines, cuawait, " + list + ")");
    }
  }
}

//! Sorted, duplicate-free copy of `levels`.
[[nodiscard]] inline std::vector<int> sorted_levels(std::vector<int> levels) {
  std::sort(levels.begin(), levels.end());
  levels.erase(std::unique(levels.begin(), levels.end()), levels.end());
  return levels;
}

//! Largest level of a `--quick --scaling` run.
inline constexpr int quick_scaling_max_level = 10000;

//! Applies `--quick`: at most `quick_jobs` jobs and, in a scaling run, levels up to
//! `quick_scaling_max_level`. Sorts the levels. Call after `validate`.
inline void finalize(options& o) {
  o.concurrency = sorted_levels(o.concurrency);
  std::sort(o.grid_bytes.begin(), o.grid_bytes.end());
  o.grid_bytes.erase(std::unique(o.grid_bytes.begin(), o.grid_bytes.end()), o.grid_bytes.end());
  if (o.grid && std::find(o.modes.begin(), o.modes.end(), grid_reference_mode) == o.modes.end() &&
      std::find(o.modes.begin(), o.modes.end(), "all") == o.modes.end() &&
      std::find(o.modes.begin(), o.modes.end(), "baselines") == o.modes.end()) {
    // Every ratio of the grid is against the reference: it always runs, first.
    o.modes.insert(o.modes.begin(), grid_reference_mode);
  }
  if (o.quick) {
    o.w.jobs = std::min(o.w.jobs, quick_jobs);
    if (o.scaling) {
      std::erase_if(o.concurrency, [](int c) { return c > quick_scaling_max_level; });
      if (o.concurrency.empty()) {
        o.concurrency.push_back(1);
      }
    }
  }
}

//! Jobs in one mode run at `level` pipelines in flight: the workload's jobs, and in a
//! scaling run at least twice the level, so that every pipeline carries work. In a grid
//! run, `grid_jobs` for the workload's size (capped at `quick_jobs` by `--quick`).
[[nodiscard]] inline std::int64_t jobs_for_run(const options& o, int level) noexcept {
  if (o.grid) {
    const std::int64_t jobs = grid_jobs(o.grid_cell_bytes, o.w.bytes, level);
    return o.quick ? std::min(jobs, quick_jobs) : jobs;
  }
  return o.scaling ? std::max<std::int64_t>(o.w.jobs, std::int64_t{2} * level) : o.w.jobs;
}

//! `base` with "-<mode>-c<level>" inserted before its extension: "t.json" becomes
//! "t-coro_batched-c16.json". Empty when `base` is.
[[nodiscard]] inline std::string trace_path_for(const std::string& base, const std::string& mode,
                                                int level) {
  if (base.empty()) {
    return {};
  }
  const std::string tag = "-" + mode + "-c" + std::to_string(level);
  const auto slash = base.find_last_of('/');
  const auto dot = base.find_last_of('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash) || dot == 0) {
    return base + tag + ".json";
  }
  return base.substr(0, dot) + tag + base.substr(dot);
}

} // namespace cuawait::bench
