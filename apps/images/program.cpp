// SPDX-License-Identifier: Apache-2.0
// Command line, backend choice, the run, and the summary.

#include "program.hpp"

#include "batch.hpp"
#include "coro_mode.hpp"
#include "output.hpp"
#include "resume.hpp"

#include <CLI/CLI.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace cuawait::images {
namespace {

std::atomic<bool> g_stop{false};

// How this process names itself in its messages: "cuawait-images", or on a rank other than
// 0 of a spread run "cuawait-images: rank N".
std::string g_tag = "cuawait-images";
// On a rank other than 0 of a spread run, until the run is planned: messages are kept, not
// printed. Every rank meets the argument errors alike; rank 0 prints them once, and names
// another rank only when its reason differs.
bool g_hold = false;
std::string g_last_message; // the last message said, for the rank's report

void say(const std::string& message) {
  g_last_message = message;
  if (!g_hold) {
    std::fprintf(stderr, "%s: %s\n", g_tag.c_str(), message.c_str());
  }
}

constexpr const char* ceiling_note =
    "ceiling: decode, a stand-in edge image and encode only; outputs are not edge images";

extern "C" void on_stop_signal(int /*sig*/) { g_stop.store(true, std::memory_order_relaxed); }

struct options {
  std::vector<std::string> inputs;
  std::string output = "out/images";
  int count = 48;
  std::string size = "1024";
  std::uint64_t seed = 1;
  int threads = 0;
  std::string mode = "coro";
  std::string backend = "auto";
  bool no_write = false;
  std::string trace;
  std::string timeline;
  double timeline_ms = 0;
  std::string progress = "auto";
  bool quiet = false;
  std::size_t memory_budget_mib = 0; // 0: default_memory_budget(threads)
  std::size_t max_in_flight = 0;     // 0: default_max_in_flight(threads)
  std::size_t streams = 0;           // 0: default_stream_count(threads)
  std::vector<int> devices;          // coro mode on the GPU: spread over these devices
  std::uint64_t max_pixels = decode_limits{}.max_pixels;
  std::uint64_t max_file_mib = decode_limits{}.max_file_bytes >> 20;
  bool recursive = false;
  bool skip_existing = false;
  std::size_t limit = 0; // 0: every image
  std::string format = "png";
  int quality = 90;
  std::string decode = "auto";
};

// "1 image", "2 images".
std::string images(std::size_t n) { return std::to_string(n) + (n == 1 ? " image" : " images"); }

// "512" or "640x480".
std::optional<std::pair<int, int>> parse_size(const std::string& s) {
  int w = 0;
  int h = 0;
  char x = 0;
  char extra = 0;
  const int n = std::sscanf(s.c_str(), "%d%c%d%c", &w, &x, &h, &extra);
  if (n == 1) {
    h = w;
  } else if (n != 3 || (x != 'x' && x != 'X')) {
    return std::nullopt;
  }
  if (w <= 0 || h <= 0 || w > 16384 || h > 16384) {
    return std::nullopt;
  }
  return std::pair{w, h};
}

void define_options(CLI::App& app, options& o) {
  app.add_option("inputs", o.inputs,
                 "Image files (PNG, JPEG, PGM/PPM) or directories; none: a synthetic batch");
  app.add_option("-o,--output", o.output, "Output directory")->capture_default_str();
  app.add_option("--count", o.count, "Synthetic batch: number of images")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_option("--size", o.size, "Synthetic batch: image size, N or WxH")->capture_default_str();
  app.add_option("--seed", o.seed, "Synthetic batch: seed")->capture_default_str();
  app.add_option("-t,--threads", o.threads, "CPU threads (default: all cores)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--mode", o.mode,
                 "coro: one coroutine per image; sync: one image at a time; "
                 "threads: T threads each running the sync loop; ceiling: T threads that only "
                 "decode and encode (a bound, not the pipeline)")
      ->check(CLI::IsMember({"coro", "sync", "threads", "ceiling"}))
      ->capture_default_str();
  app.add_option("--backend", o.backend, "auto: CUDA when a device is usable, else CPU")
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}))
      ->capture_default_str();
  app.add_option("--decode", o.decode,
                 "JPEG decoding: cpu (libjpeg), gpu (nvJPEG; coro mode on the CUDA backend), "
                 "auto: gpu where the build has nvJPEG and the run is coro on the GPU")
      ->check(CLI::IsMember({"auto", "cpu", "gpu"}))
      ->capture_default_str();
  app.add_flag("--no-write", o.no_write, "Do not write edge images or features");
  app.add_flag("-r,--recursive", o.recursive,
               "Also take the images in nested directories (outputs mirror the tree)");
  app.add_flag("--skip-existing", o.skip_existing,
               "Resume: skip images whose edge image and features record exist already");
  app.add_option("--limit", o.limit, "Process at most N images now (0: all); resume later");
  app.add_option("--format", o.format, "Edge images: png or jpeg")
      ->check(CLI::IsMember({"png", "jpeg", "jpg"}))
      ->capture_default_str();
  app.add_option("--quality", o.quality, "JPEG edge images: quality 1-100")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  app.add_option("--trace", o.trace, "Write a Chrome/Perfetto trace (JSON) of every stage");
  app.add_option("--timeline", o.timeline, "Write an SVG timeline of CPU threads and GPU streams");
  app.add_option("--timeline-ms", o.timeline_ms,
                 "Timeline: length of the time axis in ms (the same value for two runs draws "
                 "them to the same scale); default: the run's wall time")
      ->check(CLI::Range(0.0, 1e9));
  app.add_option("--progress", o.progress, "auto (bar on a terminal), bar, lines, none")
      ->check(CLI::IsMember({"auto", "bar", "lines", "none"}))
      ->capture_default_str();
  app.add_flag("-q,--quiet", o.quiet, "Same as --progress=none (failures are still reported)");
  app.add_option("--memory-budget", o.memory_budget_mib,
                 "coro mode: MiB of image buffers in flight (default: 96 per thread, at least "
                 "512, at most half of the physical memory)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--max-in-flight", o.max_in_flight,
                 "coro mode: images in flight at most, besides the memory budget (default: 2 per "
                 "thread, at least 8)")
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("--streams", o.streams,
                 "coro mode on the GPU: streams in the pool (default: 2 per thread, 8 to 32)")
      ->check(CLI::Range(1, 256));
  app.add_option("--devices", o.devices,
                 "coro mode on the GPU: comma-separated devices the images are spread over, "
                 "each to the device with the fewest in flight (--streams streams each); one "
                 "device: the run without the option")
      ->delimiter(',')
      ->check(CLI::Range(0, 1023));
  app.add_option("--max-pixels", o.max_pixels, "Refuse images with more pixels (0: no limit)")
      ->capture_default_str();
  app.add_option("--max-file-size", o.max_file_mib,
                 "Refuse files larger than this (MiB; 0: no limit)")
      ->capture_default_str();
}

progress_style style_of(const options& o) {
  if (o.quiet || o.progress == "none") {
    return progress_style::quiet;
  }
  if (o.progress == "bar") {
    return progress_style::bar;
  }
  if (o.progress == "lines") {
    return progress_style::lines;
  }
  return progress_reporter::detect(stderr);
}

// Picks the backend; nullopt after printing why the run cannot go on.
std::optional<bool> choose_cuda(const std::string& backend, gpu_backend* gpu) {
  if (backend == "cpu") {
    return false;
  }
  const std::string reason = gpu == nullptr ? "this build of cuawait-images has no CUDA support"
                                            : gpu->unavailable_reason();
  if (reason.empty()) {
    return true;
  }
  if (backend == "cuda") {
    say("--backend=cuda: " + reason);
    return std::nullopt;
  }
  say("no usable GPU (" + reason + "); running on the CPU backend");
  return false;
}

// Whether JPEGs are decoded on the GPU; nullopt after printing why --decode=gpu cannot be
// served. `gpu` is the backend the run uses (nullptr: the CPU backend).
std::optional<bool> choose_gpu_decode(const options& o, gpu_backend* gpu) {
  const bool possible = gpu != nullptr && gpu->has_gpu_decode() && o.mode == "coro";
  if (o.decode != "gpu" || possible) {
    return o.decode != "cpu" && possible;
  }
  const char* why = o.mode != "coro" ? "only the coro mode decodes on the GPU"
                    : gpu == nullptr ? "the run is on the CPU backend"
                                     : "this build has no nvJPEG (it was not found at build time)";
  say(std::string("--decode=gpu: ") + why);
  return std::nullopt;
}

std::string fmt_ms(double us) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f ms", us / 1000.0);
  return buf;
}

void write_features(const batch& b, const run_plan& plan, std::size_t batch_size,
                    const std::vector<job_outcome>& outcomes) {
  std::filesystem::create_directories(b.config().out_dir);
  write_file_atomic(b.config().out_dir / features_file_name,
                    merged_features(plan, batch_size, outcomes));
}

// Times of the untimed preparation, for the summary (µs; negative: did not happen).
struct untimed_setup {
  double inputs_us = -1;  // generating the synthetic inputs
  double context_us = -1; // creating the CUDA context
  double mode_us = -1;    // the mode's own setup (engines, streams, thread pool)
};

// What the timed region contains, said plainly, so that figures are read for what they are.
void print_timed_region(const batch& b, bool cuda, const untimed_setup& u) {
  std::printf("  timed: each image's decode+preprocess -> %s -> postprocess%s, from the "
              "first image's start to the last one's end\n",
              cuda ? "upload -> GPU gray, blur, Sobel+HOG -> download"
              : b.concurrency_note() == ceiling_note
                  ? "no pipeline, a stand-in edge image (ceiling)"
                  : "gray, blur, Sobel+HOG (CPU)",
              b.config().write ? " (PNG encoding and writing included)" : " (no writing)");
  std::string before;
  auto add = [&](const std::string& what, double us, const char* after = "") {
    if (us >= 0) {
      before += (before.empty() ? "" : "; ") + what + fmt_ms(us) + after;
    }
  };
  if (b.inputs_prepared()) {
    add(std::to_string(b.jobs().size()) + " synthetic inputs generated into memory in ",
        b.prepare_us(), " (standing for files on disk: decode takes them from memory)");
  }
  add("CUDA context ", u.context_us);
  add(cuda ? "mode setup (threads, streams, GPU and pinned buffers sized for the images in "
             "flight, each kernel launched once, each stream awaited once) "
           : "mode setup (threads, pool) ",
      u.mode_us);
  std::printf("  untimed, before: %s\n", before.empty() ? "nothing" : before.c_str());
  if (!b.inputs_prepared()) {
    std::printf("  inputs: %s\n", b.jobs().empty() || !b.jobs().front().source.empty()
                                      ? "files; reading and decoding them is timed"
                                      : "synthetic, too many to hold in memory: generated "
                                        "inside the timed region");
  }
}

// The whole run's outcomes and time: this process's, or in a spread run every rank's, with
// the time from the first rank's start to the last one's end.
// What this process spent over the run (mode setup included), from getrusage: where a mode's
// time goes that the stage timings do not show (kernel time in allocation and page faults,
// threads switched out while waiting).
struct process_usage {
  double user_s = 0;
  double system_s = 0;
  long voluntary_switches = 0;
  long involuntary_switches = 0;
  long minor_faults = 0;
  long major_faults = 0;

  static process_usage now() noexcept {
    rusage r{};
    if (getrusage(RUSAGE_SELF, &r) != 0) {
      return {};
    }
    auto secs = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
    return {secs(r.ru_utime), secs(r.ru_stime), r.ru_nvcsw, r.ru_nivcsw, r.ru_minflt, r.ru_majflt};
  }
  [[nodiscard]] process_usage since(const process_usage& before) const noexcept {
    return {user_s - before.user_s,
            system_s - before.system_s,
            voluntary_switches - before.voluntary_switches,
            involuntary_switches - before.involuntary_switches,
            minor_faults - before.minor_faults,
            major_faults - before.major_faults};
  }
};

struct run_totals {
  const std::vector<job_outcome>* outcomes = nullptr; // by position in the jobs run now
  double secs = 0;
  std::string spread_note; // empty: a single-process run
  process_usage usage;     // this process only, over the run and its mode setup
  double usage_wall_s = 0; // the wall time `usage` covers
};

void print_summary(const batch& b, const options& o, const run_plan& plan, bool cuda,
                   const std::string& device, double start_us, double end_us,
                   const untimed_setup& setup, const run_totals& totals) {
  std::size_t ok = 0;
  std::size_t failed = 0;
  std::size_t not_started = 0;
  for (const job_outcome& out : *totals.outcomes) {
    ok += out.done && out.error.empty() ? 1 : 0;
    failed += out.done && !out.error.empty() ? 1 : 0;
    not_started += out.done ? 0 : 1;
  }
  // The rate counts the images that came out: a failed one is usually a file refused from
  // its header, far faster than a processed one, and would inflate it.
  const double secs = totals.secs;
  std::printf("cuawait-images: %s in %.3f s, %.1f images/s (successful ones): %zu ok, %zu failed",
              images(ok + failed).c_str(), secs, secs > 0 ? static_cast<double>(ok) / secs : 0.0,
              ok, failed);
  if (not_started > 0) {
    std::printf(", %zu not started or not finished (interrupted)", not_started);
  }
  if (plan.skipped > 0) {
    std::printf(", %zu skipped (outputs exist)", plan.skipped);
  }
  if (plan.left > 0) {
    std::printf(", %zu left for a later run (--limit)", plan.left);
  }
  std::printf("\n  mode %s, backend %s, %d CPU threads%s%s\n", o.mode.c_str(),
              cuda ? ("cuda (" + device + ")").c_str() : "cpu", b.config().threads,
              b.concurrency_note().empty() ? "" : "; ", b.concurrency_note().c_str());
  if (!totals.spread_note.empty()) {
    std::printf("  %s\n", totals.spread_note.c_str());
  }
  print_timed_region(b, cuda, setup);
  const utilisation u = b.log().measure(start_us, end_us);
  if (cuda && u.wall_us > 0) {
    std::printf("  GPU busy %.1f%% of wall time (GPU timestamps); CPU/GPU overlap %.1f%%; "
                "CPU stages busy %.1f%%\n",
                100.0 * u.gpu_busy_us / u.wall_us, 100.0 * u.overlap_us / u.wall_us,
                100.0 * u.cpu_busy_us / u.wall_us);
  } else if (u.wall_us > 0) {
    std::printf("  GPU busy n/a (CPU backend); CPU stages busy %.1f%% of wall time (any thread)\n",
                100.0 * u.cpu_busy_us / u.wall_us);
  }
  if (totals.usage_wall_s > 0) {
    const process_usage& p = totals.usage;
    std::printf("  this process over the run and mode setup (%.3f s): CPU %.3f s user + %.3f s "
                "system (%.1f cores on average); context switches %ld voluntary, %ld "
                "involuntary; page faults %ld minor, %ld major\n",
                totals.usage_wall_s, p.user_s, p.system_s,
                (p.user_s + p.system_s) / totals.usage_wall_s, p.voluntary_switches,
                p.involuntary_switches, p.minor_faults, p.major_faults);
  }
  if (o.no_write) {
    std::printf("  outputs not written (--no-write)\n");
  } else {
    std::printf("  outputs: %s/*%s, %s/%s\n", b.config().out_dir.string().c_str(),
                edge_suffix(b.config().format), b.config().out_dir.string().c_str(),
                features_file_name);
  }
}

// Runs the batch in the mode `o` asks for, on `gpu` (nullptr: the CPU backend).
void run_mode(batch& b, const options& o, gpu_backend* gpu) {
  const engine_factory make = [&]() -> std::unique_ptr<stage_engine> {
    return gpu != nullptr ? gpu->make_engine(b.log()) : make_cpu_engine(b.log());
  };
  const std::size_t budget =
      o.memory_budget_mib > 0 ? o.memory_budget_mib << 20
                              : default_memory_budget(b.config().threads, physical_memory_bytes());
  if (o.mode == "ceiling") {
    b.set_concurrency_note(ceiling_note);
    b.run_threads([&] { return make_ceiling_engine(b.log()); });
  } else if (o.mode == "sync") {
    b.run_sync(make);
  } else if (o.mode == "threads") {
    b.run_threads(make);
  } else if (gpu != nullptr) {
    gpu->run_coro(b, budget, o.streams);
  } else {
    run_coro_cpu(b, budget);
  }
}

// --- a run spread over several processes (see rank_group) ---------------------------------

double system_clock_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// `path` as rank `rank` writes it: rank 0 keeps it, the others insert ".rank<N>" before the
// extension (trace.json, trace.rank1.json, ...), so that no two processes write one file.
std::string rank_path(const std::string& path, int rank) {
  if (rank == 0 || path.empty()) {
    return path;
  }
  const std::filesystem::path p(path);
  return (p.parent_path() /
          (p.stem().string() + ".rank" + std::to_string(rank) + p.extension().string()))
      .string();
}

// Writes the trace and the timeline asked for, as rank `rank` names them.
void write_trace_and_timeline(const options& o, const trace_log& log, const std::vector<job>& jobs,
                              int rank, bool cuda, const std::string& device, int threads,
                              double start_us, double end_us) {
  if (!o.trace.empty()) {
    write_file_atomic(rank_path(o.trace, rank), chrome_trace_json(log));
  }
  if (!o.timeline.empty()) {
    timeline_options t;
    t.title = "cuawait-images --mode=" + o.mode + " --backend=" + (cuda ? "cuda" : "cpu") + ", " +
              std::to_string(threads) + " CPU threads" + (cuda ? ", " + device : std::string());
    for (const job& j : jobs) {
      t.image_names.push_back(j.name);
    }
    t.start_us = start_us;
    t.end_us = end_us;
    t.axis_ms = o.timeline_ms;
    write_file_atomic(rank_path(o.timeline, rank), timeline_svg(log, t));
  }
}

// The more serious of two exit codes: interrupted, then usage, then some failed, then ok.
int worse(int a, int b) { return std::max(a, b); }

// Sends this rank's report to rank 0; rank 0 gets every rank's (its own first), the others
// nothing.
std::vector<rank_report> exchange(rank_group& group, const rank_report& mine) {
  std::vector<rank_report> all;
  for (const std::string& text : group.gather(encode_report(mine))) {
    all.push_back(decode_report(text));
  }
  return all;
}

// Rank 0: names every other rank that failed as a whole, unless for rank 0's own reason
// `own` (said already); returns the worst of their exit codes and `code`.
int report_failed_ranks(const std::vector<rank_report>& reports, int code, const std::string& own) {
  for (std::size_t r = 1; r < reports.size(); ++r) {
    if (!reports[r].fatal.empty() && reports[r].fatal != own) {
      say("rank " + std::to_string(r) + " failed: " + reports[r].fatal);
    }
    code = worse(code, reports[r].code);
  }
  return code;
}

// A rank that stops before its images (or instead of them) still takes part in the
// exchange, so that no rank waits for it; rank 0 then names the others that failed too.
// Its reason is the last message it said.
int give_up(rank_group* group, int code) {
  if (group == nullptr) {
    return code;
  }
  rank_report mine;
  mine.code = code;
  mine.fatal = code == exit_ok ? std::string() : g_last_message;
  try {
    const std::vector<rank_report> all = exchange(*group, mine);
    return group->rank() == 0 ? report_failed_ranks(all, code, mine.fatal) : code;
  } catch (const std::exception& e) {
    say(e.what());
    return worse(code, exit_usage);
  }
}

// Rank 0: the whole run from every rank's report, the outcomes by position in the jobs run
// now.
struct merged_run {
  std::vector<job_outcome> outcomes;
  double secs = 0;
  std::string note;
};

merged_run merge_reports(const std::vector<rank_report>& reports, std::size_t todo_count) {
  merged_run m;
  m.outcomes.resize(todo_count);
  double first = std::numeric_limits<double>::max();
  double last = std::numeric_limits<double>::lowest();
  std::string per_rank;
  for (std::size_t r = 0; r < reports.size(); ++r) {
    for (const auto& [t, outcome] : reports[r].outcomes) {
      if (t < todo_count) {
        m.outcomes[t] = outcome;
      }
    }
    if (reports[r].images > 0) {
      first = std::min(first, reports[r].wall_start_us);
      last = std::max(last, reports[r].wall_end_us);
    }
    per_rank += (r == 0 ? "" : ", ") + std::to_string(reports[r].images);
  }
  m.secs = last > first ? (last - first) / 1e6 : 0.0;
  m.note = "spread over " + std::to_string(reports.size()) +
           " processes (MPI), the images split round-robin: " + per_rank +
           "; the time is the whole run's, from the first rank's start to the last one's "
           "end; the lines below are rank 0's";
  return m;
}

} // namespace

std::atomic<bool>& stop_flag() noexcept { return g_stop; }

void install_stop_handlers() noexcept {
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
}

int run_program(int argc, const char* const* argv, gpu_backend* gpu, rank_group* group) {
  if (group != nullptr && group->size() <= 1) {
    group = nullptr;
  }
  const int rank = group != nullptr ? group->rank() : 0;
  g_tag = rank == 0 ? "cuawait-images" : "cuawait-images: rank " + std::to_string(rank);
  g_hold = rank != 0;
  g_last_message.clear();
  CLI::App app{"cuawait-images: a concurrent batch image pipeline (blur, Sobel, histogram of "
               "oriented gradients, edge images)",
               "cuawait-images"};
  options o;
  define_options(app, o);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) { // --help
      if (rank != 0) {
        return give_up(group, exit_ok);
      }
      return give_up(group, app.exit(e) == 0 ? exit_ok : exit_usage);
    }
    say(e.what());
    if (!g_hold) {
      std::fprintf(stderr, "Run with --help for more information.\n");
    }
    return give_up(group, exit_usage);
  }
  const auto size = parse_size(o.size);
  if (!size) {
    say("--size: expected N or WxH (1..16384), got '" + o.size + "'");
    return give_up(group, exit_usage);
  }
  if (!o.inputs.empty() && (app.count("--count") > 0 || app.count("--size") > 0)) {
    say("--count and --size apply to the synthetic batch only");
    return give_up(group, exit_usage);
  }
  // The ceiling has no GPU stage: it runs on the CPU whatever the backend.
  const std::optional<bool> cuda =
      o.mode == "ceiling" ? std::optional<bool>(false) : choose_cuda(o.backend, gpu);
  if (!cuda) {
    return give_up(group, exit_usage);
  }
  const std::optional<bool> gpu_decode = choose_gpu_decode(o, *cuda ? gpu : nullptr);
  if (!gpu_decode) {
    return give_up(group, exit_usage);
  }
  batch_config cfg;
  cfg.threads = o.threads > 0 ? o.threads
                              : static_cast<int>(std::max(1U, std::thread::hardware_concurrency()));
  cfg.max_in_flight = o.max_in_flight > 0 ? o.max_in_flight : default_max_in_flight(cfg.threads);
  cfg.write = !o.no_write;
  cfg.out_dir = o.output;
  cfg.seed = o.seed;
  cfg.width = size->first;
  cfg.height = size->second;
  // 0 means no limit.
  constexpr std::uint64_t unlimited = std::numeric_limits<std::uint64_t>::max();
  cfg.limits.max_pixels = o.max_pixels == 0 ? unlimited : o.max_pixels;
  cfg.limits.max_file_bytes =
      o.max_file_mib == 0 || o.max_file_mib > (unlimited >> 20) ? unlimited : o.max_file_mib << 20;
  cfg.format = o.format == "png" ? edge_format::png : edge_format::jpeg;
  cfg.jpeg_quality = o.quality;
  cfg.gpu_decode = *gpu_decode;
  cfg.devices = o.devices;

  // Every rank lists the whole batch and plans the whole run, so that names, output stems
  // and the features file are those of a single-process run; then it takes its share.
  std::vector<job> all;
  run_plan plan;
  try {
    all = o.inputs.empty() ? synthetic_jobs(o.count)
                           : collect_jobs(o.inputs, {o.recursive, std::filesystem::path(o.output)});
    if (all.empty()) {
      say("no images found in the inputs");
      return give_up(group, exit_usage);
    }
    check_outputs(cfg.out_dir, all, cfg.format);
    plan = plan_run(all, cfg, o.skip_existing, o.limit);
  } catch (const std::exception& e) {
    say(e.what());
    return give_up(group, exit_usage);
  }
  g_hold = false;
  std::vector<std::size_t> share; // positions in plan.todo this process runs
  std::vector<job> mine;
  if (group != nullptr) {
    share = share_of(plan.todo.size(), rank, group->size());
    for (const std::size_t t : share) {
      mine.push_back(plan.todo[t]);
    }
  }
  const std::vector<job>& jobs = group != nullptr ? mine : plan.todo;

  trace_log log;
  // In a spread run only rank 0 shows progress, and the failed images are printed by rank 0
  // at the end, in input order, as a single process prints them.
  progress_reporter progress(static_cast<int>(jobs.size()),
                             rank == 0 ? style_of(o) : progress_style::quiet, stderr,
                             group == nullptr);
  batch b(cfg, jobs, log, progress, g_stop);
  const std::string device = *cuda ? gpu->device_name() : std::string();
  // Untimed: the synthetic inputs (they stand for files already on disk) and the CUDA
  // context. The same for every mode, so the modes compare fairly.
  untimed_setup setup;
  double before_run = 0;
  process_usage usage_before;
  try {
    b.prepare_inputs();
    if (g_stop.load()) {
      // Stopped before any image started: nothing to write, and nothing is.
      say("interrupted before the first image; nothing written");
      return give_up(group, exit_interrupted);
    }
    if (*cuda && !jobs.empty()) {
      const double t = log.now_us();
      gpu->prepare();
      setup.context_us = log.now_us() - t;
    }
    before_run = log.now_us();
    usage_before = process_usage::now();
    if (!jobs.empty()) { // empty when every image was skipped
      run_mode(b, o, *cuda ? gpu : nullptr);
    }
  } catch (const std::exception& e) {
    progress.finish();
    say(e.what());
    return give_up(group, exit_usage);
  }
  const double end_us = log.now_us();
  const process_usage usage = process_usage::now().since(usage_before);
  const double wall_end_us = system_clock_us();
  progress.finish();
  // The timed region starts when the mode has finished its setup (see batch::start_clock).
  const double start_us = b.clock_start_us() >= 0 ? b.clock_start_us() : before_run;
  setup.mode_us = start_us - before_run;

  int status = exit_ok;
  // Each process writes its own trace and timeline (ranks other than 0 under a name of
  // their own), before the exchange, so that a failure is in its report.
  std::string trace_error;
  try {
    write_trace_and_timeline(o, log, jobs, rank, *cuda, device, cfg.threads, start_us, end_us);
  } catch (const std::exception& e) {
    say(e.what());
    trace_error = e.what();
    status = exit_some_failed;
  }
  run_totals totals{
      &b.outcomes(), (end_us - start_us) / 1e6, {}, usage, (end_us - before_run) / 1e6};
  merged_run merged;
  if (group != nullptr) {
    rank_report report;
    report.fatal = trace_error;
    report.images = jobs.size();
    report.wall_start_us = wall_end_us - (end_us - start_us);
    report.wall_end_us = wall_end_us;
    for (std::size_t k = 0; k < share.size(); ++k) {
      report.outcomes.emplace_back(share[k], b.outcomes()[k]);
      status = b.outcomes()[k].done && !b.outcomes()[k].error.empty() ? exit_some_failed : status;
    }
    report.code = g_stop.load() ? exit_interrupted : status;
    std::vector<rank_report> reports;
    try {
      reports = exchange(*group, report);
    } catch (const std::exception& e) {
      say(e.what());
      return worse(report.code, exit_usage);
    }
    if (rank == 0) {
      merged = merge_reports(reports, plan.todo.size());
      status = report_failed_ranks(reports, status, trace_error);
      totals = {&merged.outcomes, merged.secs, merged.note, usage, (end_us - before_run) / 1e6};
      for (std::size_t t = 0; t < merged.outcomes.size(); ++t) {
        if (merged.outcomes[t].done && !merged.outcomes[t].error.empty()) {
          std::fprintf(stderr, "cuawait-images: %s: %s\n", plan.todo[t].name.c_str(),
                       merged.outcomes[t].error.c_str());
        }
      }
    }
  }
  try {
    if (cfg.write && rank == 0) {
      write_features(b, plan, all.size(), *totals.outcomes);
    }
  } catch (const std::exception& e) {
    say(e.what());
    status = worse(status, exit_some_failed);
  }
  if (rank == 0) {
    print_summary(b, o, plan, *cuda, device, start_us, end_us, setup, totals);
    std::fflush(stdout);
  }
  for (const job_outcome& out : *totals.outcomes) {
    if (out.done && !out.error.empty()) {
      status = worse(status, exit_some_failed);
    }
  }
  return g_stop.load() ? exit_interrupted : status;
}

} // namespace cuawait::images
