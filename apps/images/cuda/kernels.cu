// SPDX-License-Identifier: Apache-2.0
// Compiled with --fmad=false: see pixel_math.hpp.

#include "kernels.cuh"

#include "pixel_math.hpp"

#include <cuawait/cuda/error.hpp>

namespace cuawait::images::gpu {
namespace {

constexpr int tile = 16;

dim3 grid_for(int w, int h) { return dim3((w + tile - 1) / tile, (h + tile - 1) / tile); }

// One thread per output pixel; reads the source pixel the orientation maps it to.
__global__ void gray_from_bytes(const std::uint8_t* src, int sw, int sh, int channels,
                                int orientation, float* out, int ow, int oh) {
  const int ox = blockIdx.x * tile + threadIdx.x;
  const int oy = blockIdx.y * tile + threadIdx.y;
  if (ox >= ow || oy >= oh) {
    return;
  }
  int sx = 0;
  int sy = 0;
  oriented_source(ox, oy, sw, sh, orientation, sx, sy);
  const std::uint8_t* p = src + (static_cast<long long>(sy) * sw + sx) * channels;
  out[static_cast<long long>(oy) * ow + ox] =
      channels == 3 ? gray_of_rgb(p[0], p[1], p[2]) : gray_of_byte(p[0]);
}

__global__ void blur_rows(const float* in, float* out, int w, int h) {
  const int x = blockIdx.x * tile + threadIdx.x;
  const int y = blockIdx.y * tile + threadIdx.y;
  if (x < w && y < h) {
    out[static_cast<long long>(y) * w + x] = blur_tap(in + static_cast<long long>(y) * w, x, w, 1);
  }
}

__global__ void blur_columns(const float* in, float* out, int w, int h) {
  const int x = blockIdx.x * tile + threadIdx.x;
  const int y = blockIdx.y * tile + threadIdx.y;
  if (x < w && y < h) {
    out[static_cast<long long>(y) * w + x] = blur_tap(in + x, y, h, w);
  }
}

// One thread per pixel; each block sums its pixels into a shared histogram first, then
// adds the non-empty bins to the global one (a block spans at most 2 x 2 cells).
__global__ void sobel_hog(const float* img, int w, int h, std::uint8_t* edges, double* hist) {
  __shared__ double local[feature_count];
  const int t = threadIdx.y * tile + threadIdx.x;
  for (int i = t; i < feature_count; i += tile * tile) {
    local[i] = 0.0;
  }
  __syncthreads();
  const int x = blockIdx.x * tile + threadIdx.x;
  const int y = blockIdx.y * tile + threadIdx.y;
  if (x < w && y < h) {
    float gx = 0.0f;
    float gy = 0.0f;
    sobel_at(img, w, h, x, y, gx, gy);
    const float mag = magnitude(gx, gy);
    edges[static_cast<long long>(y) * w + x] = edge_byte(mag);
    if (mag > 0.0f) {
      atomicAdd(&local[feature_index(cell_of(x, w), cell_of(y, h), orientation_bin(gx, gy))],
                static_cast<double>(mag));
    }
  }
  __syncthreads();
  for (int i = t; i < feature_count; i += tile * tile) {
    if (local[i] != 0.0) {
      atomicAdd(&hist[i], local[i]);
    }
  }
}

void check_launch(const char* what) { CUAWAIT_CUDA_CHECK(what, cudaGetLastError()); }

} // namespace

void launch_gray(const std::uint8_t* src, int sw, int sh, int channels, int orientation, float* out,
                 cudaStream_t s) {
  const bool swap = orientation >= 5 && orientation <= 8;
  const int ow = swap ? sh : sw;
  const int oh = swap ? sw : sh;
  gray_from_bytes<<<grid_for(ow, oh), dim3(tile, tile), 0, s>>>(src, sw, sh, channels, orientation,
                                                                out, ow, oh);
  check_launch("gray kernel launch");
}

void launch_blur(const float* in, float* tmp, float* out, int w, int h, cudaStream_t s) {
  const dim3 block(tile, tile);
  blur_rows<<<grid_for(w, h), block, 0, s>>>(in, tmp, w, h);
  check_launch("blur rows kernel launch");
  blur_columns<<<grid_for(w, h), block, 0, s>>>(tmp, out, w, h);
  check_launch("blur columns kernel launch");
}

void launch_sobel_hog(const float* blurred, int w, int h, std::uint8_t* edges, double* hist,
                      cudaStream_t s) {
  CUAWAIT_CUDA_CHECK("histogram clear",
                     cudaMemsetAsync(hist, 0, sizeof(double) * feature_count, s));
  sobel_hog<<<grid_for(w, h), dim3(tile, tile), 0, s>>>(blurred, w, h, edges, hist);
  check_launch("sobel+hog kernel launch");
}

void warm_up_gpu(cudaStream_t s, const std::uint8_t* host_in, std::uint8_t* raw, float* in,
                 float* tmp, float* blurred, std::uint8_t* edges, double* hist,
                 std::uint8_t* host_edges) {
  CUAWAIT_CUDA_CHECK("warm-up copy", cudaMemcpyAsync(raw, host_in, 1, cudaMemcpyHostToDevice, s));
  launch_gray(raw, 1, 1, 1, 1, in, s);
  launch_blur(in, tmp, blurred, 1, 1, s);
  launch_sobel_hog(blurred, 1, 1, edges, hist, s);
  CUAWAIT_CUDA_CHECK("warm-up copy",
                     cudaMemcpyAsync(host_edges, edges, 1, cudaMemcpyDeviceToHost, s));
}

} // namespace cuawait::images::gpu
