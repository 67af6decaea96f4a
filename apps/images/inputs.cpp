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

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

bool is_hidden(const std::filesystem::path& p) {
  const std::string name = p.filename().string();
  return !name.empty() && name[0] == '.';
}

// The image files under `root` (relative paths, sorted), as `collect_jobs` describes.
std::vector<std::filesystem::path> scan(const std::filesystem::path& root,
                                        const scan_options& options) {
  namespace fs = std::filesystem;
  const fs::path out = options.out_dir.empty() ? fs::path() : resolved(options.out_dir);
  std::vector<fs::path> files;
  std::error_code ec;
  fs::recursive_directory_iterator it(root, fs::directory_options::skip_permission_denied, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const fs::directory_entry& e = *it;
    std::error_code type_ec;
    if (e.is_directory(type_ec)) {
      // Not followed: hidden directories, the output directory, symbolic links (loops),
      // and everything below the top when the scan is flat.
      if (!options.recursive || is_hidden(e.path()) || e.is_symlink(type_ec) ||
          (!out.empty() && resolved(e.path()) == out)) {
        it.disable_recursion_pending();
      }
      continue;
    }
    if (!is_hidden(e.path()) && has_image_extension(e.path()) && !is_edge_output(e.path())) {
      files.push_back(e.path().lexically_relative(root));
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

} // namespace

const char* edge_suffix(edge_format format) noexcept {
  return format == edge_format::jpeg ? ".edges.jpg" : ".edges.png";
}

bool has_image_extension(const std::filesystem::path& p) {
  const std::string ext = lower(p.extension().string());
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg" || ext == ".pgm" || ext == ".ppm" ||
         ext == ".pnm";
}

bool is_edge_output(const std::filesystem::path& p) {
  const std::string name = lower(p.filename().string());
  for (const char* suffix : {".edges.png", ".edges.jpg", ".edges.jpeg"}) {
    const std::string s(suffix);
    if (name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
      return true;
    }
  }
  return false;
}

std::vector<job> collect_jobs(const std::vector<std::string>& inputs, const scan_options& options) {
  std::vector<job> jobs;
  auto add = [&](const std::filesystem::path& p, const std::filesystem::path& stem) {
    job j;
    j.index = static_cast<int>(jobs.size());
    j.name = p.string();
    j.source = p;
    j.output_stem = stem.generic_string();
    jobs.push_back(std::move(j));
  };
  for (const std::string& in : inputs) {
    std::error_code ec;
    if (std::filesystem::is_directory(in, ec)) {
      const std::filesystem::path root(in);
      for (const std::filesystem::path& rel : scan(root, options)) {
        add(root / rel, rel.parent_path() / rel.stem());
      }
    } else {
      add(in, std::filesystem::path(in).stem());
    }
  }
  // Same stem (x.png and x.jpg, or the same name given twice): "-2", "-3"..., skipping
  // stems that are taken already, in batch order.
  std::set<std::string> used;
  for (job& j : jobs) {
    std::string stem = j.output_stem;
    for (int n = 2; !used.insert(stem).second; ++n) {
      stem = j.output_stem + "-" + std::to_string(n);
    }
    j.output_stem = stem;
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

std::filesystem::path edge_path(const std::filesystem::path& out_dir, const job& j,
                                edge_format format) {
  return out_dir / (j.output_stem + edge_suffix(format));
}

void check_outputs(const std::filesystem::path& out_dir, const std::vector<job>& jobs,
                   edge_format format) {
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
    refuse_if_input(edge_path(out_dir, j, format));
  }
}

} // namespace cuawait::images
