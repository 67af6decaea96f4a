// SPDX-License-Identifier: Apache-2.0
// cuawait-bench-pipeline: the pipeline workload of docs/WORKLOAD.md, run by the raw-CUDA
// baselines and by cuawait, against the floor measured in the same run. See
// docs/BENCHMARK.md.

#include "cli.hpp"
#include "grid.hpp"
#include "kernels.hpp"
#include "measure.hpp"
#include "modes.hpp"
#include "reference.hpp"
#include "results.hpp"
#include "spread.hpp"

#if defined(CUAWAIT_BENCH_MPI)
#include "mpi_group.hpp"
#endif

#include <cuawait/cuda/error.hpp>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace cuawait::bench {
namespace {

constexpr int exit_failed = 1;
constexpr int exit_timeout = 3;
constexpr int exit_no_device = 4;

//! Ends the process when one mode run exceeds its time: a hung mode must not hang the run
//! (the lead's GPU script runs everything in one bounded call).
class watchdog {
public:
  watchdog() : m_thread([this] { loop(); }) {}
  watchdog(const watchdog&) = delete;
  watchdog& operator=(const watchdog&) = delete;
  ~watchdog() {
    {
      const std::lock_guard lock(m_mutex);
      m_stop = true;
    }
    m_cv.notify_all();
    m_thread.join();
  }

  void arm(std::string label, double seconds) {
    const std::lock_guard lock(m_mutex);
    m_label = std::move(label);
    m_seconds = seconds;
    m_deadline = std::chrono::steady_clock::now() +
                 std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                     std::chrono::duration<double>(seconds));
    m_armed = true;
    m_cv.notify_all();
  }
  void disarm() {
    const std::lock_guard lock(m_mutex);
    m_armed = false;
  }

private:
  void loop() {
    std::unique_lock lock(m_mutex);
    while (!m_stop) {
      if (!m_armed) {
        m_cv.wait(lock);
        continue;
      }
      if (m_cv.wait_until(lock, m_deadline) == std::cv_status::timeout && m_armed &&
          std::chrono::steady_clock::now() >= m_deadline) {
        std::fprintf(stderr,
                     "cuawait-bench-pipeline: TIMEOUT: %s ran longer than %.0f s (--timeout); "
                     "exiting with code %d\n",
                     m_label.c_str(), m_seconds, exit_timeout);
        std::fflush(stdout);
        std::fflush(stderr);
        std::_Exit(exit_timeout);
      }
    }
  }

  std::mutex m_mutex;
  std::condition_variable m_cv;
  std::string m_label;
  double m_seconds = 0;
  std::chrono::steady_clock::time_point m_deadline{};
  bool m_armed = false;
  bool m_stop = false;
  std::thread m_thread;
};

//! Resident set size of this process, bytes.
double rss_bytes() {
  std::ifstream in("/proc/self/statm");
  long long pages_total = 0, pages_resident = 0;
  in >> pages_total >> pages_resident;
  return static_cast<double>(pages_resident) * static_cast<double>(sysconf(_SC_PAGESIZE));
}

//! Samples RSS every few milliseconds while alive and keeps the peak.
class rss_sampler {
public:
  rss_sampler() : m_peak(rss_bytes()), m_thread([this](std::stop_token st) { loop(st); }) {}
  [[nodiscard]] double peak() {
    m_thread.request_stop();
    m_thread.join();
    return std::max(m_peak.load(), rss_bytes());
  }

private:
  void loop(const std::stop_token& st) {
    while (!st.stop_requested()) {
      const double r = rss_bytes();
      if (r > m_peak.load()) {
        m_peak = r;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  std::atomic<double> m_peak;
  std::jthread m_thread;
};

std::vector<mode_description> describe(const std::vector<mode_entry>& modes) {
  std::vector<mode_description> d;
  for (const mode_entry& m : modes) {
    d.push_back(m.desc);
  }
  return d;
}

//! The registered modes named by `names` (groups expanded), in order, without repeats.
std::vector<const mode_entry*> select(const std::vector<mode_entry>& modes,
                                      const std::vector<std::string>& names) {
  std::vector<const mode_entry*> out;
  auto add = [&](const mode_entry& m) {
    if (std::find(out.begin(), out.end(), &m) == out.end()) {
      out.push_back(&m);
    }
  };
  for (const std::string& n : names) {
    for (const mode_entry& m : modes) {
      // "all" leaves out the probes (named one by one: they measure, they are no way to
      // run the pipeline).
      if ((n == "all" && m.desc.family != "probe") || n == m.desc.name ||
          (n == "baselines" && m.desc.family == "baseline") ||
          (n == "cuawait" && m.desc.family == "cuawait")) {
        add(m);
      }
    }
  }
  return out;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

struct run_state {
  const options& opts;
  job_checker& checker;
  host_work& work;
  watchdog& dog;
  int sms;
  int pool_threads;
  bool context_lost = false;
  //! The processes of a spread run, or null; then each run's part of this rank, in order.
  process_group* group = nullptr;
  std::vector<rank_run> parts;
};

//! One mode run on this process; `started` gets the start of its timed region.
mode_run run_here(run_state& st, const mode_entry& m, int level,
                  timed_region::clock::time_point& started) {
  const int rank = st.group != nullptr ? st.group->rank() : 0;
  const int ranks = st.group != nullptr ? st.group->size() : 1;
  mode_run r;
  r.mode = m.desc.name;
  r.family = m.desc.family;
  r.concurrency = level;
  r.bytes = st.opts.w.bytes;
  r.threads = m.threads_used != nullptr ? m.threads_used(level, st.pool_threads) : 1;
  r.jobs = jobs_of_rank(jobs_for_run(st.opts, level), rank, ranks);
  if (level > m.max_concurrency) {
    r.skipped = "skipped: at most " + std::to_string(m.max_concurrency) + " in flight";
    return r;
  }
  if (st.context_lost) {
    r.error = "not run: the CUDA context was lost in an earlier run";
    return r;
  }
  std::printf("[run] %s concurrency %d threads %d: %lld jobs...\n", r.mode.c_str(), level,
              r.threads, static_cast<long long>(r.jobs));
  std::fflush(stdout);
  st.checker.reset();
  mode_context ctx{st.work, r.jobs,       level, st.pool_threads, kernel_grid(st.work.n(), st.sms),
                   st.sms,  st.opts.batch};
  ctx.trace_path = trace_path_for(rank_path(st.opts.trace_path, rank), r.mode, level);
  ctx.devices = st.opts.devices;
  timed_region timer;
  const double rss_before = rss_bytes();
  std::optional<rss_sampler> sampler;
  if (st.opts.scaling) {
    sampler.emplace();
  }
  st.dog.arm(r.mode + " at concurrency " + std::to_string(level), st.opts.timeout_s);
  try {
    m.run(ctx, timer);
    if (!timer.valid()) {
      r.error = "the mode did not time its work (bug in the mode)";
    }
  } catch (const mode_skipped& e) {
    r.skipped = e.what();
  } catch (const cuda::cuda_error& e) {
    r.error = e.what();
    st.context_lost = st.context_lost || e.context_lost();
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  st.dog.disarm();
  started = timer.started();
  if (sampler) {
    r.rss_delta_bytes = sampler->peak() - rss_before;
  }
  if (!r.skipped.empty()) {
    std::printf("[run] %s concurrency %d: %s\n", r.mode.c_str(), level, r.skipped.c_str());
    std::fflush(stdout);
    return r;
  }
  if (r.error.empty()) {
    r.seconds = timer.seconds();
    const job_checker::verdict v = st.checker.check(r.jobs);
    r.jobs_checked = v.jobs_checked;
    r.samples_checked = v.samples_checked;
    r.jobs_not_once = v.jobs_not_once;
    r.mismatches = v.mismatches;
    if (!v.ok()) {
      std::fprintf(stderr,
                   "[run] %s concurrency %d: WRONG RESULTS: %lld mismatches, %lld jobs "
                   "not completed exactly once; first problems:\n%s",
                   r.mode.c_str(), level, static_cast<long long>(v.mismatches),
                   static_cast<long long>(v.jobs_not_once), v.first_problems.c_str());
    }
  } else {
    std::fprintf(stderr, "[run] %s concurrency %d: FAILED: %s\n", r.mode.c_str(), level,
                 r.error.c_str());
  }
  std::printf("[run] %s concurrency %d: %.2f us/job, %s\n", r.mode.c_str(), level, r.us_per_job(),
              r.ok() ? "check ok" : "FAILED");
  for (std::size_t i = 0; i < ctx.jobs_per_device.size() && r.seconds > 0; ++i) {
    const auto jobs = static_cast<double>(ctx.jobs_per_device[i]);
    std::printf("[run] %s concurrency %d: device %d (#%zu): %.0f jobs, %.0f jobs/s\n",
                r.mode.c_str(), level, ctx.devices[i], i, jobs, jobs / r.seconds);
  }
  std::fflush(stdout);
  std::fflush(stderr);
  return r;
}

//! One mode run; in a spread run, every rank at once (from a barrier), each on its share of
//! the jobs, its part recorded for rank 0. Every rank goes through the barrier whatever
//! happens to it, so that none waits for a rank that left the list.
mode_run run_one(run_state& st, const mode_entry& m, int level) {
  if (st.group != nullptr) {
    st.group->barrier();
  }
  const auto t0 = timed_region::clock::now();
  auto started = t0;
  mode_run r = run_here(st, m, level, started);
  if (st.group != nullptr) {
    st.parts.push_back(rank_run_of(r, std::chrono::duration<double>(started - t0).count()));
  }
  return r;
}

bool write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) {
    std::fprintf(stderr, "cuawait-bench-pipeline: cannot write %s\n", path.c_str());
    return false;
  }
  std::printf("wrote %s\n", path.c_str());
  return true;
}

//! The grid run: per job size, the floor, then every level's cells, each repetition running
//! every selected mode once (modes interleaved, so that drift during the grid hits them
//! alike); then the ratio tables and the JSON document. Sequential modes are left out (a
//! grid compares levels).
int run_grid(const options& o, run_header& h, const std::vector<mode_entry>& registry,
             watchdog& dog) {
  std::vector<const mode_entry*> selected;
  for (const mode_entry* e : select(registry, o.modes)) {
    if (e->sequential) {
      std::printf("[grid] %s left out: it runs at concurrency 1 only\n", e->desc.name.c_str());
    } else if (e->desc.name == grid_reference_mode) {
      selected.insert(selected.begin(), e); // the reference first in every repetition
    } else {
      selected.push_back(e);
    }
  }
  const machine_info& m = h.machine;
  std::vector<grid_size> sizes;
  std::vector<mode_run> runs;
  bool context_lost = false;
  for (const std::int64_t bytes : o.grid_bytes) {
    options so = o;
    so.w.bytes = bytes;
    std::int64_t max_jobs = 1;
    for (const int level : so.concurrency) {
      max_jobs = std::max(max_jobs, jobs_for_run(so, level));
    }
    so.w.jobs = max_jobs; // the floor's kernel and CPU samples take at most this many
    std::printf("\n[grid] jobs of %s (%lld bytes), %lld to %lld jobs per run\n",
                size_label(bytes).c_str(), static_cast<long long>(bytes),
                static_cast<long long>(jobs_for_run(so, so.concurrency.front())),
                static_cast<long long>(max_jobs));
    std::fflush(stdout);
    grid_size gs;
    gs.bytes = bytes;
    if (!context_lost) {
      dog.arm("warm-up and floor measurement of " + size_label(bytes), o.timeout_s);
      warm_up(so.w, m.sms);
      gs.measured = measure_floor(so, m, stdout);
      gs.floor = compute_floor(so.w, gs.measured);
      dog.disarm();
      std::printf("[floor] %.2f us per job, set by %s\n", gs.floor.floor_us,
                  gs.floor.limit.c_str());
    }
    sizes.push_back(gs);
    job_checker checker(max_jobs, so.w.floats(), so.w.iters, so.samples);
    host_work work(so.w, so.samples, checker);
    run_state st{so, checker, work, dog, m.sms, h.pool_threads, context_lost};
    for (const int level : so.concurrency) {
      for (int rep = 0; rep < so.repeat; ++rep) {
        for (const mode_entry* e : selected) {
          runs.push_back(run_one(st, *e, level));
          runs.back().repetition = rep;
        }
      }
    }
    context_lost = st.context_lost;
  }
  std::printf(
      "\n%s",
      format_grid_tables(runs, sizes, o.concurrency, o.repeat, grid_reference_mode).c_str());
  bool ok = true;
  for (const mode_run& r : runs) {
    ok = ok && (r.ok() || !r.skipped.empty());
  }
  if (!o.json_path.empty()) {
    ok = write_file(o.json_path, make_grid_json(h, sizes, runs, grid_reference_mode)) && ok;
  }
  if (!o.svg_path.empty()) {
    std::printf("(--svg is not drawn for a grid run)\n");
  }
  std::printf("%s\n", ok ? "all modes ran and checked" : "FAILED: see the lines above");
  return ok ? 0 : exit_failed;
}

//! Empty when the options can be spread over `ranks` processes, else why not (naming the
//! option, as `validate` does).
std::string spread_refusal(const options& o, int ranks) {
  if (o.grid) {
    return "--grid: not in a run spread over processes (run the grid as one process)";
  }
  if (o.w.jobs < ranks) {
    return "--jobs: " + std::to_string(o.w.jobs) + " jobs cannot be split between " +
           std::to_string(ranks) + " processes";
  }
  return {};
}

//! Whether every rank has a usable GPU; rank 0 says why not, once per distinct reason, with
//! the ranks it concerns.
bool every_rank_has_a_gpu(process_group* group, const std::string& why) {
  if (group == nullptr) {
    if (!why.empty()) {
      std::fprintf(stderr, "cuawait-bench-pipeline: %s\n", why.c_str());
    }
    return why.empty();
  }
  const std::vector<std::string> whys = group->gather(why);
  std::vector<std::pair<std::string, std::string>> said; // reason, its ranks
  for (std::size_t r = 0; r < whys.size(); ++r) {
    if (whys[r].empty()) {
      continue;
    }
    auto it =
        std::find_if(said.begin(), said.end(), [&](const auto& p) { return p.first == whys[r]; });
    if (it == said.end()) {
      said.emplace_back(whys[r], std::to_string(r));
    } else {
      it->second += ", " + std::to_string(r);
    }
  }
  for (const auto& [reason, ranks] : said) {
    std::fprintf(stderr, "cuawait-bench-pipeline: %s (rank%s %s)\n", reason.c_str(),
                 ranks.find(',') != std::string::npos ? "s" : "", ranks.c_str());
  }
  return group->all(why.empty());
}

//! Rank 0's summary of a spread run from every rank's parts; true when every mode run ran
//! and checked on every rank (or was skipped).
bool report_spread(process_group& group, const run_header& h, const std::vector<mode_run>& runs,
                   const std::vector<rank_run>& parts) {
  const std::vector<std::string> texts = group.gather(encode_rank_runs(parts));
  if (group.rank() != 0) {
    return true;
  }
  std::vector<std::vector<rank_run>> per_rank;
  for (const std::string& t : texts) {
    per_rank.push_back(decode_rank_runs(t));
  }
  const std::vector<spread_run> spread = merge_rank_runs(per_rank);
  std::printf("\n%s", format_spread(spread, group.size()).c_str());
  std::printf("floor (rank 0's, measured alone): %.2f us/job (%s)\n", h.floor.floor_us,
              h.floor.limit.c_str());
  bool ok = true;
  for (const spread_run& s : spread) {
    ok = ok && (s.ok() || s.skipped());
  }
  const options& o = h.opts;
  if (!o.json_path.empty()) {
    const int n = group.size();
    ok = write_file(o.json_path, make_json(h, runs,
                                           [&](json_writer& j) {
                                             j.key("spread");
                                             write_spread_json(j, spread, n);
                                           })) &&
         ok;
  }
  if (!o.svg_path.empty()) {
    std::printf("(--svg is not drawn for a spread run)\n");
  }
  return ok;
}

int run(int argc, char** argv, process_group* group) {
  const int rank = group != nullptr ? group->rank() : 0;
  std::vector<mode_entry> registry;
  register_baselines(registry);
  register_cuawait_modes(registry);
  register_graph_modes(registry);
  register_staged_modes(registry);
  // Every rank parses the same command line and decides alike; rank 0 alone says so.
  std::ostream quiet(nullptr);
  parse_outcome parsed = parse_command_line(
      argc, argv, describe(registry), rank == 0 ? std::cout : quiet, rank == 0 ? std::cerr : quiet);
  if (!parsed.opts) {
    return parsed.exit_code;
  }
  const options& o = *parsed.opts;
  if (group != nullptr) {
    if (const std::string why = spread_refusal(o, group->size()); !why.empty()) {
      if (rank == 0) {
        std::fprintf(stderr, "cuawait-bench-pipeline: %s\nRun with --help for the options.\n",
                     why.c_str());
      }
      return 2;
    }
    if (rank != 0) {
      // One summary, from rank 0: the others' progress lines would only interleave with
      // its own. Their errors still reach stderr, and rank 0's summary names them.
      if (std::freopen("/dev/null", "w", stdout) == nullptr) {
        std::fprintf(stderr, "cuawait-bench-pipeline: rank %d: cannot silence stdout\n", rank);
      }
    }
  }
  if (!every_rank_has_a_gpu(group, gpu_unavailable_reason(o.device))) {
    return exit_no_device;
  }
  run_header h;
  h.date_utc = utc_now();
  for (int i = 0; i < argc; ++i) {
    h.command_line += (i ? " " : "") + std::string(argv[i]);
  }
  h.opts = o;
  h.machine = query_machine(o.device);
  h.pool_threads = o.threads > 0 ? o.threads : h.machine.host_cores;
  const machine_info& m = h.machine;
  std::printf("cuawait-bench-pipeline %s: %s (%d SMs, driver %d, runtime %d), %d host cores\n",
              h.date_utc.c_str(), m.gpu_name.c_str(), m.sms, m.driver_version, m.runtime_version,
              m.host_cores);
  watchdog dog;
  if (o.grid) {
    std::printf("grid run: %zu job sizes x %zu levels, %d iters, cpu_us %g, %d repetitions, "
                "%lld MiB per cell; pool threads %d%s\n",
                o.grid_bytes.size(), o.concurrency.size(), o.w.iters, o.w.cpu_us, o.repeat,
                static_cast<long long>(o.grid_cell_bytes >> 20), h.pool_threads,
                o.quick ? "; quick" : "");
    std::fflush(stdout);
    return run_grid(o, h, registry, dog);
  }
  std::printf("workload %s: %lld jobs, %lld bytes, %d iters, cpu_us %g; pool threads %d%s%s\n",
              o.preset_name.c_str(), static_cast<long long>(o.w.jobs),
              static_cast<long long>(o.w.bytes), o.w.iters, o.w.cpu_us, h.pool_threads,
              o.quick ? "; quick" : "", o.scaling ? "; scaling run" : "");
  if (group != nullptr) {
    std::printf("spread over %d processes (MPI): each mode run's jobs split between them "
                "(rank 0 %lld of %lld); the lines below are rank 0's\n",
                group->size(), static_cast<long long>(jobs_of_rank(o.w.jobs, 0, group->size())),
                static_cast<long long>(o.w.jobs));
  }
  std::fflush(stdout);

  // In a spread run the ranks measure their floor in turn, so that none measures a GPU or a
  // link another one is using.
  for (int turn = 0; turn < (group != nullptr ? group->size() : 1); ++turn) {
    if (group != nullptr) {
      group->barrier();
    }
    if (turn == rank) {
      dog.arm("warm-up and floor measurement", o.timeout_s);
      warm_up(o.w, m.sms);
      h.measured = measure_floor(o, m, stdout);
      h.floor = compute_floor(o.w, h.measured);
      dog.disarm();
    }
  }
  std::printf("[floor] %.2f us per job, set by %s\n", h.floor.floor_us, h.floor.limit.c_str());

  const auto selected = select(registry, o.modes);
  std::int64_t max_jobs = o.w.jobs;
  for (const int level : o.concurrency) {
    max_jobs = std::max(max_jobs, jobs_for_run(o, level));
  }
  const auto t0 = std::chrono::steady_clock::now();
  job_checker checker(max_jobs, o.w.floats(), o.w.iters, o.samples);
  std::printf("[check] reference results of %lld jobs x %d samples computed in %.2f s\n",
              static_cast<long long>(max_jobs), o.samples,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  std::fflush(stdout);
  host_work work(o.w, o.samples, checker);
  run_state st{o, checker, work, dog, m.sms, h.pool_threads};
  st.group = group;
  std::vector<mode_run> runs;
  for (const mode_entry* e : selected) {
    const std::vector<int> levels = e->sequential ? std::vector<int>{1} : o.concurrency;
    for (const int level : levels) {
      runs.push_back(run_one(st, *e, level));
    }
  }

  if (group != nullptr) {
    const bool ok = report_spread(*group, h, runs, st.parts);
    if (rank == 0) {
      std::printf("%s\n",
                  ok ? "all modes ran and checked on every rank" : "FAILED: see the lines above");
    }
    return ok ? 0 : exit_failed;
  }
  std::printf("\n%s", format_table(runs, h.floor, o.scaling).c_str());
  bool ok = true;
  for (const mode_run& r : runs) {
    ok = ok && (r.ok() || !r.skipped.empty());
  }
  if (!o.json_path.empty()) {
    ok = write_file(o.json_path, make_json(h, runs)) && ok;
  }
  if (!o.svg_path.empty()) {
    const std::string title = "cuawait pipeline " + o.preset_name + " on " + m.gpu_name + " (" +
                              std::to_string(o.w.bytes) + " B jobs)";
    ok = write_file(o.svg_path, render_svg(make_plot(runs, h.floor, title))) && ok;
  }
  std::printf("%s\n", ok ? "all modes ran and checked" : "FAILED: see the lines above");
  return ok ? 0 : exit_failed;
}

} // namespace
} // namespace cuawait::bench

int main(int argc, char** argv) {
  using namespace cuawait::bench;
  process_group* group = nullptr;
#if defined(CUAWAIT_BENCH_MPI)
  // MPI only under a launcher: a plain start is the run of a build without MPI.
  std::unique_ptr<mpi_group> mpi;
  if (cuawait::mpi::launched_by_mpi()) {
    try {
      mpi = std::make_unique<mpi_group>(argc, argv);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "cuawait-bench-pipeline: %s\n", e.what());
      return exit_failed;
    }
    group = mpi->size() > 1 ? mpi.get() : nullptr;
  }
#endif
  try {
    return run(argc, argv, group);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "cuawait-bench-pipeline: %s%s\n",
                 group != nullptr ? ("rank " + std::to_string(group->rank()) + ": ").c_str() : "",
                 e.what());
#if defined(CUAWAIT_BENCH_MPI)
    if (group != nullptr) {
      std::fflush(stderr);
      mpi_group::abort(exit_failed); // the other ranks may be waiting for this one
    }
#endif
    return exit_failed;
  }
}
