// SPDX-License-Identifier: Apache-2.0
// JPEG through the libjpeg API (libjpeg-turbo). libjpeg's default error handler calls
// exit(); ours longjmps back to a setjmp in a small helper whose frame holds only trivially
// destructible locals, as png.cpp does, so the jump skips no destructor. The
// decompression struct is destroyed by a guard in the caller. Warnings that mean corrupt
// or missing data ("Premature end of JPEG file") are errors too: the pixels would be
// partly made up.

#include "codec.hpp"
#include "exif.hpp"

#include <cstdio> // jpeglib.h needs FILE
#include <jerror.h>
#include <jpeglib.h>

#include <csetjmp>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace cuawait::images {
namespace {

// More scans than any real progressive JPEG has (they have about 10); a crafted file with
// thousands of tiny scans would otherwise take minutes to decode.
constexpr int max_scans = 500;

struct jpeg_state {
  jpeg_error_mgr mgr; // first: cinfo->err points here and is cast back to the state
  jpeg_progress_mgr progress;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX + 64] = {};
  bool own_message = false; // the message is the whole reason, no "corrupt JPEG" prefix
};

jpeg_state& state_of(j_common_ptr cinfo) { return *reinterpret_cast<jpeg_state*>(cinfo->err); }

[[noreturn]] void on_error_exit(j_common_ptr cinfo) {
  jpeg_state& st = state_of(cinfo);
  if (st.message[0] == '\0') {
    (*cinfo->err->format_message)(cinfo, st.message);
  }
  std::longjmp(st.jump, 1);
}

// Warnings about the data itself; the others (an unknown JFIF revision, an Adobe transform
// code, a bad ICC profile) concern metadata and leave the pixels intact.
bool is_data_warning(int code) {
  switch (code) {
  case JWRN_JPEG_EOF:
  case JWRN_HIT_MARKER:
  case JWRN_HUFF_BAD_CODE:
  case JWRN_MUST_RESYNC:
  case JWRN_EXTRANEOUS_DATA:
  case JWRN_NOT_SEQUENTIAL:
  case JWRN_BOGUS_PROGRESSION:
    return true;
  default:
    return false;
  }
}

void on_emit_message(j_common_ptr cinfo, int level) {
  if (level < 0 && is_data_warning(cinfo->err->msg_code)) {
    on_error_exit(cinfo);
  }
}

void on_progress(j_common_ptr cinfo) {
  if (cinfo->is_decompressor != 0 &&
      reinterpret_cast<j_decompress_ptr>(cinfo)->input_scan_number > max_scans) {
    jpeg_state& st = state_of(cinfo);
    std::snprintf(st.message, sizeof st.message, "JPEG with more than %d scans refused", max_scans);
    st.own_message = true;
    std::longjmp(st.jump, 1);
  }
}

template <class Info>
void init_state(jpeg_state& st, Info& cinfo) {
  cinfo.err = jpeg_std_error(&st.mgr);
  st.mgr.error_exit = on_error_exit;
  st.mgr.emit_message = on_emit_message;
}

// Creates the decompressor over `bytes`, keeps the APP1 segments (Exif) and reads the header.
bool read_header(jpeg_decompress_struct& cinfo, jpeg_state& st,
                 std::span<const std::uint8_t> bytes) {
  if (setjmp(st.jump)) {
    return false;
  }
  jpeg_create_decompress(&cinfo);
  st.progress.progress_monitor = on_progress;
  cinfo.progress = &st.progress;
  jpeg_mem_src(&cinfo, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_save_markers(&cinfo, JPEG_APP0 + 1, 0xffff);
  jpeg_read_header(&cinfo, TRUE);
  return true;
}

bool start(jpeg_decompress_struct& cinfo, jpeg_state& st) {
  if (setjmp(st.jump)) {
    return false;
  }
  jpeg_start_decompress(&cinfo);
  return true;
}

bool read_rows(jpeg_decompress_struct& cinfo, jpeg_state& st, std::uint8_t* pixels,
               std::size_t stride) {
  if (setjmp(st.jump)) {
    return false;
  }
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = pixels + std::size_t{cinfo.output_scanline} * stride;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  return true;
}

bool compress(jpeg_compress_struct& cinfo, jpeg_state& st, const std::uint8_t* pixels, int width,
              int height, int channels, int quality, unsigned char** out, unsigned long* size) {
  if (setjmp(st.jump)) {
    return false;
  }
  jpeg_create_compress(&cinfo);
  jpeg_mem_dest(&cinfo, out, size);
  cinfo.image_width = static_cast<JDIMENSION>(width);
  cinfo.image_height = static_cast<JDIMENSION>(height);
  cinfo.input_components = channels;
  cinfo.in_color_space = channels == 3 ? JCS_RGB : JCS_GRAYSCALE;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  const std::size_t stride = static_cast<std::size_t>(width) * static_cast<std::size_t>(channels);
  while (cinfo.next_scanline < cinfo.image_height) {
    // libjpeg's row type is not const; it only reads the rows.
    JSAMPROW row = const_cast<std::uint8_t*>(pixels + std::size_t{cinfo.next_scanline} * stride);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  return true;
}

// The orientation from the first Exif APP1 segment read with the header.
int orientation_of(const jpeg_decompress_struct& cinfo) {
  for (jpeg_saved_marker_ptr m = cinfo.marker_list; m != nullptr; m = m->next) {
    if (m->marker == JPEG_APP0 + 1 && m->data_length >= 6 &&
        std::memcmp(m->data, "Exif\0\0", 6) == 0) {
      return exif_orientation(std::span<const std::uint8_t>(m->data, m->data_length));
    }
  }
  return 1;
}

struct decompress_guard {
  jpeg_decompress_struct& cinfo;
  ~decompress_guard() { jpeg_destroy_decompress(&cinfo); }
};

[[noreturn]] void fail(const jpeg_state& st) {
  throw image_error(st.own_message ? std::string(st.message)
                                   : std::string("corrupt JPEG: ") + st.message);
}

} // namespace

image_shape decode_jpeg_into(std::span<const std::uint8_t> bytes, const decode_limits& limits,
                             const pixel_sink& sink) {
  jpeg_state st;
  jpeg_decompress_struct cinfo{};
  init_state(st, cinfo);
  const decompress_guard guard{cinfo};
  if (!read_header(cinfo, st, bytes)) {
    fail(st);
  }
  const std::uint64_t pixels = std::uint64_t{cinfo.image_width} * cinfo.image_height;
  if (pixels > limits.max_pixels) {
    throw image_error("image too large: " + std::to_string(cinfo.image_width) + "x" +
                      std::to_string(cinfo.image_height) + " pixels, the limit is " +
                      std::to_string(limits.max_pixels) + " pixels");
  }
  switch (cinfo.jpeg_color_space) {
  case JCS_GRAYSCALE:
    cinfo.out_color_space = JCS_GRAYSCALE;
    break;
  case JCS_YCbCr:
  case JCS_RGB:
    cinfo.out_color_space = JCS_RGB;
    break;
  default:
    throw image_error("unsupported JPEG colour space (CMYK or YCCK): only gray and colour "
                      "JPEGs are read");
  }
  // The saved markers live until jpeg_finish_decompress: read the orientation now.
  const int orientation = orientation_of(cinfo);
  if (!start(cinfo, st)) {
    fail(st);
  }
  const image_shape stored{static_cast<int>(cinfo.output_width),
                           static_cast<int>(cinfo.output_height), cinfo.output_components};
  if (stored.channels != 1 && stored.channels != 3) {
    throw image_error("unsupported JPEG layout: " + std::to_string(stored.channels) + " channels");
  }
  const std::size_t stride = static_cast<std::size_t>(stored.width) * stored.channels;
  if (orientation < 2 || orientation > 8) {
    // Upright: straight into the caller's buffer, no copy.
    const std::span<std::uint8_t> out = sink(stored);
    if (out.size() < stored.bytes()) {
      throw std::invalid_argument("decode_jpeg_into: the sink's buffer is too small");
    }
    if (!read_rows(cinfo, st, out.data(), stride)) {
      fail(st);
    }
    return stored;
  }
  image8 raw{stored.width, stored.height, stored.channels,
             std::vector<std::uint8_t>(stored.bytes())};
  if (!read_rows(cinfo, st, raw.pixels.data(), stride)) {
    fail(st);
  }
  const image8 shown = apply_orientation(std::move(raw), orientation);
  const image_shape shape{shown.width, shown.height, shown.channels};
  const std::span<std::uint8_t> out = sink(shape);
  if (out.size() < shape.bytes()) {
    throw std::invalid_argument("decode_jpeg_into: the sink's buffer is too small");
  }
  std::memcpy(out.data(), shown.pixels.data(), shape.bytes());
  return shape;
}

image8 decode_jpeg(std::span<const std::uint8_t> bytes, const decode_limits& limits) {
  image8 out;
  const image_shape shape = decode_jpeg_into(bytes, limits, [&](const image_shape& s) {
    out.pixels.resize(s.bytes());
    return std::span<std::uint8_t>(out.pixels);
  });
  out.width = shape.width;
  out.height = shape.height;
  out.channels = shape.channels;
  return out;
}

std::vector<std::uint8_t> encode_jpeg(std::span<const std::uint8_t> pixels, int width, int height,
                                      int channels, int quality) {
  const std::size_t stride = static_cast<std::size_t>(width) * static_cast<std::size_t>(channels);
  if (width <= 0 || height <= 0 || width > 65500 || height > 65500 ||
      (channels != 1 && channels != 3) ||
      pixels.size() < stride * static_cast<std::size_t>(height) || quality < 1 || quality > 100) {
    throw std::invalid_argument("encode_jpeg: bad size, channels, quality or too few pixels");
  }
  jpeg_state st;
  jpeg_compress_struct cinfo{};
  init_state(st, cinfo);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  const bool ok =
      compress(cinfo, st, pixels.data(), width, height, channels, quality, &buffer, &size);
  jpeg_destroy_compress(&cinfo);
  std::vector<std::uint8_t> result;
  if (ok) {
    result.assign(buffer, buffer + size);
  }
  std::free(buffer); // jpeg_mem_dest's buffer is the caller's, even after an error
  if (!ok) {
    throw std::runtime_error(std::string("JPEG encoding failed: ") + st.message);
  }
  return result;
}

std::vector<std::uint8_t> encode_jpeg(const image8& img, int quality) {
  return encode_jpeg(img.pixels, img.width, img.height, img.channels, quality);
}

} // namespace cuawait::images
