// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The command line of cuawait-bench-pipeline (CLI11): every workload parameter, the
//! presets, the modes and the outputs. CPU-only, so tests cover it.

#include "options.hpp"

#include <CLI/CLI.hpp>

#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace cuawait::bench {

//! What parsing decided: options to run with, or an exit code (0 after `--help`, 2 after a
//! bad value) with the message already written.
struct parse_outcome {
  std::optional<options> opts;
  int exit_code = 0;
};

namespace detail {
inline std::string modes_help(const std::vector<mode_description>& modes) {
  std::string s = "Comma-separated modes or groups (all, baselines, cuawait). Modes:";
  for (const mode_description& m : modes) {
    s += "\n  " + m.name + " (" + m.family + "): " + m.description;
  }
  return s;
}

inline std::string presets_help() {
  std::string s = "Start from a named workload of docs/WORKLOAD.md (W1, W2, W3); explicit "
                  "--jobs/--bytes/--iters/--cpu-us override it:";
  for (const preset& p : presets) {
    s += "\n  " + std::string(p.name) + " " + std::string(p.description) + ": " +
         std::to_string(p.w.jobs) + " jobs, " + std::to_string(p.w.bytes) + " bytes, " +
         std::to_string(p.w.iters) + " iters, cpu_us " + std::to_string(int(p.w.cpu_us));
  }
  return s;
}
} // namespace detail

//! Parses `argv`. Help goes to `out`, errors (naming the option) to `err`.
inline parse_outcome parse_command_line(int argc, const char* const* argv,
                                        const std::vector<mode_description>& modes,
                                        std::ostream& out, std::ostream& err) {
  CLI::App app{
      "cuawait-bench-pipeline: the pipeline workload of docs/WORKLOAD.md (CPU pre -> H2D -> "
      "kernel A -> kernel B -> D2H -> CPU post, many independent jobs) run by the "
      "traditional baselines and by cuawait, against the floor measured in the same run.",
      "cuawait-bench-pipeline"};
  options o;
  std::string preset_arg;
  workload w;
  std::vector<int> levels;
  std::vector<std::string> mode_list;
  app.add_option("--preset", preset_arg, detail::presets_help());
  auto* jobs = app.add_option("--jobs", w.jobs, "Number of independent jobs per mode run");
  auto* bytes = app.add_option("--bytes", w.bytes,
                               "Bytes of float data per job (multiple of 4), pinned on the host");
  auto* iters =
      app.add_option("--iters", w.iters, "Loop count of kernels A and B per element (at least 1)");
  auto* cpu = app.add_option("--cpu-us", w.cpu_us,
                             "Microseconds of CPU pre-processing and of post-processing per job "
                             "(each busy-spins this long reading the job's host buffer)");
  auto* conc = app.add_option("--concurrency", levels,
                              "Comma-separated pipelines in flight: threads (threads_per_op), "
                              "streams (handsm) or coroutines (cuawait modes); each mode runs "
                              "once per level (default 8,16,32; scaling: 1,...,100000)")
                   ->delimiter(',');
  app.add_option("--threads", o.threads,
                 "Worker threads of the pool for the *_pool modes (0: one per host core)");
  auto* mode_opt = app.add_option("--modes", mode_list, detail::modes_help(modes))->delimiter(',');
  app.add_option("--json", o.json_path,
                 "Write every figure, the parameters and the machine to FILE");
  app.add_option("--trace", o.trace_path,
                 "Record the GPU waits of each cuawait mode run as a Chrome/Perfetto trace: "
                 "FILE with -<mode>-c<level> before its extension (check it with "
                 "cuawait-trace-check); adds a little cost per wait to the measured runs");
  app.add_option("--svg", o.svg_path,
                 "Write a plot of microseconds per job against concurrency "
                 "for each mode to FILE");
  app.add_flag("--quick", o.quick,
               "Smoke run: at most " + std::to_string(quick_jobs) +
                   " jobs per mode run (scaling: levels up to " +
                   std::to_string(quick_scaling_max_level) + ")");
  app.add_flag("--scaling", o.scaling,
               "Scaling run: 4 KiB jobs (unless --bytes) at 1, 10, 100, 1000, 10000, 100000 "
               "pipelines in flight (unless --concurrency); reports throughput and host memory "
               "(RSS increase) per in-flight pipeline; max(jobs, 2 x level) jobs per run");
  app.add_flag("--grid", o.grid,
               "Grid run (the ratio table): every size of --grid-bytes at every level of "
               "--concurrency (default 2,4,8,16,32), modes threads_per_job, coro_batched_pool, "
               "coro_per_op_pool unless --modes (threads_per_job always runs: every ratio is "
               "against it), each run --repeat times; prints one table per mode of "
               "threads_per_job us/job / mode us/job (medians; >1: the mode is faster)");
  auto* grid_bytes =
      app.add_option("--grid-bytes", o.grid_bytes,
                     "Grid run: comma-separated job sizes in bytes (default 4 KiB, 64 KiB, "
                     "256 KiB, 1 MiB, 4 MiB, 32 MiB, 64 MiB)")
          ->delimiter(',');
  app.add_option("--repeat", o.repeat,
                 "Grid run: runs per mode and cell; the median is reported (default 3)");
  app.add_option("--grid-cell-bytes", o.grid_cell_bytes,
                 "Grid run: bytes each cell moves each way, which sets its jobs: cell bytes / "
                 "job bytes, at least max(" +
                     std::to_string(grid_min_jobs) + ", " + std::to_string(grid_jobs_per_pipeline) +
                     " per pipeline), at most " + std::to_string(grid_max_jobs) +
                     " (default 256 MiB)");
  app.add_option("--samples", o.samples,
                 "Output elements per job compared with the CPU reference (2 to 4096)");
  app.add_option("--device", o.device, "CUDA device ordinal");
  auto* devices_opt =
      app.add_option("--devices", o.devices,
                     "Comma-separated devices the cuawait modes spread jobs over (a "
                     "device_scheduler: each job to the device with the fewest in flight; jobs "
                     "and jobs/s per device reported); the first is also --device. One device: "
                     "the same run as --device")
          ->delimiter(',');
  app.add_option("--timeout", o.timeout_s,
                 "Seconds one mode run may take before the program reports it and exits (code 3)");
  app.add_option("--floor-copy-bytes", o.floor_copy_bytes,
                 "Size of each copy that measures the link's bandwidth (at least 64 MiB)");
  app.add_option("--batch", o.batch.max_batch,
                 "Batched modes (coro_graph_batched, coro_staged_batched): jobs per batch at "
                 "most; 0 (default): a quarter of the pipelines, at most " +
                     std::to_string(auto_max_batch_cap) + " jobs and " +
                     std::to_string(auto_max_batch_bytes >> 20) + " MiB");
  app.add_option("--batch-wait-us", o.batch.wait_us,
                 "Batched modes: the longest a job waits for company before its partial batch "
                 "is submitted, microseconds (default 20)");
  app.add_option("--batch-in-flight", o.batch.in_flight,
                 "Batched modes: batches on the GPU at once at most (default 16)");
  app.add_option("--batch-streams", o.batch.streams,
                 "Batched modes: streams the batcher hands batches to in turn (default 4)");
  app.footer("Exit codes: 0 all modes ran and checked, 1 a mode failed or computed a wrong "
             "result, 2 bad command line, 3 a mode run exceeded --timeout, 4 no CUDA device.");

  try {
    app.parse(argc, argv);
    if (!preset_arg.empty()) {
      const preset* p = find_preset(preset_arg);
      if (p == nullptr) {
        throw std::invalid_argument("--preset: unknown preset '" + preset_arg +
                                    "' (known: W1, W2, W3)");
      }
      o.w = p->w;
      o.preset_name = std::string(p->name);
    } else if (o.scaling) {
      o.preset_name = "scaling";
      o.w.bytes = 4096;
    } else if (o.grid) {
      o.preset_name = "grid";
    }
    if (o.grid && jobs->count() + bytes->count() > 0) {
      throw std::invalid_argument(std::string(jobs->count() > 0 ? "--jobs" : "--bytes") +
                                  ": not with --grid (sizes come from --grid-bytes, jobs per "
                                  "cell from --grid-cell-bytes)");
    }
    if (!o.grid && grid_bytes->count() > 0) {
      throw std::invalid_argument("--grid-bytes: only with --grid");
    }
    const bool custom = jobs->count() + bytes->count() + iters->count() + cpu->count() > 0;
    if (jobs->count() > 0)
      o.w.jobs = w.jobs;
    if (bytes->count() > 0)
      o.w.bytes = w.bytes;
    if (iters->count() > 0)
      o.w.iters = w.iters;
    if (cpu->count() > 0)
      o.w.cpu_us = w.cpu_us;
    if (custom) {
      o.preset_name =
          preset_arg.empty() && !o.scaling && !o.grid ? "custom" : o.preset_name + "+custom";
    }
    if (conc->count() > 0) {
      o.concurrency = levels;
    } else if (o.scaling) {
      o.concurrency = scaling_levels;
    } else if (o.grid) {
      o.concurrency = grid_default_levels;
    }
    if (mode_opt->count() > 0) {
      o.modes = mode_list;
    } else if (o.grid) {
      o.modes = grid_default_modes;
    }
    std::vector<std::string> names;
    for (const mode_description& m : modes) {
      names.push_back(m.name);
    }
    if (devices_opt->count() > 0 && !o.devices.empty() && o.devices.front() >= 0) {
      o.device = o.devices.front();
    }
    validate(o, names);
    finalize(o);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e, out, err);
    return {std::nullopt, code == 0 ? 0 : 2};
  } catch (const std::invalid_argument& e) {
    err << "cuawait-bench-pipeline: " << e.what() << "\nRun with --help for the options.\n";
    return {std::nullopt, 2};
  }
  return {std::move(o), 0};
}

} // namespace cuawait::bench
