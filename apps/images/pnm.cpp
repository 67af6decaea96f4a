// SPDX-License-Identifier: Apache-2.0
// PGM/PPM (netpbm) in plain (P2, P3) and binary (P5, P6) form.

#include "codec.hpp"

#include <string>

namespace cuawait::images {
namespace {

class pnm_reader {
public:
  explicit pnm_reader(std::span<const std::uint8_t> bytes) : m_bytes(bytes) {}

  // The next header or plain-format number, skipping whitespace and # comments.
  std::uint64_t number(const char* what) {
    skip_space();
    if (m_pos >= m_bytes.size()) {
      throw image_error(std::string("truncated PGM/PPM: missing ") + what);
    }
    if (m_bytes[m_pos] < '0' || m_bytes[m_pos] > '9') {
      throw image_error(std::string("corrupt PGM/PPM: bad ") + what);
    }
    std::uint64_t v = 0;
    while (m_pos < m_bytes.size() && m_bytes[m_pos] >= '0' && m_bytes[m_pos] <= '9') {
      v = v * 10 + (m_bytes[m_pos++] - '0');
      if (v > 0xffffffffULL) {
        throw image_error(std::string("corrupt PGM/PPM: ") + what + " out of range");
      }
    }
    return v;
  }

  // Binary data starts after exactly one whitespace byte following maxval.
  void end_header() {
    if (m_pos >= m_bytes.size()) {
      throw image_error("truncated PGM/PPM: no pixel data");
    }
    ++m_pos;
  }

  [[nodiscard]] std::span<const std::uint8_t> rest() const { return m_bytes.subspan(m_pos); }
  void advance(std::size_t n) { m_pos += n; }

private:
  void skip_space() {
    while (m_pos < m_bytes.size()) {
      const std::uint8_t c = m_bytes[m_pos];
      if (c == '#') {
        while (m_pos < m_bytes.size() && m_bytes[m_pos] != '\n') {
          ++m_pos;
        }
      } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f') {
        ++m_pos;
      } else {
        return;
      }
    }
  }

  std::span<const std::uint8_t> m_bytes;
  std::size_t m_pos = 2;
};

std::uint8_t scale(std::uint64_t v, std::uint64_t maxval) {
  if (v > maxval) {
    throw image_error("corrupt PGM/PPM: sample above maxval");
  }
  return static_cast<std::uint8_t>((v * 255 + maxval / 2) / maxval);
}

} // namespace

std::optional<std::pair<int, int>> peek_pnm_size(std::span<const std::uint8_t> bytes) {
  try {
    pnm_reader r(bytes);
    const std::uint64_t w = r.number("width");
    const std::uint64_t h = r.number("height");
    if (w > 0 && h > 0 && w <= 0x7fffffff && h <= 0x7fffffff) {
      return std::pair{static_cast<int>(w), static_cast<int>(h)};
    }
  } catch (const image_error&) {
    // Not a readable header: decoding will report why.
  }
  return std::nullopt;
}

image8 decode_pnm(std::span<const std::uint8_t> bytes, const decode_limits& limits) {
  if (bytes.size() < 2 || bytes[0] != 'P') {
    throw image_error("not an image: neither a PNG nor a PGM/PPM signature");
  }
  const char kind = static_cast<char>(bytes[1]);
  const bool plain = kind == '2' || kind == '3';
  image8 img;
  img.channels = (kind == '3' || kind == '6') ? 3 : 1;
  pnm_reader r(bytes);
  const std::uint64_t w = r.number("width");
  const std::uint64_t h = r.number("height");
  const std::uint64_t maxval = r.number("maxval");
  if (w == 0 || h == 0) {
    throw image_error("corrupt PGM/PPM: zero width or height");
  }
  if (w * h > limits.max_pixels) {
    throw image_error("image too large: " + std::to_string(w) + "x" + std::to_string(h) +
                      " pixels, the limit is " + std::to_string(limits.max_pixels) + " pixels");
  }
  if (maxval == 0 || maxval > 65535) {
    throw image_error("corrupt PGM/PPM: maxval must be 1..65535");
  }
  img.width = static_cast<int>(w);
  img.height = static_cast<int>(h);
  const std::size_t samples = static_cast<std::size_t>(w * h) * img.channels;
  if (plain) {
    img.pixels.resize(samples);
    for (std::size_t i = 0; i < samples; ++i) {
      img.pixels[i] = scale(r.number("sample"), maxval);
    }
    return img;
  }
  r.end_header();
  const std::size_t width_bytes = maxval > 255 ? 2 : 1;
  const std::span<const std::uint8_t> data = r.rest();
  if (data.size() < samples * width_bytes) {
    throw image_error("truncated PGM/PPM: " + std::to_string(data.size()) +
                      " bytes of pixel data, " + std::to_string(samples * width_bytes) +
                      " expected");
  }
  img.pixels.resize(samples);
  for (std::size_t i = 0; i < samples; ++i) {
    const std::uint64_t v =
        width_bytes == 2 ? (std::uint64_t{data[2 * i]} << 8) | data[2 * i + 1] : data[i];
    img.pixels[i] = scale(v, maxval);
  }
  return img;
}

std::vector<std::uint8_t> encode_pnm(const image8& img) {
  const std::string header = std::string(img.channels == 3 ? "P6\n" : "P5\n") +
                             std::to_string(img.width) + " " + std::to_string(img.height) +
                             "\n255\n";
  std::vector<std::uint8_t> out(header.begin(), header.end());
  out.insert(out.end(), img.pixels.begin(), img.pixels.end());
  return out;
}

} // namespace cuawait::images
