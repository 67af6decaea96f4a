// SPDX-License-Identifier: Apache-2.0
// PNG through libpng. libpng reports errors by longjmp; each setjmp frame below holds only
// trivially destructible locals, and everything with a destructor lives in the caller, so
// the jump skips no destructor.

#include "codec.hpp"

#include <png.h>

#include <zlib.h>

#include <csetjmp>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>

namespace cuawait::images {
namespace {

struct png_io_state {
  std::span<const std::uint8_t> input;
  std::size_t offset = 0;
  std::vector<std::uint8_t>* output = nullptr;
  char message[256] = {};
  bool own_message = false; // the message is the whole reason, no "corrupt PNG" prefix
};

png_io_state& state_of(png_structp png) {
  return *static_cast<png_io_state*>(png_get_error_ptr(png));
}

void on_error(png_structp png, png_const_charp msg) {
  png_io_state& st = state_of(png);
  if (st.message[0] == '\0') {
    std::snprintf(st.message, sizeof st.message, "%s", msg);
  }
  png_longjmp(png, 1);
}

void on_warning(png_structp, png_const_charp) {}

void on_read(png_structp png, png_bytep out, png_size_t n) {
  auto& st = *static_cast<png_io_state*>(png_get_io_ptr(png));
  if (st.input.size() - st.offset < n) {
    std::snprintf(st.message, sizeof st.message, "truncated PNG data (file ends after %zu bytes)",
                  st.input.size());
    st.own_message = true;
    png_longjmp(png, 1);
  }
  std::memcpy(out, st.input.data() + st.offset, n);
  st.offset += n;
}

void on_write(png_structp png, png_bytep data, png_size_t n) {
  auto& st = *static_cast<png_io_state*>(png_get_io_ptr(png));
  st.output->insert(st.output->end(), data, data + n);
}

void on_flush(png_structp) {}

// Reads the header, checks the limits, sets up 8-bit gray or RGB output. Returns false
// when libpng failed (the reason is in the state's message).
bool read_header(png_structp png, png_infop info, const decode_limits& limits, image8& out) {
  if (setjmp(png_jmpbuf(png))) {
    return false;
  }
  png_read_info(png, info);
  const png_uint_32 w = png_get_image_width(png, info);
  const png_uint_32 h = png_get_image_height(png, info);
  if (static_cast<std::uint64_t>(w) * h > limits.max_pixels) {
    std::snprintf(state_of(png).message, sizeof state_of(png).message,
                  "image too large: %ux%u pixels, the limit is %llu pixels", w, h,
                  static_cast<unsigned long long>(limits.max_pixels));
    state_of(png).own_message = true;
    return false;
  }
  const int color = png_get_color_type(png, info);
  png_set_strip_16(png);
  png_set_strip_alpha(png);
  png_set_packing(png);
  if (color == PNG_COLOR_TYPE_PALETTE) {
    png_set_palette_to_rgb(png);
  }
  if (color == PNG_COLOR_TYPE_GRAY && png_get_bit_depth(png, info) < 8) {
    png_set_expand_gray_1_2_4_to_8(png);
  }
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  out.width = static_cast<int>(w);
  out.height = static_cast<int>(h);
  out.channels = png_get_channels(png, info);
  return true;
}

bool read_rows(png_structp png, png_infop info, png_bytepp rows) {
  if (setjmp(png_jmpbuf(png))) {
    return false;
  }
  png_read_image(png, rows);
  png_read_end(png, info);
  return true;
}

// zlib's run-length strategy (matches of distance one only) by default: on the edge images
// of 10,000 photos (H200 host, 16 threads) it made the whole GPU-decode run 6 % faster and
// the PNGs 0.7 % smaller than zlib's default strategy at the same level.
// CUAWAIT_IMAGES_PNG_STRATEGY=default goes back to zlib's default strategy.
bool rle_strategy() noexcept {
  static const bool rle = [] {
    const char* v = std::getenv("CUAWAIT_IMAGES_PNG_STRATEGY");
    return v == nullptr || std::string_view(v) != "default";
  }();
  return rle;
}

enum class write_outcome { written, failed, interrupted };

write_outcome write_all(png_structp png, png_infop info, int width, int height, int channels,
                        png_bytepp rows, int level, const std::atomic<bool>* stop) {
  if (setjmp(png_jmpbuf(png))) {
    return write_outcome::failed;
  }
  png_set_compression_level(png, level);
  if (rle_strategy()) {
    png_set_compression_strategy(png, Z_RLE);
  }
  // No row filter: libpng's default tries all five filters on every row and keeps the
  // best, which costs more than the compression itself; the edge images are mostly flat
  // and compress about as well unfiltered (measured: 3-4x faster, sizes within 10%).
  png_set_filter(png, PNG_FILTER_TYPE_BASE, PNG_FILTER_NONE);
  png_set_IHDR(png, info, static_cast<png_uint_32>(width), static_cast<png_uint_32>(height), 8,
               channels == 3 ? PNG_COLOR_TYPE_RGB : PNG_COLOR_TYPE_GRAY, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  // Row by row (what png_write_image does without interlacing), so that a stop request
  // ends a large image's encoding within a band of rows.
  for (int y = 0; y < height; ++y) {
    if (stop != nullptr && y % 32 == 0 && stop->load(std::memory_order_relaxed)) {
      return write_outcome::interrupted;
    }
    png_write_row(png, rows[y]);
  }
  png_write_end(png, nullptr);
  return write_outcome::written;
}

} // namespace

image8 decode_png(std::span<const std::uint8_t> bytes, const decode_limits& limits) {
  // Every chunk must fit in the file: libpng allocates a chunk's declared length before it
  // reads it (a 100-byte file declaring a 32 MiB chunk made it allocate 32 MiB; found by
  // fuzzing).
  for (std::size_t at = 8; at + 8 <= bytes.size();) {
    const std::uint64_t length = (std::uint64_t{bytes[at]} << 24) | (bytes[at + 1] << 16) |
                                 (bytes[at + 2] << 8) | bytes[at + 3];
    if (length > bytes.size() - at - 8) {
      throw image_error("corrupt PNG: a chunk of " + std::to_string(length) +
                        " bytes runs past the end of the file");
    }
    at += 12 + static_cast<std::size_t>(length);
  }
  png_io_state st;
  st.input = bytes;
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &st, on_error, on_warning);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  if (info == nullptr) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    throw image_error("libpng: out of memory");
  }
  png_set_read_fn(png, &st, on_read);
  png_set_user_limits(png, 0x7fffffff, 0x7fffffff);
  image8 out;
  std::vector<png_bytep> rows;
  bool ok = read_header(png, info, limits, out);
  if (ok) {
    // Grayscale stays one channel; RGB (with the alpha stripped) three.
    if (out.channels != 1 && out.channels != 3) {
      std::snprintf(st.message, sizeof st.message, "unsupported PNG layout: %d channels",
                    out.channels);
      ok = false;
    }
  }
  if (ok) {
    const std::size_t stride = static_cast<std::size_t>(out.width) * out.channels;
    out.pixels.resize(stride * static_cast<std::size_t>(out.height));
    rows.resize(static_cast<std::size_t>(out.height));
    for (std::size_t y = 0; y < rows.size(); ++y) {
      rows[y] = out.pixels.data() + y * stride;
    }
    ok = read_rows(png, info, rows.data());
  }
  png_destroy_read_struct(&png, &info, nullptr);
  if (!ok) {
    throw image_error(st.own_message ? std::string(st.message)
                                     : std::string("corrupt PNG: ") + st.message);
  }
  return out;
}

std::vector<std::uint8_t> encode_png(const image8& img, int level) {
  return encode_png(img.pixels, img.width, img.height, img.channels, level);
}

std::vector<std::uint8_t> encode_png(std::span<const std::uint8_t> pixels, int width, int height,
                                     int channels, int level) {
  return encode_png(pixels, width, height, channels, level, nullptr);
}

std::vector<std::uint8_t> encode_png(std::span<const std::uint8_t> pixels, int width, int height,
                                     int channels, int level, const std::atomic<bool>* stop) {
  const std::size_t stride = static_cast<std::size_t>(width) * static_cast<std::size_t>(channels);
  if (width <= 0 || height <= 0 || (channels != 1 && channels != 3) ||
      pixels.size() < stride * static_cast<std::size_t>(height)) {
    throw std::invalid_argument("encode_png: bad size, channels or too few pixels");
  }
  std::vector<std::uint8_t> result;
  png_io_state st;
  st.output = &result;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &st, on_error, on_warning);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  if (info == nullptr) {
    png_destroy_write_struct(&png, nullptr);
    throw std::runtime_error("libpng: out of memory");
  }
  png_set_write_fn(png, &st, on_write, on_flush);
  std::vector<png_bytep> rows(static_cast<std::size_t>(height));
  for (std::size_t y = 0; y < rows.size(); ++y) {
    rows[y] = const_cast<png_bytep>(pixels.data() + y * stride); // libpng only reads them
  }
  const write_outcome outcome =
      write_all(png, info, width, height, channels, rows.data(), level, stop);
  png_destroy_write_struct(&png, &info);
  if (outcome == write_outcome::interrupted) {
    throw encode_interrupted();
  }
  if (outcome == write_outcome::failed) {
    throw std::runtime_error(std::string("PNG encoding failed: ") + st.message);
  }
  return result;
}

} // namespace cuawait::images
