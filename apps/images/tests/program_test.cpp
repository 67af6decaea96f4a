// SPDX-License-Identifier: Apache-2.0
// The CPU backend end to end: run_program on small batches, in every mode, with bad inputs.

#include "batch.hpp"
#include "codec.hpp"
#include "coro_mode.hpp"
#include "jpeg_cut.hpp"
#include "program.hpp"
#include "run_program.hpp"
#include "synthetic.hpp"
#include "temp_dir.hpp"
#include "trace_check/trace_check.hpp"

#include <gtest/gtest.h>

#include <csignal>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace ci = cuawait::images;
using namespace ci::test;

TEST(Program, EveryModeWritesTheSameOutputsOnTheCpuBackend) {
  ci::test::temp_dir dir("modes");
  std::vector<std::string> reference;
  for (const char* mode : {"sync", "threads", "coro"}) {
    const auto out = dir.path() / mode;
    const run_result r = run({"--backend=cpu", std::string("--mode=") + mode, "--count", "7",
                              "--size", "48x32", "--threads", "2", "-o", out.string()});
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("7 images"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("mode " + std::string(mode)), std::string::npos) << r.out;
    EXPECT_EQ(count_files(out, ".edges.png"), 7);
    EXPECT_EQ(count_files(out, ".tmp"), 0); // hidden temporaries were all renamed
    const std::vector<std::string> lines = lines_of(out / "features.jsonl");
    ASSERT_EQ(lines.size(), 7U);
    for (std::size_t i = 0; i < lines.size(); ++i) {
      EXPECT_EQ(check_record(lines[i]), ci::synthetic_name(static_cast<int>(i)));
    }
    const ci::image8 edges = ci::decode_file(out / "synthetic-0001-shapes.edges.png", {});
    EXPECT_EQ(edges.width, 48);
    EXPECT_EQ(edges.height, 32);
    EXPECT_EQ(edges.channels, 1);
    if (reference.empty()) {
      reference = lines;
    } else {
      EXPECT_EQ(lines, reference) << mode;
    }
  }
}

TEST(Program, BadInputsAreReportedOnceEachAndTheRestIsProcessed) {
  ci::test::temp_dir dir("bad");
  const auto png = ci::encode_png(ci::make_synthetic(3, 1, 20, 20));
  const std::string good(png.begin(), png.end());
  dir.write("in/a_good.png", good);
  dir.write("in/b_empty.png", "");
  dir.write("in/c_truncated.png", good.substr(0, good.size() / 2));
  dir.write("in/d_text.pgm", "this is not an image");
  dir.write("in/e_huge.ppm", "P6 70000 70000 255\n");
  dir.write("in/f_good.pgm", "P2 3 2 9 0 1 2 3 4 9");
  dir.write("in/notes.txt", "skipped: not an image extension");
  const auto out = dir.path() / "out";
  const run_result r = run({"--backend=cpu", "--progress=none", (dir.path() / "in").string(),
                            (dir.path() / "missing.png").string(), "-o", out.string()});
  EXPECT_EQ(r.code, ci::exit_some_failed) << r.err;
  for (const char* name :
       {"b_empty.png", "c_truncated.png", "d_text.pgm", "e_huge.ppm", "missing.png"}) {
    EXPECT_EQ(count_lines_containing(r.err, name), 1) << name << "\n" << r.err;
  }
  EXPECT_NE(r.err.find("b_empty.png: empty file"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("e_huge.ppm: image too large"), std::string::npos) << r.err;
  EXPECT_EQ(count_lines_containing(r.err, "a_good"), 0);
  EXPECT_NE(r.out.find("2 ok, 5 failed"), std::string::npos) << r.out;
  EXPECT_TRUE(std::filesystem::exists(out / "a_good.edges.png"));
  EXPECT_TRUE(std::filesystem::exists(out / "f_good.edges.png"));
  EXPECT_EQ(count_files(out, ".edges.png"), 2);
  EXPECT_EQ(lines_of(out / "features.jsonl").size(), 2U);
}

TEST(Program, RefusesAnOutputDirectoryThatWouldOverwriteAnInput) {
  ci::test::temp_dir dir("overwrite");
  const auto png = ci::encode_png(ci::make_synthetic(3, 0, 16, 16));
  const auto x = dir.write("x.png", std::string(png.begin(), png.end()));
  const auto victim = dir.write("x.edges.png", std::string(png.begin(), png.end()));
  // x.edges.png named as an input: the edge image of x.png would overwrite it.
  const run_result r =
      run({"--backend=cpu", x.string(), victim.string(), "-o", dir.path().string()});
  EXPECT_EQ(r.code, ci::exit_usage);
  EXPECT_NE(r.err.find("would overwrite the input"), std::string::npos) << r.err;
  EXPECT_EQ(std::filesystem::file_size(victim), png.size()); // untouched
  // Same inputs, another directory: fine.
  const run_result ok = run(
      {"--backend=cpu", "-q", x.string(), victim.string(), "-o", (dir.path() / "out").string()});
  EXPECT_EQ(ok.code, 0) << ok.err;
}

TEST(Program, WritingIntoTheInputDirectoryCanBeRepeated) {
  // Regression: the second identical run took the first run's x.edges.png as an input and
  // refused to run because its output would overwrite it.
  ci::test::temp_dir dir("inplace");
  const auto png = ci::encode_png(ci::make_synthetic(3, 0, 16, 16));
  dir.write("x.png", std::string(png.begin(), png.end()));
  for (int k = 0; k < 2; ++k) {
    const run_result r =
        run({"--backend=cpu", "-q", dir.path().string(), "-o", dir.path().string()});
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("1 image in"), std::string::npos) << r.out; // not "1 images"
    EXPECT_EQ(lines_of(dir.path() / "features.jsonl").size(), 1U);
  }
  EXPECT_EQ(count_files(dir.path(), ".edges.png"), 1);
}

TEST(Program, CudaBackendWithoutGpuIsAClearError) {
  ci::test::temp_dir dir("nocuda");
  const run_result r = run({"--backend=cuda", "--count", "1", "-o", dir.path().string()});
  EXPECT_EQ(r.code, ci::exit_usage);
  EXPECT_NE(r.err.find("--backend=cuda: "), std::string::npos) << r.err;
  const run_result a =
      run({"--backend=auto", "-q", "--count", "1", "--size", "8", "-o", dir.path().string()});
  EXPECT_EQ(a.code, 0);
  EXPECT_EQ(count_lines_containing(a.err, "running on the CPU backend"), 1) << a.err;
}

TEST(Program, NoWriteLeavesNoOutputsAndTraceAndTimelineAreWritten) {
  ci::test::temp_dir dir("nowrite");
  const auto out = dir.path() / "out";
  const auto trace = dir.path() / "trace.json";
  const auto svg = dir.path() / "timeline.svg";
  const run_result r =
      run({"--backend=cpu", "--no-write", "-q", "--count", "3", "--size", "24", "-o", out.string(),
           "--trace", trace.string(), "--timeline", svg.string()});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(std::filesystem::exists(out));
  // The library's trace (docs/OBSERVABILITY.md): well formed, one slice per stage.
  const std::vector<std::string> t = lines_of(trace);
  ASSERT_FALSE(t.empty());
  EXPECT_EQ(t.front().rfind("{\"displayTimeUnit\":\"ns\",\"otherData\":{\"generator\":"
                            "\"cuawait trace_recorder\"",
                            0),
            0u)
      << t.front();
  std::string trace_text;
  int stages = 0;
  for (const std::string& line : t) {
    stages += line.find("\"ph\":\"X\"") != std::string::npos ? 1 : 0;
    trace_text += line + "\n";
  }
  EXPECT_EQ(stages, 3 * 3); // decode+preprocess, cpu stages, postprocess per image
  const auto checked = cuawait::tools::check_trace(trace_text);
  EXPECT_TRUE(checked.ok()) << (checked.problems.empty() ? "" : checked.problems.front());
  EXPECT_GE(checked.thread_tracks, 1u);
  const std::vector<std::string> s = lines_of(svg);
  ASSERT_FALSE(s.empty());
  EXPECT_EQ(s.front().rfind("<svg", 0), 0U);
  EXPECT_EQ(s.back(), "</svg>");
  const std::string svg_text = [&] {
    std::string all;
    for (const std::string& line : s) {
      all += line + "\n";
    }
    return all;
  }();
  EXPECT_NE(svg_text.find(">0 ms</text>"), std::string::npos);             // a time axis in ms
  EXPECT_NE(svg_text.find(">CPU thread 0</text>"), std::string::npos);     // labelled lanes
  EXPECT_NE(svg_text.find(">cpu stages (CPU)</text>"), std::string::npos); // a legend...
  EXPECT_EQ(svg_text.find(">H2D (GPU)</text>"), std::string::npos); // ...of stages that occur
}

TEST(Program, BadArgumentsExitWithUsageCode) {
  EXPECT_EQ(run({"--mode=fast"}).code, ci::exit_usage);
  EXPECT_EQ(run({"--size", "0"}).code, ci::exit_usage);
  EXPECT_EQ(run({"--size", "12y4"}).code, ci::exit_usage);
  EXPECT_EQ(run({"--max-in-flight", "0"}).code, ci::exit_usage);
  EXPECT_EQ(run({"--max-in-flight", "many"}).code, ci::exit_usage);
  EXPECT_EQ(run({"--help"}).code, ci::exit_ok);
  EXPECT_EQ(run({"some.png", "--count", "3"}).code, ci::exit_usage);
}

TEST(Program, SummarySaysWhatTheTimedRegionContains) {
  ci::test::temp_dir dir("timed");
  const run_result r = run({"--backend=cpu", "--no-write", "-q", "--threads", "2", "--count", "3",
                            "--size", "16", "-o", (dir.path() / "out").string()});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("timed: each image's decode+preprocess"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("untimed, before: 3 synthetic inputs generated into memory"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("up to 3 images in flight (memory budget 512 MiB, at most 8 images)"),
            std::string::npos)
      << r.out; // the default budget and bound let the whole small batch in
  const run_result capped =
      run({"--backend=cpu", "--no-write", "-q", "--threads", "2", "--count", "5", "--size", "16",
           "--max-in-flight", "2", "-o", (dir.path() / "out").string()});
  ASSERT_EQ(capped.code, 0) << capped.err;
  EXPECT_NE(capped.out.find("up to 2 images in flight (memory budget 512 MiB, at most 2 images)"),
            std::string::npos)
      << capped.out;
  // What the process spent, for telling modes apart where their stage timings agree.
  const auto at = r.out.find("this process over the run and mode setup (");
  ASSERT_NE(at, std::string::npos) << r.out;
  double wall = -1;
  double user = -1;
  double system = -1;
  long voluntary = -1;
  ASSERT_EQ(std::sscanf(r.out.c_str() + at,
                        "this process over the run and mode setup (%lf s): CPU %lf s user + %lf s "
                        "system (%*f cores on average); context switches %ld voluntary",
                        &wall, &user, &system, &voluntary),
            4)
      << r.out;
  EXPECT_GE(wall, 0.0);
  EXPECT_GE(user, 0.0);
  EXPECT_GE(system, 0.0);
  EXPECT_GE(voluntary, 0);
  // Files are read and decoded inside the timed region: nothing is prepared for them.
  const auto png = ci::encode_png(ci::make_synthetic(3, 0, 16, 16));
  dir.write("in/a.png", std::string(png.begin(), png.end()));
  const run_result f = run({"--backend=cpu", "--no-write", "-q", (dir.path() / "in").string(), "-o",
                            (dir.path() / "out").string()});
  ASSERT_EQ(f.code, 0) << f.err;
  EXPECT_EQ(f.out.find("synthetic inputs generated"), std::string::npos) << f.out;
  EXPECT_NE(f.out.find("inputs: files; reading and decoding them is timed"), std::string::npos)
      << f.out;
}

TEST(Program, CoroDefaultsScaleWithTheThreads) {
  const std::uint64_t gib = std::uint64_t{1} << 30;
  EXPECT_EQ(ci::default_memory_budget(2, 64 * gib), std::size_t{512} << 20);
  EXPECT_EQ(ci::default_memory_budget(16, 64 * gib), std::size_t{1536} << 20);
  EXPECT_EQ(ci::default_memory_budget(16, 0), std::size_t{1536} << 20); // unknown: no cap
  // Regression: -t 1000 announced a 96,000 MiB budget on a 24 GiB machine.
  EXPECT_EQ(ci::default_memory_budget(1000, 24 * gib), 12 * gib);
  EXPECT_EQ(ci::default_stream_count(2), 8U);
  EXPECT_EQ(ci::default_stream_count(16), 32U);
  EXPECT_EQ(ci::default_stream_count(128), 32U);
  // At 16 threads, about 4.5 one-megapixel images per thread fit on the GPU path.
  const std::size_t mp = std::size_t{1} << 20;
  EXPECT_GE(ci::default_memory_budget(16, 64 * gib) / ci::gpu_image_footprint(mp), 64U);
}

TEST(Program, JpegInputsAndJpegEdgeImages) {
  ci::test::temp_dir dir("jpeg");
  const ci::image8 colour = ci::make_synthetic(3, 1, 40, 24);
  const ci::image8 gray = ci::make_synthetic(3, 3, 40, 24);
  ASSERT_EQ(colour.channels, 3);
  ASSERT_EQ(gray.channels, 1);
  const auto jpeg = ci::encode_jpeg(colour, 90);
  const std::string good(jpeg.begin(), jpeg.end());
  const auto png = ci::encode_png(gray);
  dir.write("in/a_colour.jpg", good);
  const auto g = ci::encode_jpeg(gray, 90);
  dir.write("in/b_gray.jpeg", std::string(g.begin(), g.end()));
  dir.write("in/c_really_png.jpg", std::string(png.begin(), png.end()));
  dir.write("in/d_truncated.jpg", ci::test::cut_inside_scan(good));
  dir.write("in/e_corrupt.jpg", "\xff\xd8\xff\xe0 not a JPEG header at all");
  const auto out = dir.path() / "out";
  const run_result r = run({"--backend=cpu", "--progress=none", "--format", "jpeg", "--quality",
                            "80", (dir.path() / "in").string(), "-o", out.string()});
  EXPECT_EQ(r.code, ci::exit_some_failed) << r.err;
  EXPECT_NE(r.out.find("3 ok, 2 failed"), std::string::npos) << r.out;
  EXPECT_EQ(count_lines_containing(r.err, "d_truncated.jpg: corrupt JPEG: "), 1) << r.err;
  EXPECT_EQ(count_lines_containing(r.err, "e_corrupt.jpg: corrupt JPEG"), 1) << r.err;
  EXPECT_EQ(count_files(out, ".edges.jpg"), 3);
  EXPECT_EQ(count_files(out, ".edges.png"), 0);
  const ci::image8 edges = ci::decode_file(out / "a_colour.edges.jpg", {});
  EXPECT_EQ(edges.width, 40);
  EXPECT_EQ(edges.height, 24);
  EXPECT_EQ(edges.channels, 1);
  EXPECT_EQ(lines_of(out / "features.jsonl").size(), 3U);
}

TEST(Program, CeilingModeDecodesAndWritesOnly) {
  ci::test::temp_dir dir("ceiling");
  const auto jpeg = ci::encode_jpeg(ci::make_synthetic(3, 1, 40, 24), 90);
  dir.write("in/a.jpg", std::string(jpeg.begin(), jpeg.end()));
  dir.write("in/b.jpg", "\xff\xd8\xff\xe0 not a JPEG header at all");
  const auto out = dir.path() / "out";
  const run_result r = run({"--mode=ceiling", "--progress=none", "-t", "2",
                            (dir.path() / "in").string(), "-o", out.string()});
  EXPECT_EQ(r.code, ci::exit_some_failed) << r.err;
  EXPECT_EQ(count_lines_containing(r.err, "b.jpg: corrupt JPEG"), 1) << r.err;
  EXPECT_NE(r.out.find("1 ok, 1 failed"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("mode ceiling, backend cpu"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("outputs are not edge images"), std::string::npos) << r.out;
  EXPECT_EQ(count_files(out, ".edges.png"), 1);
}

TEST(Program, GpuDecodeNeedsTheCoroModeOnTheGpu) {
  // Without a GPU backend, --decode=gpu is a usage error that says why; cpu and auto run.
  const run_result gpu =
      run({"--backend=cpu", "--decode=gpu", "-q", "--count", "1", "--size", "16", "--no-write"});
  EXPECT_EQ(gpu.code, ci::exit_usage);
  EXPECT_NE(gpu.err.find("--decode=gpu: the run is on the CPU backend"), std::string::npos)
      << gpu.err;
  for (const char* decode : {"--decode=cpu", "--decode=auto"}) {
    const run_result r =
        run({"--backend=cpu", decode, "-q", "--count", "1", "--size", "16", "--no-write"});
    EXPECT_EQ(r.code, ci::exit_ok) << decode << r.err;
  }
  EXPECT_EQ(run({"--decode=fast", "-q", "--count", "1", "--no-write"}).code, ci::exit_usage);
}

TEST(Program, UsageErrorsNameTheProgram) {
  // Regression: CLI11's own message, "At Most 1 required but received 2", had no prefix.
  const run_result r = run({"-o", "a", "-o", "b"});
  EXPECT_EQ(r.code, ci::exit_usage);
  EXPECT_EQ(r.err.rfind("cuawait-images: ", 0), 0U) << r.err;
  EXPECT_NE(r.err.find("--help"), std::string::npos) << r.err;
  const run_result q = run({"--quality", "0"});
  EXPECT_EQ(q.code, ci::exit_usage);
  EXPECT_EQ(q.err.rfind("cuawait-images: ", 0), 0U) << q.err;
}

TEST(Program, MaxPixelsZeroMeansNoLimit) {
  ci::test::temp_dir dir("maxpixels");
  const auto png = ci::encode_png(ci::make_synthetic(3, 0, 20, 20));
  const auto file = dir.write("a.png", std::string(png.begin(), png.end()));
  const auto out = (dir.path() / "out").string();
  const run_result none =
      run({"--backend=cpu", "-q", "--max-pixels", "0", file.string(), "-o", out});
  EXPECT_EQ(none.code, ci::exit_ok) << none.err;
  const run_result small =
      run({"--backend=cpu", "-q", "--max-pixels", "399", file.string(), "-o", out});
  EXPECT_EQ(small.code, ci::exit_some_failed);
  EXPECT_NE(small.err.find("image too large"), std::string::npos) << small.err;
  // images/s counts the successful images only: none here.
  EXPECT_NE(small.out.find("1 image in"), std::string::npos) << small.out;
  EXPECT_NE(small.out.find(" 0.0 images/s"), std::string::npos) << small.out;
}

TEST(Program, SigintDuringSyntheticGenerationStopsWithNoOutput) {
  // Regression: Ctrl-C was ignored for ~20 s while a large synthetic batch was generated.
  ci::test::temp_dir dir("sigint");
  const auto out = dir.path() / "out";
  ci::install_stop_handlers();
  ASSERT_EQ(std::raise(SIGINT), 0);
  ASSERT_TRUE(ci::stop_flag().load());
  // 4000 images of 512 x 512: gigabytes and many seconds to generate, were it not stopped.
  const run_result r = run({"--backend=cpu", "-q", "--count", "4000", "--size", "512", "-o",
                            out.string(), "--timeline", (dir.path() / "t.svg").string()});
  ci::stop_flag().store(false);
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  EXPECT_EQ(r.code, ci::exit_interrupted) << r.err;
  EXPECT_NE(r.err.find("interrupted before the first image; nothing written"), std::string::npos)
      << r.err;
  EXPECT_FALSE(std::filesystem::exists(out));
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "t.svg"));
}

TEST(Program, StopRequestEndsSyntheticGenerationAtOnce) {
  const std::vector<ci::job> jobs = ci::synthetic_jobs(64);
  ci::batch_config cfg;
  cfg.threads = 2;
  cfg.width = cfg.height = 64;
  ci::trace_log log;
  ci::progress_reporter progress(64, ci::progress_style::quiet);
  std::atomic<bool> stop{true};
  ci::batch stopped(cfg, jobs, log, progress, stop);
  stopped.prepare_inputs();
  EXPECT_EQ(stopped.generated_count(), 0U);
  EXPECT_FALSE(stopped.inputs_prepared());
  stop = false;
  ci::batch running(cfg, jobs, log, progress, stop);
  running.prepare_inputs();
  EXPECT_EQ(running.generated_count(), 64U);
  EXPECT_TRUE(running.inputs_prepared());
}
