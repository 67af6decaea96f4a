// SPDX-License-Identifier: Apache-2.0
// Decoding and encoding, and every kind of bad input file.

#include "codec.hpp"
#include "temp_dir.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace ci = cuawait::images;

namespace {

ci::image8 sample_rgb() {
  ci::image8 img{5, 3, 3, {}};
  for (int i = 0; i < 5 * 3 * 3; ++i) {
    img.pixels.push_back(static_cast<std::uint8_t>(i * 17));
  }
  return img;
}

std::string reason_for(const std::filesystem::path& p, ci::decode_limits limits = {}) {
  try {
    (void)ci::decode_file(p, limits);
  } catch (const ci::image_error& e) {
    return e.what();
  }
  return "decoded";
}

} // namespace

TEST(Codec, PngRoundTripsGrayAndRgb) {
  const ci::image8 rgb = sample_rgb();
  const ci::image8 back = ci::decode_image(ci::encode_png(rgb), {});
  EXPECT_EQ(back.width, 5);
  EXPECT_EQ(back.height, 3);
  EXPECT_EQ(back.channels, 3);
  EXPECT_EQ(back.pixels, rgb.pixels);
  const ci::image8 gray{4, 2, 1, {0, 1, 2, 3, 250, 251, 252, 255}};
  EXPECT_EQ(ci::decode_image(ci::encode_png(gray, 9), {}).pixels, gray.pixels);
}

// A stop request ends a PNG encoding part way (Ctrl-C must not wait for a large image);
// without one, the stoppable encoding writes the same bytes as the plain one.
TEST(Codec, PngEncodingGivesUpOnAStopAndIsUnchangedWithout) {
  const int w = 300;
  const int h = 200;
  std::vector<std::uint8_t> pixels(static_cast<std::size_t>(w) * h);
  for (std::size_t k = 0; k < pixels.size(); ++k) {
    pixels[k] = static_cast<std::uint8_t>((k * 7) % 251);
  }
  std::atomic<bool> stop{false};
  const auto plain = ci::encode_png(pixels, w, h, 1, 1);
  EXPECT_EQ(ci::encode_png(pixels, w, h, 1, 1, &stop), plain);
  stop.store(true);
  EXPECT_THROW((void)ci::encode_png(pixels, w, h, 1, 1, &stop), ci::encode_interrupted);
  EXPECT_EQ(ci::decode_image(plain, {}).pixels, pixels);
}

TEST(Codec, PnmBinaryAndPlainFormsDecode) {
  const ci::image8 rgb = sample_rgb();
  EXPECT_EQ(ci::decode_image(ci::encode_pnm(rgb), {}).pixels, rgb.pixels);
  const std::string p2 = "P2\n# comment\n3 1\n15\n0 15 5\n";
  const ci::image8 g =
      ci::decode_image(std::span(reinterpret_cast<const std::uint8_t*>(p2.data()), p2.size()), {});
  EXPECT_EQ(g.channels, 1);
  EXPECT_EQ(g.pixels, (std::vector<std::uint8_t>{0, 255, 85}));
  const std::string p3 = "P3 1 1 255 10 20 30";
  const ci::image8 c =
      ci::decode_image(std::span(reinterpret_cast<const std::uint8_t*>(p3.data()), p3.size()), {});
  EXPECT_EQ(c.pixels, (std::vector<std::uint8_t>{10, 20, 30}));
  // 16-bit binary samples scale to 8 bits.
  const std::string p5 = std::string("P5 2 1 65535\n") + std::string("\xff\xff\x00\x00", 4);
  const ci::image8 d =
      ci::decode_image(std::span(reinterpret_cast<const std::uint8_t*>(p5.data()), p5.size()), {});
  EXPECT_EQ(d.pixels, (std::vector<std::uint8_t>{255, 0}));
}

TEST(Codec, BadFilesGetOneClearReason) {
  ci::test::temp_dir dir("codec");
  const auto png = ci::encode_png(sample_rgb());
  EXPECT_EQ(reason_for(dir.write("empty.png", "")), "empty file");
  EXPECT_EQ(reason_for(dir.write("text.png", "hello, not an image\n")),
            "not an image: no PNG, JPEG or PGM/PPM signature");
  const std::string truncated =
      reason_for(dir.write("cut.png", std::string(png.begin(), png.begin() + 40)));
  EXPECT_NE(truncated.find("truncated"), std::string::npos) << truncated;
  EXPECT_NE(
      reason_for(dir.write("sig.png", std::string(png.begin(), png.begin() + 5))).find("truncated"),
      std::string::npos);
  std::string corrupt(png.begin(), png.end());
  corrupt[20] = static_cast<char>(corrupt[20] ^ 0x55); // inside IHDR: the CRC no longer matches
  const std::string crc = reason_for(dir.write("crc.png", corrupt));
  EXPECT_EQ(crc.rfind("corrupt PNG: ", 0), 0U) << crc;
  const std::string too_big = reason_for(dir.write("big.png", std::string(png.begin(), png.end())),
                                         ci::decode_limits{1 << 20, 10});
  EXPECT_EQ(too_big, "image too large: 5x3 pixels, the limit is 10 pixels");
  EXPECT_EQ(reason_for(dir.write("big.ppm", "P6 100000 100000 255\n"), ci::decode_limits{}),
            "image too large: 100000x100000 pixels, the limit is 268435456 pixels");
  const std::string bytes_limit = reason_for(
      dir.write("bytes.png", std::string(png.begin(), png.end())), ci::decode_limits{16, 1000});
  EXPECT_EQ(bytes_limit.rfind("file too large: ", 0), 0U) << bytes_limit;
  EXPECT_EQ(reason_for(dir.write("short.ppm", "P6 4 4 255\nabc")),
            "truncated PGM/PPM: 3 bytes of pixel data, 48 expected");
  EXPECT_EQ(reason_for(dir.write("bad.pgm", "P2 2 1 255 7 x")), "corrupt PGM/PPM: bad sample");
  EXPECT_EQ(reason_for(dir.path() / "missing.png").rfind("cannot read: ", 0), 0U);
  EXPECT_EQ(reason_for(dir.path()), "is a directory");
}

TEST(Codec, PeekSizeReadsHeadersOnly) {
  ci::test::temp_dir dir("peek");
  const auto png = ci::encode_png(sample_rgb());
  EXPECT_EQ(ci::peek_size(dir.write("a.png", std::string(png.begin(), png.end()))),
            (std::pair{5, 3}));
  EXPECT_EQ(ci::peek_size(dir.write("b.ppm", "P6 # c\n 7 9 255\n")), (std::pair{7, 9}));
  EXPECT_EQ(ci::peek_size(dir.write("c.txt", "nothing")), std::nullopt);
  EXPECT_EQ(ci::peek_size(dir.path() / "missing"), std::nullopt);
}
