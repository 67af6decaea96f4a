// SPDX-License-Identifier: Apache-2.0
#pragma once

// Runs the program in-process with captured output, and reads its outputs back.

#include "program.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace cuawait::images::test {

struct run_result {
  int code = -1;
  std::string out;
  std::string err;
};

inline run_result run(std::vector<std::string> args) {
  args.insert(args.begin(), "cuawait-images");
  std::vector<const char*> argv;
  for (const std::string& a : args) {
    argv.push_back(a.c_str());
  }
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  run_result r;
  r.code = cuawait::images::run_program(static_cast<int>(argv.size()), argv.data(), nullptr);
  r.out = testing::internal::GetCapturedStdout();
  r.err = testing::internal::GetCapturedStderr();
  return r;
}

inline std::vector<std::string> lines_of(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    lines.push_back(line);
  }
  return lines;
}

// Checks the shape of a features record and returns its "file" value.
inline std::string check_record(const std::string& line) {
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

inline int count_files(const std::filesystem::path& dir, const std::string& suffix) {
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

inline int count_lines_containing(const std::string& text, const std::string& needle) {
  std::stringstream s(text);
  int n = 0;
  for (std::string line; std::getline(s, line);) {
    n += line.find(needle) != std::string::npos ? 1 : 0;
  }
  return n;
}

} // namespace cuawait::images::test
