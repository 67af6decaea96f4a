// SPDX-License-Identifier: Apache-2.0
// Folders as users have them: nested trees (--recursive), outputs mirroring the tree,
// outputs of earlier runs never taken as inputs, and resuming a batch (--skip-existing).

#include "codec.hpp"
#include "inputs.hpp"
#include "run_program.hpp"
#include "synthetic.hpp"
#include "temp_dir.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace ci = cuawait::images;
using namespace ci::test;

namespace {

std::string png_of(int index, int w = 12, int h = 9) {
  const auto png = ci::encode_png(ci::make_synthetic(5, index, w, h));
  return {png.begin(), png.end()};
}

std::string pgm_of(int index) {
  ci::image8 img = ci::make_synthetic(7, index, 7, 5);
  if (img.channels == 3) { // keep one channel: a PGM
    ci::image8 gray{img.width, img.height, 1, {}};
    for (std::size_t k = 0; k < img.pixels.size(); k += 3) {
      gray.pixels.push_back(img.pixels[k]);
    }
    img = gray;
  }
  const auto pnm = ci::encode_pnm(img);
  return {pnm.begin(), pnm.end()};
}

std::string read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<std::string> stems_of(const std::vector<ci::job>& jobs) {
  std::vector<std::string> out;
  for (const ci::job& j : jobs) {
    out.push_back(j.output_stem);
  }
  return out;
}

} // namespace

TEST(Folders, ScanSkipsHiddenFilesOutputsAndTheOutputDirectory) {
  temp_dir dir("scan");
  const auto in = dir.path() / "in";
  dir.write("in/top.png", png_of(0));
  dir.write("in/a/x.png", png_of(1));
  dir.write("in/b/x.png", png_of(2));
  dir.write("in/b/x.jpg", png_of(3)); // same stem in one folder
  dir.write("in/b/c/deep.pgm", pgm_of(4));
  dir.write("in/.hidden.png", png_of(5));
  dir.write("in/.git/y.png", png_of(6));
  dir.write("in/old.edges.png", png_of(7));   // an earlier run's output
  dir.write("in/a/old.EDGES.JPG", png_of(8)); // any case
  dir.write("in/out/z.png", png_of(9));       // inside the output directory
  dir.write("in/notes.txt", "not an image");
  const ci::scan_options flat{false, in / "out"};
  EXPECT_EQ(stems_of(ci::collect_jobs({in.string()}, flat)), (std::vector<std::string>{"top"}));
  const ci::scan_options deep{true, in / "out"};
  const std::vector<ci::job> jobs = ci::collect_jobs({in.string()}, deep);
  EXPECT_EQ(stems_of(jobs), (std::vector<std::string>{"a/x", "b/c/deep", "b/x", "b/x-2", "top"}));
  EXPECT_EQ(jobs[0].name, (in / "a/x.png").string());
  // Without an output directory to skip, its files are inputs like any others.
  EXPECT_EQ(ci::collect_jobs({in.string()}, {true, {}}).size(), 6U);
  // A file named on the command line is always taken, even an edge image or a hidden file.
  EXPECT_EQ(
      ci::collect_jobs({(in / ".hidden.png").string(), (in / "old.edges.png").string()}).size(),
      2U);
}

TEST(Folders, OutputsMirrorTheInputTreeWithoutCollisions) {
  temp_dir dir("mirror");
  dir.write("in/a/x.png", png_of(1));
  dir.write("in/b/x.png", png_of(2));
  dir.write("in/b/c/x.pgm", pgm_of(3));
  const auto in = dir.path() / "in";
  const auto out = in / "results"; // inside the input tree
  for (int k = 0; k < 2; ++k) {    // the second run must not take the first one's outputs
    const run_result r = run({"--backend=cpu", "-q", "-r", in.string(), "-o", out.string()});
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("3 images in"), std::string::npos) << r.out;
    EXPECT_TRUE(std::filesystem::exists(out / "a/x.edges.png"));
    EXPECT_TRUE(std::filesystem::exists(out / "b/x.edges.png"));
    EXPECT_TRUE(std::filesystem::exists(out / "b/c/x.edges.png"));
    EXPECT_FALSE(std::filesystem::exists(out / "results"));
    const std::vector<std::string> lines = lines_of(out / "features.jsonl");
    ASSERT_EQ(lines.size(), 3U);
    EXPECT_EQ(check_record(lines[0]), (in / "a/x.png").string());
  }
  // The edge images differ: each comes from its own input.
  EXPECT_NE(read_all(out / "a/x.edges.png"), read_all(out / "b/x.edges.png"));
}

TEST(Folders, AResumedBatchWritesTheSameFeaturesAsAnUninterruptedOne) {
  temp_dir dir("resume");
  const auto in = dir.path() / "in";
  for (int i = 0; i < 300; ++i) {
    const std::string folder = "f" + std::to_string(i % 3) + "/" + std::to_string(i % 7);
    dir.write("in/" + folder + "/img" + std::to_string(i) + (i % 2 == 0 ? ".pgm" : ".png"),
              i % 2 == 0 ? pgm_of(i) : png_of(i, 6 + i % 5, 5 + i % 3));
  }
  dir.write("in/f1/broken.png", png_of(0).substr(0, 30)); // fails in every run
  const auto full = dir.path() / "full";
  const auto part = dir.path() / "part";
  const std::vector<std::string> common = {"--backend=cpu", "-q", "-r",
                                           "--threads",     "2",  in.string()};
  auto with = [&](std::vector<std::string> extra, const std::filesystem::path& out) {
    extra.insert(extra.begin(), common.begin(), common.end());
    extra.insert(extra.end(), {"-o", out.string()});
    return run(extra);
  };

  const run_result whole = with({}, full);
  ASSERT_EQ(whole.code, ci::exit_some_failed) << whole.err;
  EXPECT_NE(whole.out.find("300 ok, 1 failed"), std::string::npos) << whole.out;
  const std::string expected = read_all(full / "features.jsonl");
  ASSERT_EQ(lines_of(full / "features.jsonl").size(), 300U);

  // Interrupted after 120 images (a --limit stands for Ctrl-C), in another mode.
  const run_result first = with({"--mode=threads", "--limit", "120"}, part);
  EXPECT_EQ(first.code, ci::exit_ok) << first.err;
  EXPECT_NE(first.out.find("120 ok, 0 failed, 181 left for a later run"), std::string::npos)
      << first.out;
  // A crash loses records and leaves a half-written line: the images without a record run
  // again, though their edge images exist; the half line is ignored.
  std::vector<std::string> kept = lines_of(part / "features.jsonl");
  ASSERT_EQ(kept.size(), 120U);
  kept.resize(100);
  std::ofstream(part / "features.jsonl", std::ios::trunc) << [&] {
    std::string text;
    for (const std::string& line : kept) {
      text += line + "\n";
    }
    return text + kept.back().substr(0, 40);
  }();
  // A lost edge image runs again too.
  const std::string lost = check_record(kept[10]);
  std::filesystem::remove(
      part / std::filesystem::path(lost).lexically_relative(in).replace_extension(".edges.png"));
  const run_result second = with({"--skip-existing", "--limit", "50"}, part);
  EXPECT_EQ(second.code, ci::exit_ok) << second.err;
  EXPECT_NE(second.out.find("50 ok, 0 failed, 99 skipped (outputs exist)"), std::string::npos)
      << second.out;

  const run_result last = with({"--skip-existing", "--mode=sync"}, part);
  EXPECT_EQ(last.code, ci::exit_some_failed) << last.err;
  EXPECT_NE(last.out.find("151 ok, 1 failed, 149 skipped (outputs exist)"), std::string::npos)
      << last.out;
  EXPECT_EQ(read_all(part / "features.jsonl"), expected);

  // Nothing left to do: the file is rewritten the same, and only the broken image runs.
  const run_result again = with({"--skip-existing"}, part);
  EXPECT_NE(again.out.find("0 ok, 1 failed, 300 skipped"), std::string::npos) << again.out;
  EXPECT_EQ(read_all(part / "features.jsonl"), expected);
}
