// SPDX-License-Identifier: Apache-2.0
#pragma once

// What every decoder fuzz target shares: the limits it decodes with, and the checks that
// a decoded image is consistent. A broken check traps, which libFuzzer reports as a crash.

#include "codec.hpp"

#include <cstddef>
#include <cstdint>
#include <span>

namespace cuawait::images::fuzz {

//! The limits of every target. With at most 2^20 pixels, the largest allocation a decoder
//! needs is about 8 MiB (libpng's row buffers for a 2^20-wide 16-bit RGBA image; a decoded
//! RGB image is 3 MiB): scripts/fuzz runs with -malloc_limit_mb=16, so that an allocation
//! the image size does not justify is reported.
inline constexpr decode_limits limits{std::uint64_t{1} << 20, std::uint64_t{1} << 20};

//! Traps unless `img` is a well-formed image within the limits.
inline void check_image(const image8& img) {
  const bool ok = img.width > 0 && img.height > 0 && (img.channels == 1 || img.channels == 3) &&
                  img.pixel_count() <= limits.max_pixels &&
                  img.pixels.size() == img.pixel_count() * static_cast<std::size_t>(img.channels);
  if (!ok) {
    __builtin_trap();
  }
}

inline std::span<const std::uint8_t> bytes_of(const std::uint8_t* data, std::size_t size) {
  return {data, size};
}

} // namespace cuawait::images::fuzz
