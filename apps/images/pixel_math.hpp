// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The per-pixel arithmetic of every pipeline stage, shared verbatim by the CPU reference
//! (stages.cpp) and the CUDA kernels (cuda/kernels.cu). Sharing the functions fixes the
//! order of every floating-point operation, and both sides are compiled without FMA
//! contraction (-ffp-contract=off, nvcc --fmad=false), so the GPU reproduces the CPU's
//! blur, gradients, magnitudes, orientation bins and edge bytes bit for bit; only the
//! histogram sums differ, by the order in which the GPU's atomics add them up.
//!
//! The stages, for an image of W x H pixels with values in [0, 1]:
//! - gray: a gray byte v becomes v / 255, an RGB pixel (0.299 r + 0.587 g + 0.114 b) / 255.
//! - blur: 5x5 separable binomial kernel (1 4 6 4 1)/16 in x, then in y; borders clamp
//!   (a pixel outside the image takes the value of the nearest pixel inside).
//! - gradients: 3x3 Sobel on the blurred image, borders clamp, not normalised:
//!   gx = (p[y-1][x+1] - p[y-1][x-1]) + 2 (p[y][x+1] - p[y][x-1]) + (p[y+1][x+1] - p[y+1][x-1]),
//!   gy likewise down the columns; magnitude = sqrt(gx^2 + gy^2) (at most 4 sqrt 2).
//! - histogram of oriented gradients: the image is split into 4 x 4 cells (pixel (x, y) is
//!   in cell (floor(4 x / W), floor(4 y / H))); each pixel adds its magnitude to one of 9
//!   unsigned orientation bins of 20 degrees each ([0, 20), [20, 40), ... [160, 180)) of
//!   its cell; no interpolation, no normalisation. The feature vector is the 144 sums,
//!   cell-major in row order (cell (cx, cy) at index (cy * 4 + cx) * 9 + bin).
//! - edge image: byte = min(255, floor(magnitude * 255 / 4 + 0.5)).
//!
//! This header includes no CUDA header: `CUAWAIT_IMAGES_HD` expands to `__host__ __device__`
//! only when nvcc compiles it.

#include <cstdint>

#if defined(__CUDACC__)
#define CUAWAIT_IMAGES_HD __host__ __device__ __forceinline__
#else
#define CUAWAIT_IMAGES_HD inline
#endif

namespace cuawait::images {

//! Cells per axis of the histogram of oriented gradients.
inline constexpr int hog_cells = 4;
//! Unsigned orientation bins per cell (20 degrees each).
inline constexpr int hog_bins = 9;
//! Length of the feature vector.
inline constexpr int feature_count = hog_cells * hog_cells * hog_bins;
//! Radius of the blur kernel (5 taps).
inline constexpr int blur_radius = 2;

//! The grayscale value in [0, 1] of a gray byte: v / 255 (correctly rounded division on
//! both sides).
CUAWAIT_IMAGES_HD float gray_of_byte(std::uint8_t v) { return static_cast<float>(v) / 255.0f; }

//! The grayscale value in [0, 1] of an RGB pixel: (0.299 r + 0.587 g + 0.114 b) / 255, the
//! products added left to right.
CUAWAIT_IMAGES_HD float gray_of_rgb(std::uint8_t r, std::uint8_t g, std::uint8_t b) {
  const float v = 0.299f * static_cast<float>(r) + 0.587f * static_cast<float>(g) +
                  0.114f * static_cast<float>(b);
  return v / 255.0f;
}

//! Where pixel (`ox`, `oy`) of an image shown with EXIF orientation `orientation` lies in
//! the stored `w` x `h` image: 1 as stored, 2 mirrored left-right, 3 rotated 180°, 4
//! mirrored top-bottom, 5 transposed, 6 rotated 90° clockwise, 7 transversed, 8 rotated 90°
//! counter-clockwise (5-8 swap width and height). Any other value means "as stored". The
//! CPU (exif.cpp) and the GPU (the gray conversion of GPU-decoded JPEGs) share it.
CUAWAIT_IMAGES_HD void oriented_source(int ox, int oy, int w, int h, int orientation, int& sx,
                                       int& sy) {
  switch (orientation) {
  case 2:
    sx = w - 1 - ox, sy = oy;
    break;
  case 3:
    sx = w - 1 - ox, sy = h - 1 - oy;
    break;
  case 4:
    sx = ox, sy = h - 1 - oy;
    break;
  case 5:
    sx = oy, sy = ox;
    break;
  case 6:
    sx = oy, sy = h - 1 - ox;
    break;
  case 7:
    sx = w - 1 - oy, sy = h - 1 - ox;
    break;
  case 8:
    sx = w - 1 - oy, sy = ox;
    break;
  default:
    sx = ox, sy = oy;
    break;
  }
}

//! Clamps `v` into [0, n - 1]: the border rule of every stage.
CUAWAIT_IMAGES_HD int clamp_index(int v, int n) { return v < 0 ? 0 : (v >= n ? n - 1 : v); }

//! One 5-tap binomial pass over `line`, a line of `n` values with stride `stride`, at `i`.
//! The weights 1/16, 4/16, 6/16 are exact in binary, so a single bright pixel of 1 blurs
//! into exact products of them.
CUAWAIT_IMAGES_HD float blur_tap(const float* line, int i, int n, int stride) {
  float acc = 0.0625f * line[clamp_index(i - 2, n) * stride];
  acc = acc + 0.25f * line[clamp_index(i - 1, n) * stride];
  acc = acc + 0.375f * line[i * stride];
  acc = acc + 0.25f * line[clamp_index(i + 1, n) * stride];
  acc = acc + 0.0625f * line[clamp_index(i + 2, n) * stride];
  return acc;
}

//! Sobel gradients of `img` (w x h, row-major) at (x, y), borders clamped.
CUAWAIT_IMAGES_HD void sobel_at(const float* img, int w, int h, int x, int y, float& gx,
                                float& gy) {
  const int xm = clamp_index(x - 1, w);
  const int xp = clamp_index(x + 1, w);
  const float* up = img + static_cast<long long>(clamp_index(y - 1, h)) * w;
  const float* mid = img + static_cast<long long>(y) * w;
  const float* down = img + static_cast<long long>(clamp_index(y + 1, h)) * w;
  gx = (up[xp] - up[xm]) + 2.0f * (mid[xp] - mid[xm]) + (down[xp] - down[xm]);
  gy = (down[xm] - up[xm]) + 2.0f * (down[x] - up[x]) + (down[xp] - up[xp]);
}

//! Gradient magnitude, correctly rounded on both sides (IEEE sqrt).
CUAWAIT_IMAGES_HD float magnitude(float gx, float gy) {
  const float s = gx * gx + gy * gy;
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(s);
#else
  return __builtin_sqrtf(s);
#endif
}

//! The unsigned orientation bin (0..8) of gradient (gx, gy). The vector is folded into the
//! upper half plane, then compared with each bin boundary by the sign of a cross product
//! computed in double: the float products are exact in double, so the sign (and the bin)
//! does not depend on rounding, and no atan2 (whose last bits differ between libm and
//! CUDA) is involved.
CUAWAIT_IMAGES_HD int orientation_bin(float gx, float gy) {
  if (gy < 0.0f || (gy == 0.0f && gx < 0.0f)) {
    gx = -gx;
    gy = -gy;
  }
  // cos and sin of 20, 40, ..., 160 degrees, rounded to float.
  const float c[8] = {0.9396926f,   0.7660444f, 0.5f,        0.17364818f,
                      -0.17364818f, -0.5f,      -0.7660444f, -0.9396926f};
  const float s[8] = {0.34202015f, 0.64278764f, 0.8660254f,  0.9848077f,
                      0.9848077f,  0.8660254f,  0.64278764f, 0.34202015f};
  int bin = 0;
  for (int k = 0; k < 8; ++k) {
    const double cross = static_cast<double>(c[k]) * gy - static_cast<double>(s[k]) * gx;
    bin += cross >= 0.0 ? 1 : 0;
  }
  return bin;
}

//! The cell (0..hog_cells-1) along an axis of length `n` that coordinate `i` falls in:
//! floor(i * 4 / n).
CUAWAIT_IMAGES_HD int cell_of(int i, int n) {
  return static_cast<int>(static_cast<long long>(i) * hog_cells / n);
}

//! Index of (cell x, cell y, bin) in the feature vector.
CUAWAIT_IMAGES_HD int feature_index(int cx, int cy, int bin) {
  return (cy * hog_cells + cx) * hog_bins + bin;
}

//! The edge byte of a gradient magnitude.
CUAWAIT_IMAGES_HD std::uint8_t edge_byte(float mag) {
  const float v = mag * (255.0f / 4.0f) + 0.5f;
  return v >= 255.0f ? std::uint8_t{255} : static_cast<std::uint8_t>(static_cast<int>(v));
}

} // namespace cuawait::images
