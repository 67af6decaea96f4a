// SPDX-License-Identifier: Apache-2.0
#include "inputs.hpp"

#include "synthetic.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <stdexcept>
#include <system_error>

namespace cuawait::images {
namespace {

std::filesystem::path resolved(const std::filesystem::path& p) {
  std::error_code ec;
  auto r = std::filesystem::weakly_canonical(std::filesystem::absolute(p), ec);
  return ec ? std::filesystem::absolute(p).lexically_normal() : r;
}

} // namespace

bool has_image_extension(const std::filesystem::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".png" || ext == ".pgm" || ext == ".ppm" || ext == ".pnm";
}

std::vector<job> collect_jobs(const std::vector<std::string>& inputs) {
  std::vector<job> jobs;
  auto add = [&](const std::filesystem::path& p) {
    job j;
    j.index = static_cast<int>(jobs.size());
    j.name = p.string();
    j.source = p;
    jobs.push_back(std::move(j));
  };
  for (const std::string& in : inputs) {
    std::error_code ec;
    if (std::filesystem::is_directory(in, ec)) {
      std::vector<std::filesystem::path> files;
      for (const auto& e : std::filesystem::directory_iterator(in, ec)) {
        if (has_image_extension(e.path()) && !e.is_directory(ec)) {
          files.push_back(e.path());
        }
      }
      std::sort(files.begin(), files.end());
      std::for_each(files.begin(), files.end(), add);
    } else {
      add(in);
    }
  }
  std::map<std::string, int> seen;
  for (job& j : jobs) {
    const std::string stem = j.source.stem().string();
    const int n = ++seen[stem];
    j.output_stem = n == 1 ? stem : stem + "-" + std::to_string(n);
  }
  return jobs;
}

std::vector<job> synthetic_jobs(int count) {
  std::vector<job> jobs(static_cast<std::size_t>(std::max(0, count)));
  for (int i = 0; i < count; ++i) {
    jobs[static_cast<std::size_t>(i)] = {i, synthetic_name(i), {}, synthetic_name(i)};
  }
  return jobs;
}

std::filesystem::path edge_path(const std::filesystem::path& out_dir, const job& j) {
  return out_dir / (j.output_stem + edge_suffix);
}

void check_outputs(const std::filesystem::path& out_dir, const std::vector<job>& jobs) {
  std::error_code ec;
  if (std::filesystem::exists(out_dir, ec) && !std::filesystem::is_directory(out_dir, ec)) {
    throw std::runtime_error("output " + out_dir.string() + " exists and is not a directory");
  }
  std::map<std::filesystem::path, const job*> inputs;
  for (const job& j : jobs) {
    if (!j.source.empty()) {
      inputs.emplace(resolved(j.source), &j);
    }
  }
  auto refuse_if_input = [&](const std::filesystem::path& out) {
    if (const auto it = inputs.find(resolved(out)); it != inputs.end()) {
      throw std::runtime_error("refusing output directory " + out_dir.string() + ": " +
                               out.string() + " would overwrite the input " + it->second->name);
    }
  };
  refuse_if_input(out_dir / features_file_name);
  for (const job& j : jobs) {
    refuse_if_input(edge_path(out_dir, j));
  }
}

} // namespace cuawait::images
