// SPDX-License-Identifier: Apache-2.0
// Command line, backend choice, the run, and the summary.

#include "program.hpp"

#include "batch.hpp"
#include "coro_mode.hpp"
#include "output.hpp"
#include "resume.hpp"

#include <CLI/CLI.hpp>

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
    std::fprintf(stderr, "cuawait-images: --backend=cuda: %s\n", reason.c_str());
    return std::nullopt;
  }
  std::fprintf(stderr, "cuawait-images: no usable GPU (%s); running on the CPU backend\n",
               reason.c_str());
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
  std::fprintf(stderr, "cuawait-images: --decode=gpu: %s\n", why);
  return std::nullopt;
}

std::string fmt_ms(double us) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f ms", us / 1000.0);
  return buf;
}

void write_features(const batch& b, const run_plan& plan, std::size_t batch_size) {
  std::filesystem::create_directories(b.config().out_dir);
  write_file_atomic(b.config().out_dir / features_file_name,
                    merged_features(plan, batch_size, b.outcomes()));
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

void print_summary(const batch& b, const options& o, const run_plan& plan, bool cuda,
                   const std::string& device, double start_us, double end_us,
                   const untimed_setup& setup) {
  std::size_t ok = 0;
  std::size_t failed = 0;
  std::size_t not_started = 0;
  for (const job_outcome& out : b.outcomes()) {
    ok += out.done && out.error.empty() ? 1 : 0;
    failed += out.done && !out.error.empty() ? 1 : 0;
    not_started += out.done ? 0 : 1;
  }
  // The rate counts the images that came out: a failed one is usually a file refused from
  // its header, far faster than a processed one, and would inflate it.
  const double secs = (end_us - start_us) / 1e6;
  std::printf("cuawait-images: %s in %.3f s, %.1f images/s (successful ones): %zu ok, %zu failed",
              images(ok + failed).c_str(), secs, secs > 0 ? static_cast<double>(ok) / secs : 0.0,
              ok, failed);
  if (not_started > 0) {
    std::printf(", %zu not started (interrupted)", not_started);
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

} // namespace

std::atomic<bool>& stop_flag() noexcept { return g_stop; }

void install_stop_handlers() noexcept {
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
}

int run_program(int argc, const char* const* argv, gpu_backend* gpu) {
  CLI::App app{"cuawait-images: a concurrent batch image pipeline (blur, Sobel, histogram of "
               "oriented gradients, edge images)",
               "cuawait-images"};
  options o;
  define_options(app, o);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) { // --help
      return app.exit(e) == 0 ? exit_ok : exit_usage;
    }
    std::fprintf(stderr, "cuawait-images: %s\nRun with --help for more information.\n", e.what());
    return exit_usage;
  }
  const auto size = parse_size(o.size);
  if (!size) {
    std::fprintf(stderr, "cuawait-images: --size: expected N or WxH (1..16384), got '%s'\n",
                 o.size.c_str());
    return exit_usage;
  }
  if (!o.inputs.empty() && (app.count("--count") > 0 || app.count("--size") > 0)) {
    std::fprintf(stderr, "cuawait-images: --count and --size apply to the synthetic batch only\n");
    return exit_usage;
  }
  // The ceiling has no GPU stage: it runs on the CPU whatever the backend.
  const std::optional<bool> cuda =
      o.mode == "ceiling" ? std::optional<bool>(false) : choose_cuda(o.backend, gpu);
  if (!cuda) {
    return exit_usage;
  }
  const std::optional<bool> gpu_decode = choose_gpu_decode(o, *cuda ? gpu : nullptr);
  if (!gpu_decode) {
    return exit_usage;
  }
  batch_config cfg;
  cfg.threads = o.threads > 0 ? o.threads
                              : static_cast<int>(std::max(1U, std::thread::hardware_concurrency()));
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

  const std::vector<job> all =
      o.inputs.empty() ? synthetic_jobs(o.count)
                       : collect_jobs(o.inputs, {o.recursive, std::filesystem::path(o.output)});
  if (all.empty()) {
    std::fprintf(stderr, "cuawait-images: no images found in the inputs\n");
    return exit_usage;
  }
  run_plan plan;
  try {
    check_outputs(cfg.out_dir, all, cfg.format);
    plan = plan_run(all, cfg, o.skip_existing, o.limit);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuawait-images: %s\n", e.what());
    return exit_usage;
  }
  const std::vector<job>& jobs = plan.todo;

  trace_log log;
  progress_reporter progress(static_cast<int>(jobs.size()), style_of(o));
  batch b(cfg, jobs, log, progress, g_stop);
  const std::string device = *cuda ? gpu->device_name() : std::string();
  // Untimed: the synthetic inputs (they stand for files already on disk) and the CUDA
  // context. The same for every mode, so the modes compare fairly.
  untimed_setup setup;
  double before_run = 0;
  try {
    b.prepare_inputs();
    if (g_stop.load()) {
      // Stopped before any image started: nothing to write, and nothing is.
      std::fprintf(stderr, "cuawait-images: interrupted before the first image; nothing "
                           "written\n");
      return exit_interrupted;
    }
    if (*cuda && !jobs.empty()) {
      const double t = log.now_us();
      gpu->prepare();
      setup.context_us = log.now_us() - t;
    }
    before_run = log.now_us();
    if (!jobs.empty()) { // empty when every image was skipped
      run_mode(b, o, *cuda ? gpu : nullptr);
    }
  } catch (const std::exception& e) {
    progress.finish();
    std::fprintf(stderr, "cuawait-images: %s\n", e.what());
    return exit_usage;
  }
  const double end_us = log.now_us();
  progress.finish();
  // The timed region starts when the mode has finished its setup (see batch::start_clock).
  const double start_us = b.clock_start_us() >= 0 ? b.clock_start_us() : before_run;
  setup.mode_us = start_us - before_run;

  int status = exit_ok;
  try {
    if (cfg.write) {
      write_features(b, plan, all.size());
    }
    std::vector<std::string> names;
    for (const job& j : jobs) {
      names.push_back(j.name);
    }
    if (!o.trace.empty()) {
      write_file_atomic(o.trace, chrome_trace_json(log));
    }
    if (!o.timeline.empty()) {
      timeline_options t;
      t.title = "cuawait-images --mode=" + o.mode + " --backend=" + (*cuda ? "cuda" : "cpu") +
                ", " + std::to_string(cfg.threads) + " CPU threads" +
                (*cuda ? ", " + device : std::string());
      t.image_names = names;
      t.start_us = start_us;
      t.end_us = end_us;
      t.axis_ms = o.timeline_ms;
      write_file_atomic(o.timeline, timeline_svg(log, t));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuawait-images: %s\n", e.what());
    status = exit_some_failed;
  }
  print_summary(b, o, plan, *cuda, device, start_us, end_us, setup);
  std::fflush(stdout);
  for (const job_outcome& out : b.outcomes()) {
    if (out.done && !out.error.empty()) {
      status = exit_some_failed;
    }
  }
  return g_stop.load() ? exit_interrupted : status;
}

} // namespace cuawait::images
