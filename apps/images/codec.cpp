// SPDX-License-Identifier: Apache-2.0
// Reading input files and recognising their format.

#include "codec.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <system_error>

namespace cuawait::images {
namespace {

std::string describe_bytes(std::uint64_t n) { return std::to_string(n) + " bytes"; }

std::vector<std::uint8_t> read_file(const std::filesystem::path& path,
                                    const decode_limits& limits) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec) {
    throw image_error("cannot read: " + ec.message());
  }
  if (std::filesystem::is_directory(status)) {
    throw image_error("is a directory");
  }
  if (!std::filesystem::is_regular_file(status)) {
    throw image_error("not a regular file");
  }
  const std::uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) {
    throw image_error("cannot read: " + ec.message());
  }
  if (size == 0) {
    throw image_error("empty file");
  }
  if (size > limits.max_file_bytes) {
    throw image_error("file too large: " + describe_bytes(size) + ", the limit is " +
                      describe_bytes(limits.max_file_bytes));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw image_error(std::string("cannot open: ") + std::strerror(errno));
  }
  std::vector<std::uint8_t> bytes(size);
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size));
  if (static_cast<std::uint64_t>(in.gcount()) != size) {
    throw image_error("read error: the file shrank while being read");
  }
  return bytes;
}

} // namespace

image8 decode_file(const std::filesystem::path& path, const decode_limits& limits) {
  const std::vector<std::uint8_t> bytes = read_file(path, limits);
  return decode_image(bytes, limits);
}

std::optional<std::pair<int, int>> peek_size(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::uint8_t head[512] = {};
  in.read(reinterpret_cast<char*>(head), sizeof head);
  const std::size_t n = static_cast<std::size_t>(in.gcount());
  auto be32 = [&](std::size_t o) {
    return (std::uint32_t{head[o]} << 24) | (std::uint32_t{head[o + 1]} << 16) |
           (std::uint32_t{head[o + 2]} << 8) | head[o + 3];
  };
  if (n >= 24 && head[0] == 0x89 && head[1] == 'P' && head[12] == 'I' && head[13] == 'H') {
    const std::uint32_t w = be32(16);
    const std::uint32_t h = be32(20);
    if (w > 0 && h > 0 && w <= 0x7fffffff && h <= 0x7fffffff) {
      return std::pair{static_cast<int>(w), static_cast<int>(h)};
    }
    return std::nullopt;
  }
  if (n >= 2 && head[0] == 'P') {
    return peek_pnm_size(std::span(head, n));
  }
  return std::nullopt;
}

image8 decode_image(std::span<const std::uint8_t> bytes, const decode_limits& limits) {
  static constexpr std::uint8_t png_signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (bytes.empty()) {
    throw image_error("empty file");
  }
  const std::size_t sig = bytes.size() < 8 ? bytes.size() : 8;
  if (std::memcmp(bytes.data(), png_signature, sig) == 0) {
    if (bytes.size() < 8) {
      throw image_error("truncated PNG: " + describe_bytes(bytes.size()));
    }
    return decode_png(bytes, limits);
  }
  if (bytes.size() >= 2 && bytes[0] == 'P' &&
      (bytes[1] == '2' || bytes[1] == '3' || bytes[1] == '5' || bytes[1] == '6')) {
    return decode_pnm(bytes, limits);
  }
  throw image_error("not an image: neither a PNG nor a PGM/PPM signature");
}

} // namespace cuawait::images
