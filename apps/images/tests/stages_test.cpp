// SPDX-License-Identifier: Apache-2.0
// Known-answer tests of the CPU reference stages (the GPU kernels are compared with them).

#include "engine.hpp"
#include "pixel_math.hpp"
#include "stages.hpp"
#include "trace_log.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

namespace ci = cuawait::images;

namespace {

ci::gray_image constant_image(int w, int h, float v) {
  return {w, h, std::vector<float>(static_cast<std::size_t>(w) * h, v)};
}

// Columns x >= edge are 1, the others 0.
ci::gray_image step_image(int w, int h, int edge) {
  ci::gray_image img = constant_image(w, h, 0.0f);
  for (int y = 0; y < h; ++y) {
    for (int x = edge; x < w; ++x) {
      img.pixels[static_cast<std::size_t>(y) * w + x] = 1.0f;
    }
  }
  return img;
}

float at(const std::vector<float>& v, int w, int x, int y) {
  return v[static_cast<std::size_t>(y) * w + x];
}

double sum(const ci::feature_vector& f) { return std::accumulate(f.begin(), f.end(), 0.0); }

} // namespace

TEST(Stages, ConstantImageBlursToItselfWithZeroGradientsAndAnEmptyHistogram) {
  const ci::gray_image img = constant_image(37, 23, 0.625f);
  const ci::gray_image blurred = ci::blur(img);
  EXPECT_EQ(blurred.pixels, img.pixels); // the weights sum to exactly 1
  const ci::gradient_field g = ci::gradients(blurred);
  for (std::size_t i = 0; i < g.magnitude.size(); ++i) {
    ASSERT_EQ(g.gx[i], 0.0f);
    ASSERT_EQ(g.gy[i], 0.0f);
  }
  const ci::image_result r = ci::process_cpu(img);
  for (const float f : r.features) {
    EXPECT_EQ(f, 0.0f);
  }
  for (const std::uint8_t e : r.edges) {
    ASSERT_EQ(e, 0);
  }
}

TEST(Stages, VerticalStepEdgeHasSobelMagnitudeFourAtTheTwoEdgeColumns) {
  const int w = 16;
  const int h = 8;
  const int edge = 8;
  const ci::gradient_field g = ci::gradients(step_image(w, h, edge));
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      const float expected = (x == edge - 1 || x == edge) ? 4.0f : 0.0f;
      EXPECT_EQ(at(g.magnitude, w, x, y), expected) << x << "," << y;
      EXPECT_EQ(at(g.gy, w, x, y), 0.0f);
    }
  }
}

TEST(Stages, BlurredStepEdgeHasExactBinomialGradientsAllInTheZeroDegreeBin) {
  const int w = 32;
  const int h = 12;
  const int edge = 16;
  const ci::gray_image blurred = ci::blur(step_image(w, h, edge));
  // (1 4 6 4 1)/16 across a 0 -> 1 step: 1/16, 5/16, 11/16, 15/16 at edge-2 .. edge+1.
  const float row[] = {0.0f, 0.0625f, 0.3125f, 0.6875f, 0.9375f, 1.0f};
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(at(blurred.pixels, w, edge - 3 + i, 5), row[i]);
  }
  const ci::gradient_field g = ci::gradients(blurred);
  // gx = 4 (v[x+1] - v[x-1]) (Sobel's column weights 1 + 2 + 1 on identical rows).
  const float mag[] = {0.25f, 1.25f, 2.5f, 2.5f, 1.25f, 0.25f};
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      const int k = x - (edge - 3);
      const float expected = (k >= 0 && k < 6) ? mag[k] : 0.0f;
      ASSERT_EQ(at(g.magnitude, w, x, y), expected) << x << "," << y;
    }
  }
  const ci::image_result r = ci::process_cpu(step_image(w, h, edge));
  // Each row contributes 0.25 + 1.25 + 2.5 + 2.5 + 1.25 + 0.25 = 8, all at 0 degrees.
  EXPECT_EQ(sum(r.features), 8.0 * h);
  for (int cy = 0; cy < ci::hog_cells; ++cy) {
    for (int cx = 0; cx < ci::hog_cells; ++cx) {
      for (int bin = 1; bin < ci::hog_bins; ++bin) {
        EXPECT_EQ(r.features[static_cast<std::size_t>(ci::feature_index(cx, cy, bin))], 0.0f);
      }
    }
  }
  // Columns 13..18 lie in cells 1 (x < 16) and 2; rows 0..11 in cells 0..3 (3 rows each).
  EXPECT_EQ(r.features[static_cast<std::size_t>(ci::feature_index(1, 0, 0))],
            3 * (0.25f + 1.25f + 2.5f));
  EXPECT_EQ(r.features[static_cast<std::size_t>(ci::feature_index(2, 3, 0))],
            3 * (2.5f + 1.25f + 0.25f));
  EXPECT_EQ(r.features[static_cast<std::size_t>(ci::feature_index(0, 0, 0))], 0.0f);
}

TEST(Stages, SingleBrightPixelBlursIntoTheExactBinomialWeights) {
  const int w = 11;
  const int h = 9;
  ci::gray_image img = constant_image(w, h, 0.0f);
  img.pixels[static_cast<std::size_t>(4) * w + 5] = 1.0f;
  const ci::gray_image b = ci::blur(img);
  const float k[] = {1.0f / 16, 4.0f / 16, 6.0f / 16, 4.0f / 16, 1.0f / 16};
  double total = 0;
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      const int dx = x - 5 + 2;
      const int dy = y - 4 + 2;
      const float expected = (dx >= 0 && dx < 5 && dy >= 0 && dy < 5) ? k[dx] * k[dy] : 0.0f;
      EXPECT_EQ(at(b.pixels, w, x, y), expected) << x << "," << y;
      total += at(b.pixels, w, x, y);
    }
  }
  EXPECT_EQ(total, 1.0);
  EXPECT_EQ(at(b.pixels, w, 5, 4), 36.0f / 256);
}

TEST(Stages, BlurClampsAtTheBorder) {
  // A bright corner pixel: the clamped taps fold the kernel's outer weights onto it.
  ci::gray_image img = constant_image(6, 6, 0.0f);
  img.pixels[0] = 1.0f;
  const ci::gray_image b = ci::blur(img);
  // Along one axis the corner keeps 1/16 + 4/16 + 6/16 = 11/16 (taps -2, -1, 0 clamp to 0).
  EXPECT_EQ(b.pixels[0], (11.0f / 16) * (11.0f / 16));
  EXPECT_EQ(b.pixels[1], (5.0f / 16) * (11.0f / 16)); // taps -1 and -2 of x = 1 reach x = 0
}

TEST(Stages, OrientationBinsAreTwentyDegreesWideAndUnsigned) {
  auto bin_at = [](double degrees) {
    const double r = degrees * 3.14159265358979323846 / 180.0;
    return ci::orientation_bin(static_cast<float>(std::cos(r)), static_cast<float>(std::sin(r)));
  };
  EXPECT_EQ(ci::orientation_bin(1.0f, 0.0f), 0);
  EXPECT_EQ(ci::orientation_bin(-1.0f, 0.0f), 0); // 180 degrees folds onto 0
  EXPECT_EQ(ci::orientation_bin(0.0f, 1.0f), 4);  // 90 degrees: [80, 100)
  EXPECT_EQ(ci::orientation_bin(0.0f, -1.0f), 4);
  EXPECT_EQ(ci::orientation_bin(1.0f, 1.0f), 2);  // 45
  EXPECT_EQ(ci::orientation_bin(-1.0f, 1.0f), 6); // 135
  EXPECT_EQ(ci::orientation_bin(1.0f, -1.0f), 6); // -45 is 135 unsigned
  for (int b = 0; b < 9; ++b) {
    EXPECT_EQ(bin_at(20.0 * b + 10.0), b) << b;
    EXPECT_EQ(bin_at(20.0 * b + 10.0 + 180.0), b) << b;
  }
}

TEST(Stages, CellsSplitEachAxisInFour) {
  EXPECT_EQ(ci::cell_of(0, 10), 0);
  EXPECT_EQ(ci::cell_of(2, 10), 0);
  EXPECT_EQ(ci::cell_of(3, 10), 1);
  EXPECT_EQ(ci::cell_of(9, 10), 3);
  EXPECT_EQ(ci::cell_of(0, 1), 0);
  EXPECT_EQ(ci::cell_of(2, 3), 2);
  EXPECT_EQ(ci::feature_index(3, 3, 8), ci::feature_count - 1);
}

TEST(Stages, EdgeBytesScaleMagnitudeFourTo255) {
  EXPECT_EQ(ci::edge_byte(0.0f), 0);
  EXPECT_EQ(ci::edge_byte(4.0f), 255);
  EXPECT_EQ(ci::edge_byte(5.6f), 255);
  EXPECT_EQ(ci::edge_byte(2.0f), 128); // 127.5 rounds up
  EXPECT_EQ(ci::edge_byte(1.0f), 64);  // 63.75
}

TEST(Stages, GrayscaleNormalisesBytesToUnitRange) {
  ci::image8 gray{2, 1, 1, {0, 255}};
  EXPECT_EQ(ci::to_gray(gray).pixels, (std::vector<float>{0.0f, 1.0f}));
  ci::image8 rgb{2, 1, 3, {255, 255, 255, 0, 255, 0}};
  const ci::gray_image g = ci::to_gray(rgb);
  EXPECT_NEAR(g.pixels[0], 1.0f, 1e-6f);
  EXPECT_NEAR(g.pixels[1], 0.587f, 1e-6f);
}

TEST(Stages, TinyImagesWork) {
  const ci::image_result one = ci::process_cpu(constant_image(1, 1, 0.5f));
  EXPECT_EQ(one.edges.size(), 1U);
  EXPECT_EQ(one.edges[0], 0);
  const ci::image_result r = ci::process_cpu(step_image(2, 3, 1));
  EXPECT_EQ(r.edges.size(), 6U);
}

// to_gray runs vectorised loops (and an AVX2 clone where the CPU has one): they must give
// the documented scalar formula's bits for every possible pixel, tails included.
TEST(Stages, GrayscaleIsTheScalarFormulaBitForBitForEveryPixelValue) {
  ci::image8 gray{256 + 7, 1, 1, std::vector<std::uint8_t>(256 + 7)};
  for (std::size_t i = 0; i < gray.pixels.size(); ++i) {
    gray.pixels[i] = static_cast<std::uint8_t>(i * 77);
  }
  const ci::gray_image g = ci::to_gray(gray);
  for (std::size_t i = 0; i < gray.pixels.size(); ++i) {
    ASSERT_EQ(g.pixels[i], static_cast<float>(gray.pixels[i]) / 255.0f) << i;
  }
  const std::size_t n = (std::size_t{1} << 24) + 5; // every (r, g, b), then a tail
  ci::image8 rgb{static_cast<int>(n), 1, 3, std::vector<std::uint8_t>(3 * n)};
  for (std::size_t i = 0; i < n; ++i) {
    rgb.pixels[3 * i] = static_cast<std::uint8_t>(i >> 16);
    rgb.pixels[3 * i + 1] = static_cast<std::uint8_t>(i >> 8);
    rgb.pixels[3 * i + 2] = static_cast<std::uint8_t>(i);
  }
  const ci::gray_image c = ci::to_gray(rgb);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint8_t* p = &rgb.pixels[3 * i];
    const float v = 0.299f * static_cast<float>(p[0]) + 0.587f * static_cast<float>(p[1]) +
                    0.114f * static_cast<float>(p[2]);
    ASSERT_EQ(c.pixels[i], v / 255.0f) << i;
  }
}

// The engines take 8-bit pixels and convert them in their stages: the CPU engine's result
// is the reference pipeline's, gray or colour.
TEST(Stages, CpuEngineOnEightBitPixelsEqualsTheReferencePipeline) {
  ci::trace_log log;
  const auto engine = ci::make_cpu_engine(log);
  for (const int channels : {1, 3}) {
    ci::image8 img{37, 23, channels, {}};
    for (int i = 0; i < 37 * 23 * channels; ++i) {
      img.pixels.push_back(static_cast<std::uint8_t>((i * 131) ^ (i >> 3)));
    }
    const ci::image_shape shape{img.width, img.height, img.channels};
    const std::span<std::uint8_t> in = engine->input(shape);
    ASSERT_GE(in.size(), shape.bytes());
    std::copy(img.pixels.begin(), img.pixels.end(), in.begin());
    const ci::result_view r = engine->process(shape, 0);
    const ci::image_result expected = ci::process_cpu(ci::to_gray(img));
    EXPECT_EQ(std::vector<std::uint8_t>(r.edges.begin(), r.edges.end()), expected.edges);
    EXPECT_EQ(r.features, expected.features);
  }
}

TEST(Stages, CeilingEngineWritesTheStandInAndNoFeatures) {
  ci::trace_log log;
  const auto engine = ci::make_ceiling_engine(log);
  const ci::image_shape shape{3, 2, 3};
  const std::span<std::uint8_t> in = engine->input(shape);
  const std::uint8_t pixels[] = {10, 0, 0, 4, 0, 0, 9, 0, 0, 200, 1, 1, 0, 1, 1, 0, 1, 1};
  std::copy(std::begin(pixels), std::end(pixels), in.begin());
  const ci::result_view r = engine->process(shape, 0);
  EXPECT_EQ(std::vector<std::uint8_t>(r.edges.begin(), r.edges.end()),
            (std::vector<std::uint8_t>{6, 5, 0, 200, 0, 0}));
  EXPECT_EQ(r.features, ci::feature_vector{});
}

TEST(Stages, GrayOfEightBitBuffersRefusesBadShapes) {
  std::vector<float> out(4);
  const std::vector<std::uint8_t> px(12);
  EXPECT_THROW(ci::to_gray({2, 2, 2}, px, out), std::invalid_argument);
  EXPECT_THROW(ci::to_gray({2, 3, 1}, px, out), std::invalid_argument);
  EXPECT_THROW(ci::to_gray({2, 2, 3}, std::span(px.data(), 11), out), std::invalid_argument);
  ci::to_gray({2, 2, 3}, px, out);
  EXPECT_EQ(out, std::vector<float>(4, 0.0f));
}

// The orientation map the GPU shares with the CPU: 5-8 swap the axes, and every
// orientation is a bijection onto the stored image.
TEST(Stages, OrientedSourceIsABijectionForEveryOrientation) {
  const int w = 5;
  const int h = 3;
  for (int o = 1; o <= 8; ++o) {
    const int ow = o >= 5 ? h : w;
    const int oh = o >= 5 ? w : h;
    std::vector<int> hits(static_cast<std::size_t>(w * h), 0);
    for (int y = 0; y < oh; ++y) {
      for (int x = 0; x < ow; ++x) {
        int sx = -1;
        int sy = -1;
        ci::oriented_source(x, y, w, h, o, sx, sy);
        ASSERT_TRUE(sx >= 0 && sx < w && sy >= 0 && sy < h) << o;
        ++hits[static_cast<std::size_t>(sy * w + sx)];
      }
    }
    EXPECT_EQ(hits, std::vector<int>(static_cast<std::size_t>(w * h), 1)) << o;
  }
}
