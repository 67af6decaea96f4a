// SPDX-License-Identifier: Apache-2.0
#pragma once

// A fresh temporary directory per test, removed afterwards.

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>

namespace cuawait::images::test {

class temp_dir {
public:
  explicit temp_dir(const std::string& tag) {
    static std::atomic<int> counter{0};
    m_path = std::filesystem::temp_directory_path() /
             ("cuawait-images-" + tag + "-" + std::to_string(::getpid()) + "-" +
              std::to_string(counter++));
    std::filesystem::remove_all(m_path);
    std::filesystem::create_directories(m_path);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(m_path, ec);
  }

  [[nodiscard]] const std::filesystem::path& path() const { return m_path; }

  //! Writes `bytes` to `name` inside the directory and returns the path.
  std::filesystem::path write(const std::string& name, const std::string& bytes) const {
    const std::filesystem::path p = m_path / name;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }

private:
  std::filesystem::path m_path;
};

} // namespace cuawait::images::test
