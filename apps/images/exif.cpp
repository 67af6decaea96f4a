// SPDX-License-Identifier: Apache-2.0
// EXIF orientation. The parser reads only IFD0 and checks every offset and count against
// the payload before it reads; the transform maps each output pixel to its source pixel.

#include "exif.hpp"

#include "pixel_math.hpp"

#include <cstddef>
#include <cstring>

namespace cuawait::images {
namespace {

// A TIFF byte order over the payload; reads outside it return nullopt-like false.
struct tiff_reader {
  std::span<const std::uint8_t> data; // the TIFF block (starts at the byte order mark)
  bool big_endian = false;

  bool u16(std::size_t at, std::uint32_t& v) const noexcept {
    if (at > data.size() || data.size() - at < 2) {
      return false;
    }
    v = big_endian ? (std::uint32_t{data[at]} << 8) | data[at + 1]
                   : (std::uint32_t{data[at + 1]} << 8) | data[at];
    return true;
  }

  bool u32(std::size_t at, std::uint32_t& v) const noexcept {
    std::uint32_t hi = 0;
    std::uint32_t lo = 0;
    if (!u16(at, big_endian ? hi : lo) || !u16(at + 2, big_endian ? lo : hi)) {
      return false;
    }
    v = (hi << 16) | lo;
    return true;
  }
};

constexpr std::uint32_t orientation_tag = 0x0112;
constexpr std::uint32_t type_short = 3;

} // namespace

int exif_orientation(std::span<const std::uint8_t> app1_payload) noexcept {
  static constexpr std::uint8_t exif_header[6] = {'E', 'x', 'i', 'f', 0, 0};
  if (app1_payload.size() < sizeof exif_header + 8 ||
      std::memcmp(app1_payload.data(), exif_header, sizeof exif_header) != 0) {
    return 1;
  }
  tiff_reader r{app1_payload.subspan(sizeof exif_header)};
  if (r.data[0] == 'M' && r.data[1] == 'M') {
    r.big_endian = true;
  } else if (r.data[0] != 'I' || r.data[1] != 'I') {
    return 1;
  }
  std::uint32_t magic = 0;
  std::uint32_t ifd0 = 0;
  std::uint32_t entries = 0;
  if (!r.u16(2, magic) || magic != 42 || !r.u32(4, ifd0) || !r.u16(ifd0, entries)) {
    return 1;
  }
  // Each entry is 12 bytes: tag, type, count (u32), value or offset (u32). An entry count
  // larger than the payload holds is cut short by the bounds checks of the reads.
  for (std::uint32_t k = 0; k < entries; ++k) {
    const std::size_t at = std::size_t{ifd0} + 2 + std::size_t{k} * 12;
    std::uint32_t tag = 0;
    std::uint32_t type = 0;
    std::uint32_t count = 0;
    std::uint32_t value = 0;
    if (!r.u16(at, tag) || !r.u16(at + 2, type) || !r.u32(at + 4, count) || !r.u16(at + 8, value)) {
      return 1;
    }
    if (tag == orientation_tag) {
      return type == type_short && count == 1 && value >= 1 && value <= 8 ? static_cast<int>(value)
                                                                          : 1;
    }
  }
  return 1;
}

int jpeg_orientation(std::span<const std::uint8_t> jpeg) noexcept {
  if (jpeg.size() < 4 || jpeg[0] != 0xff || jpeg[1] != 0xd8) {
    return 1;
  }
  // Segments from after SOI up to the first scan, each skipped by its own length: a file
  // of junk costs a few steps, and nothing is read past the end.
  std::size_t at = 2;
  while (at + 4 <= jpeg.size()) {
    if (jpeg[at] != 0xff) {
      return 1;
    }
    const std::uint8_t marker = jpeg[at + 1];
    if (marker == 0xff) { // a fill byte
      ++at;
      continue;
    }
    if (marker == 0xda || marker == 0xd9) { // SOS or EOI: no Exif block before the data
      return 1;
    }
    if (marker == 0x01 || (marker >= 0xd0 && marker <= 0xd7)) { // no length
      at += 2;
      continue;
    }
    const std::size_t length = (std::size_t{jpeg[at + 2]} << 8) | jpeg[at + 3];
    if (length < 2 || jpeg.size() - (at + 2) < length) {
      return 1;
    }
    const std::span<const std::uint8_t> payload = jpeg.subspan(at + 4, length - 2);
    if (marker == 0xe1 && payload.size() >= 6 && std::memcmp(payload.data(), "Exif\0\0", 6) == 0) {
      return exif_orientation(payload); // the first Exif block, as the CPU decoder reads it
    }
    at += 2 + length;
  }
  return 1;
}

image8 apply_orientation(image8 img, int orientation) {
  if (orientation < 2 || orientation > 8) {
    return img;
  }
  const std::size_t w = static_cast<std::size_t>(img.width);
  const std::size_t c = static_cast<std::size_t>(img.channels);
  const bool swap = orientation >= 5;
  image8 out{swap ? img.height : img.width, swap ? img.width : img.height, img.channels,
             std::vector<std::uint8_t>(img.pixels.size())};
  const std::size_t ow = static_cast<std::size_t>(out.width);
  const std::size_t oh = static_cast<std::size_t>(out.height);
  for (std::size_t oy = 0; oy < oh; ++oy) {
    for (std::size_t ox = 0; ox < ow; ++ox) {
      int sx = 0;
      int sy = 0;
      oriented_source(static_cast<int>(ox), static_cast<int>(oy), img.width, img.height,
                      orientation, sx, sy);
      const std::size_t src = static_cast<std::size_t>(sy) * w + static_cast<std::size_t>(sx);
      std::memcpy(&out.pixels[(oy * ow + ox) * c], &img.pixels[src * c], c);
    }
  }
  return out;
}

} // namespace cuawait::images
