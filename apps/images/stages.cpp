// SPDX-License-Identifier: Apache-2.0
// The CPU reference stages. Built with -ffp-contract=off (see apps/CMakeLists.txt).

#include "stages.hpp"

#include <stdexcept>

namespace cuawait::images {

namespace {

// The conversion loops, written so that the compiler vectorises them (apps/CMakeLists.txt
// compiles this file with -O3), with an AVX2 clone picked at load time where the CPU has
// it. Vector lanes do exactly the scalar float operations (convert, multiply, add, divide;
// no contraction, no reassociation), so the results are the same bits on every path.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define CUAWAIT_IMAGES_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define CUAWAIT_IMAGES_CLONES
#endif

CUAWAIT_IMAGES_CLONES void gray_from_gray(const std::uint8_t* __restrict p, float* __restrict out,
                                          std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    out[i] = gray_of_byte(p[i]);
  }
}

CUAWAIT_IMAGES_CLONES void gray_from_rgb(const std::uint8_t* __restrict p, float* __restrict out,
                                         std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    out[i] = gray_of_rgb(p[3 * i], p[3 * i + 1], p[3 * i + 2]);
  }
}

} // namespace

void to_gray(const image_shape& shape, std::span<const std::uint8_t> pixels, std::span<float> out) {
  const std::size_t n = shape.pixel_count();
  if (out.size() < n || pixels.size() < shape.bytes()) {
    throw std::invalid_argument("to_gray: buffer too small");
  }
  if (shape.channels == 1) {
    gray_from_gray(pixels.data(), out.data(), n);
  } else if (shape.channels == 3) {
    gray_from_rgb(pixels.data(), out.data(), n);
  } else {
    throw std::invalid_argument("to_gray: 1 or 3 channels expected");
  }
}

void to_gray(const image8& img, std::span<float> out) {
  to_gray({img.width, img.height, img.channels}, img.pixels, out);
}

gray_image to_gray(const image8& img) {
  gray_image g{img.width, img.height, std::vector<float>(img.pixel_count())};
  to_gray(img, g.pixels);
  return g;
}

void blur(const float* in, float* tmp, float* out, int w, int h) {
  for (int y = 0; y < h; ++y) {
    const float* row = in + static_cast<std::size_t>(y) * w;
    float* t = tmp + static_cast<std::size_t>(y) * w;
    for (int x = 0; x < w; ++x) {
      t[x] = blur_tap(row, x, w, 1);
    }
  }
  for (int y = 0; y < h; ++y) {
    float* o = out + static_cast<std::size_t>(y) * w;
    for (int x = 0; x < w; ++x) {
      o[x] = blur_tap(tmp + x, y, h, w);
    }
  }
}

gray_image blur(const gray_image& in) {
  gray_image out{in.width, in.height, std::vector<float>(in.pixel_count())};
  std::vector<float> tmp(in.pixel_count());
  blur(in.pixels.data(), tmp.data(), out.pixels.data(), in.width, in.height);
  return out;
}

gradient_field gradients(const gray_image& img) {
  gradient_field g;
  const std::size_t n = img.pixel_count();
  g.gx.resize(n);
  g.gy.resize(n);
  g.magnitude.resize(n);
  for (int y = 0; y < img.height; ++y) {
    for (int x = 0; x < img.width; ++x) {
      const std::size_t i = static_cast<std::size_t>(y) * img.width + x;
      sobel_at(img.pixels.data(), img.width, img.height, x, y, g.gx[i], g.gy[i]);
      g.magnitude[i] = magnitude(g.gx[i], g.gy[i]);
    }
  }
  return g;
}

void edges_and_histogram(const float* blurred, int w, int h, std::uint8_t* edges,
                         std::array<double, feature_count>& hist) {
  hist.fill(0.0);
  for (int y = 0; y < h; ++y) {
    const int cy = cell_of(y, h);
    for (int x = 0; x < w; ++x) {
      float gx = 0.0f;
      float gy = 0.0f;
      sobel_at(blurred, w, h, x, y, gx, gy);
      const float mag = magnitude(gx, gy);
      edges[static_cast<std::size_t>(y) * w + x] = edge_byte(mag);
      if (mag > 0.0f) {
        hist[feature_index(cell_of(x, w), cy, orientation_bin(gx, gy))] += mag;
      }
    }
  }
}

feature_vector to_features(const std::array<double, feature_count>& hist) {
  feature_vector f{};
  for (std::size_t i = 0; i < f.size(); ++i) {
    f[i] = static_cast<float>(hist[i]);
  }
  return f;
}

image_result process_cpu(const gray_image& img) {
  const std::size_t n = img.pixel_count();
  std::vector<float> tmp(n);
  std::vector<float> blurred(n);
  blur(img.pixels.data(), tmp.data(), blurred.data(), img.width, img.height);
  image_result r{img.width, img.height, std::vector<std::uint8_t>(n), {}};
  std::array<double, feature_count> hist{};
  edges_and_histogram(blurred.data(), img.width, img.height, r.edges.data(), hist);
  r.features = to_features(hist);
  return r;
}

} // namespace cuawait::images
