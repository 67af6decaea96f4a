// SPDX-License-Identifier: Apache-2.0
#include "output.hpp"

#include "codec.hpp"
#include "json.hpp"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <stdexcept>
#include <unistd.h>

namespace cuawait::images {
namespace {

std::atomic<unsigned> g_temp_counter{0};

[[noreturn]] void fail(const std::filesystem::path& target, const char* what, int err) {
  throw std::runtime_error("cannot write " + target.string() + ": " + what + ": " +
                           std::strerror(err));
}

// write(2) until everything is written or an error occurs; returns 0 or errno.
int write_all(int fd, const std::uint8_t* p, std::size_t n) {
  while (n > 0) {
    const ssize_t k = ::write(fd, p, n);
    if (k < 0) {
      if (errno == EINTR) {
        continue;
      }
      return errno;
    }
    p += k;
    n -= static_cast<std::size_t>(k);
  }
  return 0;
}

} // namespace

void write_file_atomic(const std::filesystem::path& target, std::span<const std::uint8_t> bytes) {
  const std::filesystem::path temp =
      target.parent_path() /
      ("." + target.filename().string() + ".tmp-" + std::to_string(::getpid()) + "-" +
       std::to_string(g_temp_counter.fetch_add(1)));
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    fail(target, "create", errno);
  }
  int err = write_all(fd, bytes.data(), bytes.size());
  if (::close(fd) != 0 && err == 0) {
    err = errno;
  }
  if (err != 0) {
    ::unlink(temp.c_str());
    fail(target, "write", err);
  }
  if (::rename(temp.c_str(), target.c_str()) != 0) {
    err = errno;
    ::unlink(temp.c_str());
    fail(target, "rename", err);
  }
}

void write_file_atomic(const std::filesystem::path& target, std::string_view text) {
  write_file_atomic(target,
                    std::span(reinterpret_cast<const std::uint8_t*>(text.data()), text.size()));
}

std::string feature_record(std::string_view name, const result_view& result) {
  std::string out = "{\"file\":";
  append_json_string(out, name);
  out += ",\"width\":" + std::to_string(result.width) +
         ",\"height\":" + std::to_string(result.height) +
         ",\"cells\":" + std::to_string(hog_cells) + ",\"bins\":" + std::to_string(hog_bins) +
         ",\"hog\":[";
  for (std::size_t i = 0; i < result.features.size(); ++i) {
    if (i != 0) {
      out += ',';
    }
    append_json_number(out, result.features[i]);
  }
  out += "]}";
  return out;
}

std::vector<std::uint8_t> edge_png(const result_view& result, const std::atomic<bool>* stop) {
  return encode_png(result.edges, result.width, result.height, 1, 1, stop);
}

std::vector<std::uint8_t> edge_jpeg(const result_view& result, int quality) {
  return encode_jpeg(result.edges, result.width, result.height, 1, quality);
}

} // namespace cuawait::images
