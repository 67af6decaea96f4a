// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The EXIF orientation of a JPEG: read from an APP1 "Exif" segment (bounds-checked, never
//! trusting an offset or a count from the file), and applied to a decoded image.

#include "image.hpp"

#include <cstdint>
#include <span>

namespace cuawait::images {

//! The orientation tag (0x0112) of IFD0 in the payload of an APP1 segment (the bytes after
//! the segment length: "Exif\0\0" then a TIFF header). Returns 1 to 8, or 1 (as stored)
//! when the payload is not Exif, is malformed or truncated, has no orientation tag, or the
//! tag's value is out of range: a broken Exif block never makes an image unreadable.
[[nodiscard]] int exif_orientation(std::span<const std::uint8_t> app1_payload) noexcept;

//! The EXIF orientation of the JPEG file in `jpeg` (all its bytes), found without decoding
//! it: the first APP1 "Exif" segment before the first scan, read by `exif_orientation`.
//! Returns 1 when the file has none or its segments are malformed, as the CPU decoder then
//! does.
[[nodiscard]] int jpeg_orientation(std::span<const std::uint8_t> jpeg) noexcept;

//! Returns `img` transformed for display according to EXIF orientation `orientation`:
//! 1 as stored, 2 mirrored left-right, 3 rotated 180°, 4 mirrored top-bottom, 5 transposed,
//! 6 rotated 90° clockwise, 7 transversed, 8 rotated 90° counter-clockwise. Orientations
//! 5-8 swap width and height (see `oriented_source` in pixel_math.hpp). Any other value
//! returns the image unchanged.
//! @throws std::bad_alloc
[[nodiscard]] image8 apply_orientation(image8 img, int orientation);

} // namespace cuawait::images
