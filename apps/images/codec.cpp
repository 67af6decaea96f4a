// SPDX-License-Identifier: Apache-2.0
// Reading input files and recognising their format by signature (magic bytes), never by
// the file name.

#include "codec.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <system_error>

namespace cuawait::images {
namespace {

std::string describe_bytes(std::uint64_t n) { return std::to_string(n) + " bytes"; }

// Walks a JPEG's marker segments from the start of the file to its frame header (SOFn)
// and returns the size it declares. At most `max_segments` segments are skipped, each by
// its own length, so a file of junk costs a few reads.
std::optional<std::pair<int, int>> peek_jpeg_size(std::ifstream& in) {
  constexpr int max_segments = 256;
  auto byte = [&]() -> int { return in.get(); }; // EOF: -1
  auto be16 = [&]() -> int {
    const int hi = byte();
    const int lo = byte();
    return hi < 0 || lo < 0 ? -1 : (hi << 8) | lo;
  };
  in.clear();
  in.seekg(2); // after SOI
  for (int k = 0; k < max_segments; ++k) {
    int marker = byte();
    if (marker != 0xff) {
      return std::nullopt;
    }
    while (marker == 0xff) { // fill bytes
      marker = byte();
    }
    if (marker < 0 || marker == 0xd9 || marker == 0xda) { // EOF, EOI or SOS before a frame
      return std::nullopt;
    }
    if (marker == 0x01 || (marker >= 0xd0 && marker <= 0xd7)) { // no length
      continue;
    }
    const int length = be16();
    if (length < 2) {
      return std::nullopt;
    }
    const bool frame =
        marker >= 0xc0 && marker <= 0xcf && marker != 0xc4 && marker != 0xc8 && marker != 0xcc;
    if (frame) {
      (void)byte(); // precision
      const int h = be16();
      const int w = be16();
      if (w <= 0 || h <= 0) {
        return std::nullopt;
      }
      return std::pair{w, h};
    }
    in.seekg(length - 2, std::ios::cur);
  }
  return std::nullopt;
}

} // namespace

std::vector<std::uint8_t> read_file_bytes(const std::filesystem::path& path,
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

image8 decode_file(const std::filesystem::path& path, const decode_limits& limits) {
  const std::vector<std::uint8_t> bytes = read_file_bytes(path, limits);
  return decode_image(bytes, limits);
}

image_shape decode_file_into(const std::filesystem::path& path, const decode_limits& limits,
                             const pixel_sink& sink) {
  const std::vector<std::uint8_t> bytes = read_file_bytes(path, limits);
  return decode_image_into(bytes, limits, sink);
}

image_shape decode_image_into(std::span<const std::uint8_t> bytes, const decode_limits& limits,
                              const pixel_sink& sink) {
  if (bytes.size() >= 3 && bytes[0] == 0xff && bytes[1] == 0xd8) {
    return decode_jpeg_into(bytes, limits, sink);
  }
  const image8 img = decode_image(bytes, limits);
  const image_shape shape{img.width, img.height, img.channels};
  const std::span<std::uint8_t> out = sink(shape);
  if (out.size() < shape.bytes()) {
    throw std::invalid_argument("decode_image_into: the sink's buffer is too small");
  }
  std::memcpy(out.data(), img.pixels.data(), shape.bytes());
  return shape;
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
  if (n >= 3 && head[0] == 0xff && head[1] == 0xd8 && head[2] == 0xff) {
    return peek_jpeg_size(in);
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
  if (bytes[0] == 0xff && (bytes.size() < 2 || bytes[1] == 0xd8)) {
    if (bytes.size() < 3) {
      throw image_error("truncated JPEG: " + describe_bytes(bytes.size()));
    }
    return decode_jpeg(bytes, limits);
  }
  if (bytes.size() >= 2 && bytes[0] == 'P' &&
      (bytes[1] == '2' || bytes[1] == '3' || bytes[1] == '5' || bytes[1] == '6')) {
    return decode_pnm(bytes, limits);
  }
  throw image_error("not an image: no PNG, JPEG or PGM/PPM signature");
}

} // namespace cuawait::images
