// SPDX-License-Identifier: Apache-2.0
// JPEG decoding and encoding through libjpeg, the EXIF orientation, and bad JPEG files.

#include "codec.hpp"
#include "exif.hpp"
#include "jpeg_cut.hpp"
#include "temp_dir.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace ci = cuawait::images;

namespace {

using bytes_t = std::vector<std::uint8_t>;

// A smooth image (JPEG keeps it within a few levels): gray or RGB.
ci::image8 smooth(int w, int h, int channels) {
  ci::image8 img{w, h, channels, {}};
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int c = 0; c < channels; ++c) {
        img.pixels.push_back(static_cast<std::uint8_t>(40 + 2 * x + 2 * y + 30 * c));
      }
    }
  }
  return img;
}

int max_difference(const bytes_t& a, const bytes_t& b) {
  EXPECT_EQ(a.size(), b.size());
  int d = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    d = std::max(d, std::abs(int{a[i]} - int{b[i]}));
  }
  return d;
}

// The payload of an APP1 segment holding an Exif block whose IFD0 has `entries` (tag,
// type, count, value) after an unrelated first entry, in the given byte order.
struct entry {
  std::uint16_t tag, type;
  std::uint32_t count;
  std::uint16_t value;
};

bytes_t exif_payload(std::vector<entry> entries, bool big_endian) {
  bytes_t p = {'E', 'x', 'i', 'f', 0, 0};
  auto u16 = [&](std::uint32_t v) {
    if (big_endian) {
      p.insert(p.end(), {static_cast<std::uint8_t>(v >> 8), static_cast<std::uint8_t>(v)});
    } else {
      p.insert(p.end(), {static_cast<std::uint8_t>(v), static_cast<std::uint8_t>(v >> 8)});
    }
  };
  auto u32 = [&](std::uint32_t v) {
    big_endian ? (u16(v >> 16), u16(v & 0xffff)) : (u16(v & 0xffff), u16(v >> 16));
  };
  p.insert(p.end(), big_endian ? std::initializer_list<std::uint8_t>{'M', 'M'}
                               : std::initializer_list<std::uint8_t>{'I', 'I'});
  u16(42);
  u32(8);                                                  // IFD0 right after the header
  entries.insert(entries.begin(), entry{0x010f, 2, 4, 0}); // Make: not ours
  u16(static_cast<std::uint32_t>(entries.size()));
  for (const entry& e : entries) {
    u16(e.tag);
    u16(e.type);
    u32(e.count);
    u16(e.value);
    u16(0);
  }
  u32(0); // no next IFD
  return p;
}

bytes_t orientation_payload(int orientation, bool big_endian = false) {
  return exif_payload({{0x0112, 3, 1, static_cast<std::uint16_t>(orientation)}}, big_endian);
}

// `jpeg` with an APP1 segment of `payload` right after its SOI marker.
bytes_t with_app1(const bytes_t& jpeg, const bytes_t& payload) {
  const std::size_t length = payload.size() + 2;
  bytes_t out(jpeg.begin(), jpeg.begin() + 2);
  out.insert(out.end(), {0xff, 0xe1, static_cast<std::uint8_t>(length >> 8),
                         static_cast<std::uint8_t>(length)});
  out.insert(out.end(), payload.begin(), payload.end());
  out.insert(out.end(), jpeg.begin() + 2, jpeg.end());
  return out;
}

std::string reason_for(const bytes_t& bytes, ci::decode_limits limits = {}) {
  try {
    (void)ci::decode_image(bytes, limits);
  } catch (const ci::image_error& e) {
    return e.what();
  }
  return "decoded";
}

std::string as_string(const bytes_t& b) { return {b.begin(), b.end()}; }

} // namespace

TEST(Jpeg, GrayAndColourImagesDecodeCloseToWhatWasEncoded) {
  for (const int channels : {1, 3}) {
    const ci::image8 img = smooth(37, 21, channels); // not a multiple of the 8x8 blocks
    const bytes_t jpeg = ci::encode_jpeg(img, 95);
    ASSERT_GE(jpeg.size(), 4U);
    EXPECT_EQ(jpeg[0], 0xff);
    EXPECT_EQ(jpeg[1], 0xd8);
    const ci::image8 back = ci::decode_image(jpeg, {});
    EXPECT_EQ(back.width, 37);
    EXPECT_EQ(back.height, 21);
    EXPECT_EQ(back.channels, channels);
    EXPECT_LE(max_difference(back.pixels, img.pixels), 6) << channels;
  }
}

TEST(Jpeg, EncoderRefusesBadArguments) {
  const ci::image8 img = smooth(4, 4, 1);
  EXPECT_THROW((void)ci::encode_jpeg(img, 0), std::invalid_argument);
  EXPECT_THROW((void)ci::encode_jpeg(img, 101), std::invalid_argument);
  EXPECT_THROW((void)ci::encode_jpeg(img.pixels, 5, 4, 1, 90), std::invalid_argument); // short
  EXPECT_THROW((void)ci::encode_jpeg(img.pixels, 2, 2, 2, 90), std::invalid_argument);
}

TEST(Exif, OrientationTagIsReadInBothByteOrders) {
  for (int o = 1; o <= 8; ++o) {
    EXPECT_EQ(ci::exif_orientation(orientation_payload(o, false)), o);
    EXPECT_EQ(ci::exif_orientation(orientation_payload(o, true)), o);
  }
}

TEST(Exif, MalformedBlocksMeanAsStored) {
  EXPECT_EQ(ci::exif_orientation({}), 1);
  EXPECT_EQ(ci::exif_orientation(orientation_payload(0)), 1);
  EXPECT_EQ(ci::exif_orientation(orientation_payload(9)), 1);
  EXPECT_EQ(ci::exif_orientation(exif_payload({{0x0112, 4, 1, 6}}, false)), 1); // not SHORT
  EXPECT_EQ(ci::exif_orientation(exif_payload({{0x0112, 3, 2, 6}}, false)), 1); // 2 values
  EXPECT_EQ(ci::exif_orientation(exif_payload({}, false)), 1);                  // no tag
  bytes_t not_exif = orientation_payload(6);
  not_exif[0] = 'X';
  EXPECT_EQ(ci::exif_orientation(not_exif), 1);
  bytes_t bad_order = orientation_payload(6);
  bad_order[6] = 'X';
  EXPECT_EQ(ci::exif_orientation(bad_order), 1);
  // IFD0 offset far outside the block, and an entry count far beyond it.
  bytes_t far = orientation_payload(6);
  far[10] = 0xff, far[11] = 0xff, far[12] = 0xff, far[13] = 0x7f;
  EXPECT_EQ(ci::exif_orientation(far), 1);
  bytes_t many = orientation_payload(6);
  many[14] = 0xff, many[15] = 0xff;
  EXPECT_EQ(ci::exif_orientation(many), 6); // found before the reads run out
  many.resize(many.size() - 16);            // the orientation entry cut off
  EXPECT_EQ(ci::exif_orientation(many), 1);
  // Every truncation of a valid block: no read past the end (ASan), never a crash. The
  // tag is found once the block holds its value (the entry's first 10 bytes); the 2 bytes
  // of padding after it and the 4-byte next-IFD offset are not needed.
  const bytes_t full = orientation_payload(6, true);
  for (std::size_t n = 0; n < full.size(); ++n) {
    EXPECT_EQ(ci::exif_orientation(std::span(full.data(), n)), n >= full.size() - 6 ? 6 : 1) << n;
  }
}

TEST(Exif, EachOrientationMapsPixelsAsTheStandardSays) {
  // Stored 3 x 2:  a b c
  //                d e f
  const ci::image8 stored{3, 2, 1, {'a', 'b', 'c', 'd', 'e', 'f'}};
  const std::vector<std::pair<int, std::string>> expected = {
      {1, "abcdef"}, {2, "cbafed"}, {3, "fedcba"},
      {4, "defabc"}, {5, "adbecf"}, // transposed: 2 x 3
      {6, "daebfc"},                // rotated 90° clockwise
      {7, "fcebda"},                // transversed
      {8, "cfbead"},                // rotated 90° counter-clockwise
  };
  for (const auto& [o, text] : expected) {
    const ci::image8 out = ci::apply_orientation(stored, o);
    EXPECT_EQ(out.width, o >= 5 ? 2 : 3) << o;
    EXPECT_EQ(out.height, o >= 5 ? 3 : 2) << o;
    EXPECT_EQ(std::string(out.pixels.begin(), out.pixels.end()), text) << o;
  }
  // RGB pixels move whole.
  const ci::image8 rgb{2, 1, 3, {1, 2, 3, 4, 5, 6}};
  EXPECT_EQ(ci::apply_orientation(rgb, 6).pixels, (bytes_t{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(ci::apply_orientation(rgb, 2).pixels, (bytes_t{4, 5, 6, 1, 2, 3}));
}

TEST(Jpeg, ExifOrientationIsAppliedWhenDecoding) {
  const ci::image8 img = smooth(24, 16, 3);
  const bytes_t jpeg = ci::encode_jpeg(img, 95);
  const ci::image8 plain = ci::decode_image(jpeg, {});
  for (int o = 1; o <= 8; ++o) {
    for (const bool big_endian : {false, true}) {
      const ci::image8 turned =
          ci::decode_image(with_app1(jpeg, orientation_payload(o, big_endian)), {});
      const ci::image8 expected = ci::apply_orientation(plain, o);
      EXPECT_EQ(turned.width, o >= 5 ? 16 : 24) << o;
      EXPECT_EQ(turned.pixels, expected.pixels) << o;
    }
  }
  // A broken Exif block does not make the image unreadable.
  bytes_t broken = orientation_payload(6);
  broken.resize(broken.size() - 9);
  EXPECT_EQ(ci::decode_image(with_app1(jpeg, broken), {}).pixels, plain.pixels);
  // The header peek finds the frame past a long APP1 segment (beyond the first 512 bytes).
  ci::test::temp_dir dir("jpeg-peek");
  bytes_t padded = orientation_payload(6);
  padded.resize(3000, 0);
  EXPECT_EQ(ci::peek_size(dir.write("p.jpg", as_string(with_app1(jpeg, padded)))),
            (std::pair{24, 16}));
}

TEST(Jpeg, CorruptAndTruncatedFilesAreErrorsNotWarnings) {
  const bytes_t jpeg = ci::encode_jpeg(smooth(40, 40, 3), 90);
  // Truncated inside the entropy-coded data: libjpeg only warns ("Premature end of JPEG
  // file") and pads with grey; here it is an error.
  const std::string cut = reason_for(ci::test::cut_inside_scan(jpeg));
  // The wording is libjpeg-turbo's and varies between versions ("Premature end of JPEG
  // file", "Corrupt JPEG data: premature end of data segment"): what matters is that it is
  // an error naming JPEG.
  EXPECT_EQ(cut.rfind("corrupt JPEG: ", 0), 0U) << cut;
  // Truncated inside the header.
  EXPECT_EQ(reason_for(bytes_t(jpeg.begin(), jpeg.begin() + 30)).rfind("corrupt JPEG: ", 0), 0U);
  EXPECT_EQ(reason_for(bytes_t{0xff, 0xd8}), "truncated JPEG: 2 bytes");
  EXPECT_EQ(reason_for(bytes_t{0xff}), "truncated JPEG: 1 bytes");
  // A corrupt header: SOI, then junk where the markers should be.
  bytes_t junk = {0xff, 0xd8, 0xff, 0xe0, 0x00, 0x01, 'x', 'y', 'z'};
  EXPECT_EQ(reason_for(junk).rfind("corrupt JPEG: ", 0), 0U) << reason_for(junk);
  // A frame header declaring a huge image: refused before any pixel memory is allocated.
  bytes_t huge = jpeg;
  for (std::size_t k = 2; k + 8 < huge.size(); ++k) {
    if (huge[k] == 0xff && huge[k + 1] == 0xc0) { // SOF0: length, precision, height, width
      huge[k + 5] = 0xfd, huge[k + 6] = 0xe8, huge[k + 7] = 0xfd, huge[k + 8] = 0xe8;
      break;
    }
  }
  EXPECT_EQ(reason_for(huge), "image too large: 65000x65000 pixels, the limit is 268435456 pixels");
  EXPECT_EQ(reason_for(jpeg, ci::decode_limits{1 << 20, 100}),
            "image too large: 40x40 pixels, the limit is 100 pixels");
}

TEST(Jpeg, FormatIsRecognisedByMagicBytesNotByName) {
  ci::test::temp_dir dir("jpeg-magic");
  const ci::image8 img = smooth(9, 7, 3);
  const bytes_t png = ci::encode_png(img);
  const auto fake = dir.write("really_png.jpg", as_string(png));
  const ci::image8 back = ci::decode_file(fake, {});
  EXPECT_EQ(back.pixels, img.pixels); // lossless: it was decoded as PNG
  EXPECT_EQ(ci::peek_size(fake), (std::pair{9, 7}));
  const auto real = dir.write("named.png", as_string(ci::encode_jpeg(img)));
  EXPECT_EQ(ci::decode_file(real, {}).width, 9);
  EXPECT_EQ(ci::peek_size(real), (std::pair{9, 7}));
}

TEST(Exif, OrientationIsFoundInTheFileWithoutDecodingIt) {
  // The GPU decode path reads the orientation from the file's bytes: it must agree with
  // what the CPU decoder applies, in both byte orders, behind other segments too.
  const bytes_t jpeg = ci::encode_jpeg(smooth(24, 16, 3), 90);
  EXPECT_EQ(ci::jpeg_orientation(jpeg), 1); // libjpeg writes a JFIF APP0, no Exif
  for (int o = 1; o <= 8; ++o) {
    for (const bool big_endian : {false, true}) {
      EXPECT_EQ(ci::jpeg_orientation(with_app1(jpeg, orientation_payload(o, big_endian))), o);
    }
  }
  // Only the first Exif block counts, as in the decoder.
  EXPECT_EQ(ci::jpeg_orientation(
                with_app1(with_app1(jpeg, orientation_payload(3)), orientation_payload(6))),
            6);
  // Not Exif, broken or cut short anywhere: "as stored", never a read past the end.
  const bytes_t xmp = with_app1(jpeg, {'h', 't', 't', 'p', ':', '/', '/', 'n', 's', 0});
  EXPECT_EQ(ci::jpeg_orientation(xmp), 1);
  const bytes_t turned = with_app1(jpeg, orientation_payload(8));
  for (std::size_t n = 0; n < 120 && n < turned.size(); ++n) {
    const int o = ci::jpeg_orientation(bytes_t(turned.begin(), turned.begin() + n));
    EXPECT_TRUE(o == 1 || o == 8) << n;
  }
  EXPECT_EQ(ci::jpeg_orientation(bytes_t{0xff, 0xd8, 0xff, 0xe1, 0xff, 0xff}), 1);
  EXPECT_EQ(ci::jpeg_orientation(bytes_t{'P', '5'}), 1);
}

TEST(Jpeg, DecodingIntoACallersBufferGivesTheSamePixels) {
  const bytes_t jpeg = ci::encode_jpeg(smooth(24, 16, 3), 90);
  for (const int o : {1, 6}) {
    const bytes_t file = o == 1 ? jpeg : with_app1(jpeg, orientation_payload(o));
    const ci::image8 expected = ci::decode_image(file, {});
    std::vector<std::uint8_t> buffer;
    int calls = 0;
    const ci::image_shape shape = ci::decode_image_into(file, {}, [&](const ci::image_shape& s) {
      ++calls;
      buffer.assign(s.bytes() + 5, 0); // a larger buffer is fine
      return std::span<std::uint8_t>(buffer);
    });
    EXPECT_EQ(calls, 1);
    EXPECT_EQ(shape.width, expected.width);
    EXPECT_EQ(shape.height, expected.height);
    EXPECT_EQ(shape.channels, 3);
    buffer.resize(shape.bytes());
    EXPECT_EQ(buffer, expected.pixels) << o;
  }
  // Other formats are decoded, then copied.
  const ci::image8 gray = smooth(9, 7, 1);
  std::vector<std::uint8_t> buffer;
  const ci::image_shape shape =
      ci::decode_image_into(ci::encode_png(gray), {}, [&](const ci::image_shape& s) {
        buffer.resize(s.bytes());
        return std::span<std::uint8_t>(buffer);
      });
  EXPECT_EQ(shape.channels, 1);
  EXPECT_EQ(buffer, gray.pixels);
  // A sink that returns too little is refused before anything is written.
  EXPECT_THROW((void)ci::decode_image_into(jpeg, {},
                                           [&](const ci::image_shape&) {
                                             return std::span<std::uint8_t>(buffer.data(), 3);
                                           }),
               std::invalid_argument);
  // A bad file is still an image_error, and the sink is never called.
  bool called = false;
  EXPECT_THROW((void)ci::decode_image_into(bytes_t{0xff, 0xd8, 0xff, 0xe0, 0, 2}, {},
                                           [&](const ci::image_shape&) {
                                             called = true;
                                             return std::span<std::uint8_t>(buffer);
                                           }),
               ci::image_error);
  EXPECT_FALSE(called);
}
