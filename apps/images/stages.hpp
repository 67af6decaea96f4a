// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The CPU reference implementation of every pipeline stage (see pixel_math.hpp for the
//! exact definitions). The CUDA backend must reproduce these results; the tests compare.

#include "image.hpp"
#include "pixel_math.hpp"

#include <array>
#include <cstdint>
#include <span>
#include <vector>

namespace cuawait::images {

//! The 144 histogram sums of an image (see pixel_math.hpp for the layout).
using feature_vector = std::array<float, feature_count>;

//! What the pipeline computes for one image, as a view into buffers owned elsewhere (an
//! engine's, or pinned host memory the GPU copied into), so the postprocess reads the
//! results where they landed instead of copying a megabyte per image first. Valid while
//! those buffers are.
struct result_view {
  int width = 0;
  int height = 0;
  std::span<const std::uint8_t> edges; //!< width * height edge bytes
  feature_vector features{};
};

//! What the pipeline computes for one image, owning its edge bytes.
struct image_result {
  int width = 0;
  int height = 0;
  std::vector<std::uint8_t> edges; //!< width * height edge bytes
  feature_vector features{};

  //! A view of this result, valid while it lives and is not modified.
  [[nodiscard]] result_view view() const noexcept { return {width, height, edges, features}; }
};

//! Sobel gradients and magnitudes of an image, one value per pixel (for tests and tools).
struct gradient_field {
  std::vector<float> gx;
  std::vector<float> gy;
  std::vector<float> magnitude;
};

//! Converts to grayscale in [0, 1]: gray bytes v / 255; RGB (0.299 r + 0.587 g + 0.114 b) / 255.
//! Writes `img.pixel_count()` floats to `out`.
void to_gray(const image8& img, std::span<float> out);

//! `to_gray` of the 8-bit pixels `pixels` of `shape` (1 or 3 channels) into `out`
//! (`shape.pixel_count()` floats).
//! @throws std::invalid_argument when a buffer is too small or the channel count is not 1 or 3
void to_gray(const image_shape& shape, std::span<const std::uint8_t> pixels, std::span<float> out);

//! `to_gray` into a new image.
[[nodiscard]] gray_image to_gray(const image8& img);

//! The 5x5 binomial blur of `in` (w x h) into `out`, using `tmp` (w x h) for the horizontal
//! pass. `in` and `out` may be the same buffer; `tmp` must differ from both.
void blur(const float* in, float* tmp, float* out, int w, int h);

//! The blur into a new image.
[[nodiscard]] gray_image blur(const gray_image& in);

//! Sobel gradients of `img` (no blur applied here).
[[nodiscard]] gradient_field gradients(const gray_image& img);

//! The fused last GPU stage: gradients of `blurred`, the edge bytes and the histogram.
//! `edges` receives w * h bytes; `hist` is overwritten.
void edges_and_histogram(const float* blurred, int w, int h, std::uint8_t* edges,
                         std::array<double, feature_count>& hist);

//! Rounds histogram sums to the published feature vector.
[[nodiscard]] feature_vector to_features(const std::array<double, feature_count>& hist);

//! Runs blur, gradients, histogram and edge image on a preprocessed image.
[[nodiscard]] image_result process_cpu(const gray_image& img);

} // namespace cuawait::images
