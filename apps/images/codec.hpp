// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Decoding and encoding image files: PNG through libpng, JPEG through libjpeg, PGM/PPM (P2,
//! P3, P5, P6) by hand.

#include "image.hpp"

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <stdexcept>
#include <utility>
#include <vector>

namespace cuawait::images {

//! Reads and decodes the file at `path` (the format is recognised by its signature, not its
//! name). Color images come back as 3 channels, gray ones as 1; 16-bit samples are scaled
//! to 8 bits, alpha is dropped, palettes are expanded, a JPEG's EXIF orientation is applied.
//! @throws image_error with the reason when the file cannot be read, is empty, too large,
//! truncated, corrupt or not a PNG/JPEG/PNM image.
[[nodiscard]] image8 decode_file(const std::filesystem::path& path, const decode_limits& limits);

//! `decode_file`, writing the pixels into the buffer `sink` returns instead of a new
//! vector: a JPEG stored upright is decoded straight into it, other images are decoded
//! first and copied. Returns the shape of what was written.
//! @throws image_error, and whatever `sink` throws
image_shape decode_file_into(const std::filesystem::path& path, const decode_limits& limits,
                             const pixel_sink& sink);

//! `decode_file_into` of an in-memory file. @throws image_error, and whatever `sink` throws
image_shape decode_image_into(std::span<const std::uint8_t> bytes, const decode_limits& limits,
                              const pixel_sink& sink);

//! All the bytes of the file at `path`, checked against `limits.max_file_bytes`.
//! @throws image_error when it cannot be read, is not a regular file, is empty or too large
[[nodiscard]] std::vector<std::uint8_t> read_file_bytes(const std::filesystem::path& path,
                                                        const decode_limits& limits);

//! Decodes an in-memory file; see `decode_file`.
//! @throws image_error
[[nodiscard]] image8 decode_image(std::span<const std::uint8_t> bytes, const decode_limits& limits);

//! Width and height from the header of a PNG, JPEG or PGM/PPM file, without decoding it
//! (for a JPEG: as stored, before the EXIF orientation; the pixel count is the same);
//! nullopt when the file cannot be read or its header is not recognised (decoding will then
//! say why). Used to size an image's share of the memory budget before it is decoded.
[[nodiscard]] std::optional<std::pair<int, int>> peek_size(const std::filesystem::path& path);

//! Width and height from a PGM/PPM header in `bytes`, or nullopt.
[[nodiscard]] std::optional<std::pair<int, int>> peek_pnm_size(std::span<const std::uint8_t> bytes);

//! Decodes PNG bytes with libpng. @throws image_error
[[nodiscard]] image8 decode_png(std::span<const std::uint8_t> bytes, const decode_limits& limits);

//! Decodes JPEG bytes with libjpeg: 8-bit gray (1 channel) or colour (YCbCr or RGB, 3
//! channels), baseline or progressive, then applies the EXIF orientation. The image size
//! is checked against `limits` from the header, before any pixel memory is allocated.
//! Corrupt or truncated data is an error, not a warning.
//! @throws image_error
[[nodiscard]] image8 decode_jpeg(std::span<const std::uint8_t> bytes, const decode_limits& limits);

//! `decode_jpeg` into the buffer `sink` returns (see `decode_image_into`): straight into it
//! when the image is stored upright (EXIF orientation 1), else through a temporary image.
//! @throws image_error, and whatever `sink` throws
image_shape decode_jpeg_into(std::span<const std::uint8_t> bytes, const decode_limits& limits,
                             const pixel_sink& sink);

//! Decodes PGM/PPM bytes (P2, P3, P5, P6; maxval up to 65535). @throws image_error
[[nodiscard]] image8 decode_pnm(std::span<const std::uint8_t> bytes, const decode_limits& limits);

//! Encodes `img` (1 or 3 channels) as PNG, without row filters. `level` is the zlib level
//! (0-9); the pipeline uses a fast one because its edge images are mostly flat.
//! @throws std::runtime_error when libpng fails (out of memory)
[[nodiscard]] std::vector<std::uint8_t> encode_png(const image8& img, int level = 1);

//! `encode_png` of `width` x `height` pixels of `channels` (1 or 3) bytes, rows packed, in
//! `pixels` (at least width * height * channels bytes; read, not copied).
//! @throws std::runtime_error when libpng fails; std::invalid_argument when `pixels` is short
[[nodiscard]] std::vector<std::uint8_t> encode_png(std::span<const std::uint8_t> pixels, int width,
                                                   int height, int channels, int level = 1);

//! Thrown by `encode_png` when its `stop` flag was set: the encoding was given up part way.
class encode_interrupted : public std::runtime_error {
public:
  encode_interrupted() : std::runtime_error("encoding interrupted") {}
};

//! `encode_png` that gives up once `*stop` is set, checked every 32 rows (a 4-megapixel
//! image's encoding takes up to about 100 ms). @throws encode_interrupted then
[[nodiscard]] std::vector<std::uint8_t> encode_png(std::span<const std::uint8_t> pixels, int width,
                                                   int height, int channels, int level,
                                                   const std::atomic<bool>* stop);

//! Encodes `width` x `height` pixels of `channels` (1 or 3) bytes, rows packed, in `pixels`
//! as a baseline JPEG of `quality` (1-100) with libjpeg.
//! @throws std::invalid_argument for a bad size, channel count or quality, or short
//! `pixels`; std::runtime_error when libjpeg fails
[[nodiscard]] std::vector<std::uint8_t> encode_jpeg(std::span<const std::uint8_t> pixels, int width,
                                                    int height, int channels, int quality = 90);

//! `encode_jpeg` of `img`.
//! @throws std::invalid_argument, std::runtime_error
[[nodiscard]] std::vector<std::uint8_t> encode_jpeg(const image8& img, int quality = 90);

//! Encodes `img` as binary PGM (1 channel) or PPM (3 channels).
[[nodiscard]] std::vector<std::uint8_t> encode_pnm(const image8& img);

} // namespace cuawait::images
