// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The default batch: varied synthetic images (gradients, shapes, noise, text-like glyph
//! rows, checkerboards), fully determined by a seed and an index, so runs are reproducible
//! on every platform (no std:: distributions, whose output is implementation-defined).

#include "image.hpp"

#include <cstdint>
#include <string>

namespace cuawait::images {

//! The kinds of synthetic image, in the order the batch cycles through them.
enum class synthetic_kind : std::uint8_t { gradient, shapes, noise, text, checker };

//! Number of synthetic kinds.
inline constexpr int synthetic_kind_count = 5;

//! The kind of the `index`-th image of a batch.
[[nodiscard]] synthetic_kind synthetic_kind_of(int index) noexcept;

//! Channels of the `index`-th image of a batch: 3 (RGB) or 1 (gray).
[[nodiscard]] int synthetic_channels(int index) noexcept;

//! A short name for `kind` ("gradient", "shapes"...).
[[nodiscard]] const char* to_string(synthetic_kind kind) noexcept;

//! The name the `index`-th synthetic image is known by in outputs, e.g. "synthetic-0003-text".
[[nodiscard]] std::string synthetic_name(int index);

//! Generates the `index`-th image of the batch for `seed`: width x height, RGB or gray
//! depending on the kind. Same arguments, same bytes.
//! @throws std::invalid_argument when width or height is not positive
[[nodiscard]] image8 make_synthetic(std::uint64_t seed, int index, int width, int height);

} // namespace cuawait::images
