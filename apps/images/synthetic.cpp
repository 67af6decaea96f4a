// SPDX-License-Identifier: Apache-2.0
// Synthetic test images. Each generator draws from a splitmix64 stream.

#include "synthetic.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <vector>

namespace cuawait::images {
namespace {

class rng {
public:
  explicit rng(std::uint64_t seed) : m_state(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (m_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1).
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  int below(int n) { return static_cast<int>(uniform() * n); }
  std::uint8_t byte() { return static_cast<std::uint8_t>(next() >> 56); }

private:
  std::uint64_t m_state;
};

std::uint8_t to_byte(double v) {
  return static_cast<std::uint8_t>(std::clamp(v, 0.0, 1.0) * 255.0 + 0.5);
}

void put(image8& img, int x, int y, const std::uint8_t* rgb) {
  if (x < 0 || y < 0 || x >= img.width || y >= img.height) {
    return;
  }
  std::uint8_t* p = img.pixels.data() + (static_cast<std::size_t>(y) * img.width + x) * 3;
  p[0] = rgb[0];
  p[1] = rgb[1];
  p[2] = rgb[2];
}

void gradient(image8& img, rng& r) {
  const double angle = r.uniform() * 6.283185307179586;
  const double ca = std::cos(angle);
  const double sa = std::sin(angle);
  const double cx = r.uniform();
  const double cy = r.uniform();
  for (int y = 0; y < img.height; ++y) {
    for (int x = 0; x < img.width; ++x) {
      const double u = static_cast<double>(x) / img.width;
      const double v = static_cast<double>(y) / img.height;
      const double lin = 0.5 + 0.5 * ((u - 0.5) * ca + (v - 0.5) * sa);
      const double rad = std::hypot(u - cx, v - cy);
      const std::uint8_t rgb[3] = {to_byte(lin), to_byte(1.0 - rad), to_byte(0.5 * (lin + rad))};
      put(img, x, y, rgb);
    }
  }
}

void shapes(image8& img, rng& r) {
  const std::uint8_t bg[3] = {r.byte(), r.byte(), r.byte()};
  for (int y = 0; y < img.height; ++y) {
    for (int x = 0; x < img.width; ++x) {
      put(img, x, y, bg);
    }
  }
  const int count = 6 + r.below(10);
  for (int s = 0; s < count; ++s) {
    const std::uint8_t col[3] = {r.byte(), r.byte(), r.byte()};
    const int x0 = r.below(img.width);
    const int y0 = r.below(img.height);
    const int size = 4 + r.below(std::max(1, std::min(img.width, img.height) / 3));
    const bool circle = r.below(2) == 0;
    for (int y = y0 - size; y <= y0 + size; ++y) {
      for (int x = x0 - size; x <= x0 + size; ++x) {
        const long dx = x - x0;
        const long dy = y - y0;
        if (!circle || dx * dx + dy * dy <= static_cast<long>(size) * size) {
          put(img, x, y, col);
        }
      }
    }
  }
}

void noise(image8& img, rng& r) {
  // Value noise: a coarse random lattice, bilinearly interpolated, plus fine grain.
  const int cells = 4 + r.below(12);
  std::vector<double> lattice(static_cast<std::size_t>((cells + 1) * (cells + 1)));
  for (double& v : lattice) {
    v = r.uniform();
  }
  for (int y = 0; y < img.height; ++y) {
    for (int x = 0; x < img.width; ++x) {
      const double fx = static_cast<double>(x) * cells / img.width;
      const double fy = static_cast<double>(y) * cells / img.height;
      const int ix = static_cast<int>(fx);
      const int iy = static_cast<int>(fy);
      const double tx = fx - ix;
      const double ty = fy - iy;
      auto at = [&](int i, int j) {
        return lattice[static_cast<std::size_t>(j * (cells + 1) + i)];
      };
      const double v = (at(ix, iy) * (1 - tx) + at(ix + 1, iy) * tx) * (1 - ty) +
                       (at(ix, iy + 1) * (1 - tx) + at(ix + 1, iy + 1) * tx) * ty;
      img.pixels[static_cast<std::size_t>(y) * img.width + x] =
          to_byte(0.85 * v + 0.15 * r.uniform());
    }
  }
}

void text(image8& img, rng& r) {
  // Rows of random 5x7 glyphs, dark on light, like a scanned page.
  std::fill(img.pixels.begin(), img.pixels.end(), std::uint8_t{235});
  const int scale = std::max(1, std::min(img.width, img.height) / 96);
  const int gw = 6 * scale;
  const int gh = 10 * scale;
  for (int row = 1; (row + 1) * gh < img.height; ++row) {
    for (int col = 1; (col + 1) * gw < img.width; ++col) {
      if (r.below(7) == 0) {
        continue; // a space between words
      }
      const std::uint64_t bits = r.next();
      for (int gy = 0; gy < 7 * scale; ++gy) {
        for (int gx = 0; gx < 5 * scale; ++gx) {
          if ((bits >> ((gy / scale) * 5 + gx / scale)) & 1U) {
            img.pixels[static_cast<std::size_t>(row * gh + gy) * img.width + col * gw + gx] = 20;
          }
        }
      }
    }
  }
}

void checker(image8& img, rng& r) {
  const int period = 8 + r.below(40);
  const std::uint8_t a = r.byte();
  const std::uint8_t b = static_cast<std::uint8_t>(255 - a);
  for (int y = 0; y < img.height; ++y) {
    for (int x = 0; x < img.width; ++x) {
      img.pixels[static_cast<std::size_t>(y) * img.width + x] =
          ((x / period + y / period) % 2) != 0 ? a : b;
    }
  }
}

} // namespace

synthetic_kind synthetic_kind_of(int index) noexcept {
  return static_cast<synthetic_kind>(index % synthetic_kind_count);
}

int synthetic_channels(int index) noexcept {
  const synthetic_kind kind = synthetic_kind_of(index);
  return kind == synthetic_kind::gradient || kind == synthetic_kind::shapes ? 3 : 1;
}

const char* to_string(synthetic_kind kind) noexcept {
  switch (kind) {
  case synthetic_kind::gradient:
    return "gradient";
  case synthetic_kind::shapes:
    return "shapes";
  case synthetic_kind::noise:
    return "noise";
  case synthetic_kind::text:
    return "text";
  case synthetic_kind::checker:
    return "checker";
  }
  return "unknown";
}

std::string synthetic_name(int index) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "synthetic-%04d-%s", index, to_string(synthetic_kind_of(index)));
  return buf;
}

image8 make_synthetic(std::uint64_t seed, int index, int width, int height) {
  if (width <= 0 || height <= 0) {
    throw std::invalid_argument("make_synthetic: width and height must be positive");
  }
  rng r(seed * 0x2545f4914f6cdd1dULL + static_cast<std::uint64_t>(index));
  const synthetic_kind kind = synthetic_kind_of(index);
  image8 img;
  img.width = width;
  img.height = height;
  img.channels = synthetic_channels(index);
  img.pixels.assign(img.pixel_count() * img.channels, 0);
  switch (kind) {
  case synthetic_kind::gradient:
    gradient(img, r);
    break;
  case synthetic_kind::shapes:
    shapes(img, r);
    break;
  case synthetic_kind::noise:
    noise(img, r);
    break;
  case synthetic_kind::text:
    text(img, r);
    break;
  case synthetic_kind::checker:
    checker(img, r);
    break;
  }
  return img;
}

} // namespace cuawait::images
