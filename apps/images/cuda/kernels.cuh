// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The pipeline's CUDA kernels (raw CUDA, no cuawait): blur, then Sobel gradients with the
//! histogram of oriented gradients and the edge image. They compute exactly what
//! stages.hpp computes on the CPU (same per-pixel functions from pixel_math.hpp, built with
//! --fmad=false); only the histogram's double sums may differ in their last bits, by the
//! order of the atomic additions.

#include <cuda_runtime_api.h>

#include <cstdint>

namespace cuawait::images::gpu {

//! Enqueues on `s` the conversion of the 8-bit image `src` (device; `sw` x `sh` pixels of
//! `channels` bytes, 1 or 3, rows packed) to grayscale floats in `out` (device), shown with
//! EXIF orientation `orientation` (1-8; 5-8 swap width and height; others: as stored): the
//! same values as the CPU's `to_gray(apply_orientation(...))`, bit for bit.
//! @throws cuawait::cuda::cuda_error when the launch fails
void launch_gray(const std::uint8_t* src, int sw, int sh, int channels, int orientation, float* out,
                 cudaStream_t s);

//! Enqueues the 5x5 binomial blur of `in` (w x h floats, device) into `out` on `s`, using
//! `tmp` (w x h floats, device) for the horizontal pass. Two kernel launches.
//! @throws cuawait::cuda::cuda_error when a launch fails
void launch_blur(const float* in, float* tmp, float* out, int w, int h, cudaStream_t s);

//! Enqueues gradients, edge bytes and histogram of `blurred` (device) on `s`: clears
//! `hist` (feature_count doubles, device), then one kernel writes `edges` (w * h bytes,
//! device) and adds to `hist`.
//! @throws cuawait::cuda::cuda_error when a launch fails
void launch_sobel_hog(const float* blurred, int w, int h, std::uint8_t* edges, double* hist,
                      cudaStream_t s);

//! Enqueues on `s` one upload (of one byte into `raw`), each kernel (on a 1 x 1 image at the start
//! of the given buffers) and one download: the first use of every kernel loads its module (CUDA's
//! lazy loading) and the first copies set up their paths, costs that belong to setup, not to the
//! first timed image. @throws cuawait::cuda::cuda_error
void warm_up_gpu(cudaStream_t s, const std::uint8_t* host_in, std::uint8_t* raw, float* in,
                 float* tmp, float* blurred, std::uint8_t* edges, double* hist,
                 std::uint8_t* host_edges);

} // namespace cuawait::images::gpu
