// SPDX-License-Identifier: Apache-2.0
// The CPU backend end to end: run_program on small batches, in every mode, with bad inputs.

#include "codec.hpp"
#include "coro_mode.hpp"
#include "program.hpp"
#include "synthetic.hpp"
#include "temp_dir.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace ci = cuawait::images;

namespace {

struct run_result {
  int code = -1;
  std::string out;
  std::string err;
};

run_result run(std::vector<std::string> args) {
  args.insert(args.begin(), "cuawait-images");
  std::vector<const char*> argv;
  for (const std::string& a : args) {
    argv.push_back(a.c_str());
  }
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  run_result r;
  r.code = ci::run_program(static_cast<int>(argv.size()), argv.data(), nullptr);
  r.out = testing::internal::GetCapturedStdout();
  r.err = testing::internal::GetCapturedStderr();
  return r;
}

std::vector<std::string> lines_of(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    lines.push_back(line);
  }
  return lines;
}

// Checks the shape of a features record and returns its "file" value.
std::string check_record(const std::string& line) {
  EXPECT_EQ(line.rfind("{\"file\":\"", 0), 0U) << line;
  EXPECT_EQ(line.back(), '}');
  const std::size_t open = line.find("\"hog\":[");
  EXPECT_NE(open, std::string::npos);
  const std::size_t close = line.find(']', open);
  std::stringstream numbers(line.substr(open + 7, close - open - 7));
  int count = 0;
  for (std::string item; std::getline(numbers, item, ',');) {
    std::size_t used = 0;
    const double v = std::stod(item, &used);
    EXPECT_EQ(used, item.size()) << item;
    EXPECT_GE(v, 0.0);
    ++count;
  }
  EXPECT_EQ(count, 144);
  const std::size_t end = line.find('"', 9);
  return line.substr(9, end - 9);
}

int count_files(const std::filesystem::path& dir, const std::string& suffix) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    n += name.size() >= suffix.size() &&
                 name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0
             ? 1
             : 0;
  }
  return n;
}

int count_lines_containing(const std::string& text, const std::string& needle) {
  std::stringstream s(text);
  int n = 0;
  for (std::string line; std::getline(s, line);) {
    n += line.find(needle) != std::string::npos ? 1 : 0;
  }
  return n;
}

} // namespace

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
  dir.write("x.png", std::string(png.begin(), png.end()));
  const auto victim = dir.write("x.edges.png", std::string(png.begin(), png.end()));
  const run_result r = run({"--backend=cpu", dir.path().string(), "-o", dir.path().string()});
  EXPECT_EQ(r.code, ci::exit_usage);
  EXPECT_NE(r.err.find("would overwrite the input"), std::string::npos) << r.err;
  EXPECT_EQ(std::filesystem::file_size(victim), png.size()); // untouched
  // Same input, another directory: fine.
  const run_result ok =
      run({"--backend=cpu", "-q", dir.path().string(), "-o", (dir.path() / "out").string()});
  EXPECT_EQ(ok.code, 0) << ok.err;
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
  const std::vector<std::string> t = lines_of(trace);
  ASSERT_FALSE(t.empty());
  EXPECT_EQ(t.front(), "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[");
  int stages = 0;
  for (const std::string& line : t) {
    stages += line.find("\"ph\":\"X\"") != std::string::npos ? 1 : 0;
  }
  EXPECT_EQ(stages, 3 * 3); // decode+preprocess, cpu stages, postprocess per image
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
  EXPECT_NE(r.out.find("up to 3 images in flight (memory budget 512 MiB)"), std::string::npos)
      << r.out; // the default budget lets the whole small batch in
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
  EXPECT_EQ(ci::default_memory_budget(2), std::size_t{512} << 20);
  EXPECT_EQ(ci::default_memory_budget(16), std::size_t{1536} << 20);
  EXPECT_EQ(ci::default_stream_count(2), 8U);
  EXPECT_EQ(ci::default_stream_count(16), 32U);
  EXPECT_EQ(ci::default_stream_count(128), 32U);
  // At 16 threads, about 4.5 one-megapixel images per thread fit on the GPU path.
  const std::size_t mp = std::size_t{1} << 20;
  EXPECT_GE(ci::default_memory_budget(16) / ci::gpu_image_footprint(mp), 64U);
}
