// SPDX-License-Identifier: Apache-2.0
// Writes the seed corpus of the fuzz targets (apps/images/fuzz/corpus/<target>/): small
// valid files of each kind the decoders read (PNG of every colour type, bit depth and
// interlacing; baseline, progressive, gray and EXIF-rotated JPEG; P2/P3/P5/P6 PGM/PPM at 8
// and 16 bits; EXIF payloads in both byte orders), each with a truncated and a corrupted
// copy. Usage: fuzz_make_corpus <corpus directory>

#include "codec.hpp"

#include <jpeglib.h>
#include <png.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using bytes = std::vector<std::uint8_t>;
using cuawait::images::image8;

void write(const fs::path& dir, const std::string& name, const bytes& b) {
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary)
      .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

// The file, a copy cut in half and a copy with a few bytes flipped past its signature.
void write_variants(const fs::path& dir, const std::string& name, const bytes& b) {
  write(dir, name, b);
  write(dir, "truncated-" + name, bytes(b.begin(), b.begin() + static_cast<long>(b.size() / 2)));
  bytes bad = b;
  for (std::size_t i = 8; i < bad.size(); i += bad.size() / 5 + 1) {
    bad[i] ^= 0x5a;
  }
  write(dir, "corrupt-" + name, bad);
}

image8 gradient(int w, int h, int channels) {
  image8 img{w, h, channels, {}};
  for (int i = 0; i < w * h * channels; ++i) {
    img.pixels.push_back(static_cast<std::uint8_t>(i * 37 + i / 7));
  }
  return img;
}

void on_png_error(png_structp, png_const_charp msg) { throw std::runtime_error(msg); }

// A PNG of any colour type, depth and interlacing, which the app's encoder does not write.
bytes png_file(int w, int h, int color, int depth, bool interlace) {
  bytes out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, on_png_error, nullptr);
  png_infop info = png_create_info_struct(png);
  png_set_write_fn(
      png, &out,
      [](png_structp p, png_bytep d, png_size_t n) {
        auto* o = static_cast<bytes*>(png_get_io_ptr(p));
        o->insert(o->end(), d, d + n);
      },
      nullptr);
  png_set_IHDR(png, info, static_cast<png_uint_32>(w), static_cast<png_uint_32>(h), depth, color,
               interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  if (color == PNG_COLOR_TYPE_PALETTE) {
    png_color palette[4] = {{0, 0, 0}, {255, 0, 0}, {0, 255, 0}, {0, 0, 255}};
    png_set_PLTE(png, info, palette, 4);
    png_byte alpha[2] = {0, 128};
    png_set_tRNS(png, info, alpha, 2, nullptr);
  }
  png_write_info(png, info);
  png_set_interlace_handling(png);
  const std::size_t stride = png_get_rowbytes(png, info);
  std::vector<bytes> rows(static_cast<std::size_t>(h), bytes(stride));
  std::vector<png_bytep> row_pointers;
  for (std::size_t y = 0; y < rows.size(); ++y) {
    for (std::size_t x = 0; x < stride; ++x) {
      rows[y][x] = static_cast<std::uint8_t>(
          color == PNG_COLOR_TYPE_PALETTE && depth == 8 ? (x + y) % 4 : x * 13 + y * 7);
    }
    row_pointers.push_back(rows[y].data());
  }
  png_write_image(png, row_pointers.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

// A JPEG written with libjpeg directly: progressive or not, with an APP1 payload or not.
bytes jpeg_file(const image8& img, bool progressive, const bytes& app1) {
  jpeg_compress_struct cinfo{};
  jpeg_error_mgr err{};
  cinfo.err = jpeg_std_error(&err);
  jpeg_create_compress(&cinfo);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buf, &size);
  cinfo.image_width = static_cast<JDIMENSION>(img.width);
  cinfo.image_height = static_cast<JDIMENSION>(img.height);
  cinfo.input_components = img.channels;
  cinfo.in_color_space = img.channels == 3 ? JCS_RGB : JCS_GRAYSCALE;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, 75, TRUE);
  if (progressive) {
    jpeg_simple_progression(&cinfo);
  }
  jpeg_start_compress(&cinfo, TRUE);
  if (!app1.empty()) {
    jpeg_write_marker(&cinfo, JPEG_APP0 + 1, app1.data(), static_cast<unsigned>(app1.size()));
  }
  const std::size_t stride = static_cast<std::size_t>(img.width) * img.channels;
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<std::uint8_t*>(img.pixels.data() + cinfo.next_scanline * stride);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  bytes out(buf, buf + size);
  std::free(buf);
  return out;
}

// "Exif\0\0", a TIFF header in either byte order, and IFD0 with `entries` entries, the
// last of them the orientation tag.
bytes exif_payload(bool big_endian, int orientation, int entries) {
  bytes b = {'E', 'x', 'i', 'f', 0, 0};
  auto u16 = [&](unsigned v) {
    big_endian ? b.insert(b.end(), {std::uint8_t(v >> 8), std::uint8_t(v)})
               : b.insert(b.end(), {std::uint8_t(v), std::uint8_t(v >> 8)});
  };
  auto u32 = [&](unsigned v) { big_endian ? (u16(v >> 16), u16(v)) : (u16(v), u16(v >> 16)); };
  b.insert(b.end(), big_endian ? std::initializer_list<std::uint8_t>{'M', 'M'}
                               : std::initializer_list<std::uint8_t>{'I', 'I'});
  u16(42);
  u32(8);
  u16(static_cast<unsigned>(entries));
  for (int i = 0; i < entries; ++i) {
    const bool last = i == entries - 1;
    u16(last ? 0x0112 : 0x010f + static_cast<unsigned>(i)); // tag
    u16(3);                                                 // SHORT
    u32(1);                                                 // count
    u16(last ? static_cast<unsigned>(orientation) : 0);
    u16(0);
  }
  u32(0); // no next IFD
  return b;
}

bytes text(const std::string& s) { return bytes(s.begin(), s.end()); }

} // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus directory>\n", argv[0]);
    return 2;
  }
  const fs::path root = argv[1];
  using cuawait::images::encode_jpeg;
  using cuawait::images::encode_png;
  using cuawait::images::encode_pnm;

  // PNG: every colour type, depths 1-16, interlaced or not.
  const fs::path png = root / "png";
  write_variants(png, "gray8.png", encode_png(gradient(7, 5, 1)));
  write_variants(png, "rgb8.png", encode_png(gradient(6, 4, 3), 9));
  write_variants(png, "gray1-interlaced.png", png_file(9, 9, PNG_COLOR_TYPE_GRAY, 1, true));
  write_variants(png, "gray4.png", png_file(5, 3, PNG_COLOR_TYPE_GRAY, 4, false));
  write_variants(png, "gray16.png", png_file(4, 4, PNG_COLOR_TYPE_GRAY, 16, false));
  write_variants(png, "gray-alpha8.png", png_file(4, 3, PNG_COLOR_TYPE_GRAY_ALPHA, 8, false));
  write_variants(png, "rgba16-interlaced.png", png_file(8, 8, PNG_COLOR_TYPE_RGBA, 16, true));
  write_variants(png, "palette2-trns.png", png_file(10, 3, PNG_COLOR_TYPE_PALETTE, 2, false));
  write_variants(png, "palette8.png", png_file(3, 3, PNG_COLOR_TYPE_PALETTE, 8, true));

  // JPEG: baseline gray and colour (the app's encoder), progressive, EXIF-rotated.
  const fs::path jpeg = root / "jpeg";
  write_variants(jpeg, "gray.jpg", encode_jpeg(gradient(16, 8, 1), 80));
  write_variants(jpeg, "rgb.jpg", encode_jpeg(gradient(17, 9, 3), 60));
  write_variants(jpeg, "progressive.jpg", jpeg_file(gradient(20, 12, 3), true, {}));
  write_variants(jpeg, "exif6.jpg", jpeg_file(gradient(9, 5, 3), false, exif_payload(false, 6, 2)));
  write_variants(jpeg, "exif8-be-gray.jpg",
                 jpeg_file(gradient(5, 9, 1), true, exif_payload(true, 8, 1)));

  // PGM/PPM: plain and binary, 8 and 16 bits, comments.
  const fs::path pnm = root / "pnm";
  write_variants(pnm, "gray.pgm", encode_pnm(gradient(5, 4, 1)));
  write_variants(pnm, "rgb.ppm", encode_pnm(gradient(3, 2, 3)));
  write_variants(pnm, "plain.pgm", text("P2\n# a comment\n3 2\n15\n0 15 5\n1 2 3\n"));
  write_variants(pnm, "plain.ppm", text("P3 2 1 255 10 20 30 40 50 60"));
  bytes p5 = text("P5 2 2 65535\n");
  p5.insert(p5.end(), {0xff, 0xff, 0, 0, 0x12, 0x34, 0x80, 0});
  write_variants(pnm, "16bit.pgm", p5);

  // EXIF payloads (what the JPEG decoder passes to exif_orientation).
  const fs::path exif = root / "exif";
  for (int o = 1; o <= 8; o += 3) {
    write_variants(exif, "le-" + std::to_string(o) + ".bin", exif_payload(false, o, 1 + o % 3));
    write_variants(exif, "be-" + std::to_string(o) + ".bin", exif_payload(true, o, 2));
  }

  // decode_image and peek_size see every kind.
  for (const fs::path& dir : {png, jpeg, pnm}) {
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.path().filename().string().rfind("corrupt-", 0) != 0) {
        fs::create_directories(root / "image");
        fs::copy_file(e.path(), root / "image" / e.path().filename(),
                      fs::copy_options::overwrite_existing);
      }
    }
  }
  return 0;
}
