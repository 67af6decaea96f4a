// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Image types of the pipeline: decoded 8-bit images, normalised grayscale float images,
//! and the error a bad input file raises.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace cuawait::images {

//! A decoded image: 8 bits per channel, 1 (gray) or 3 (RGB) channels, rows packed.
struct image8 {
  int width = 0;
  int height = 0;
  int channels = 1;
  std::vector<std::uint8_t> pixels; //!< width * height * channels bytes, row-major

  //! Number of pixels.
  [[nodiscard]] std::size_t pixel_count() const noexcept {
    return static_cast<std::size_t>(width) * static_cast<std::size_t>(height);
  }
};

//! The size and layout of a decoded image: `channels` (1 gray or 3 RGB) bytes a pixel, rows
//! packed.
struct image_shape {
  int width = 0;
  int height = 0;
  int channels = 1;

  //! Number of pixels.
  [[nodiscard]] std::size_t pixel_count() const noexcept {
    return static_cast<std::size_t>(width) * static_cast<std::size_t>(height);
  }
  //! Number of bytes of the pixels.
  [[nodiscard]] std::size_t bytes() const noexcept {
    return pixel_count() * static_cast<std::size_t>(channels);
  }
};

//! Where a decoder puts an image: called once, with the decoded image's shape, before any
//! pixel is written; returns at least `shape.bytes()` bytes (pinned host memory, say), which
//! the decoder fills. May throw (std::bad_alloc): the decode then fails with that error.
using pixel_sink = std::function<std::span<std::uint8_t>(const image_shape&)>;

//! A grayscale image of floats in [0, 1], row-major, the pipeline's working format.
struct gray_image {
  int width = 0;
  int height = 0;
  std::vector<float> pixels; //!< width * height values

  //! Number of pixels.
  [[nodiscard]] std::size_t pixel_count() const noexcept {
    return static_cast<std::size_t>(width) * static_cast<std::size_t>(height);
  }
};

//! A file that cannot be used as an input image. `what()` is the reason alone ("empty
//! file", "truncated PNG data"...); the caller names the file.
class image_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

//! Limits that protect the program against hostile or accidental huge inputs.
struct decode_limits {
  //! Largest accepted file, in bytes.
  std::uint64_t max_file_bytes = std::uint64_t{1} << 30;
  //! Largest accepted image, in pixels (width * height), checked from the header before
  //! any pixel memory is allocated.
  std::uint64_t max_pixels = std::uint64_t{1} << 28;
};

} // namespace cuawait::images
