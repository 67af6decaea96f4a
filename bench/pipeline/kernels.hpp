// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Kernels A and B of docs/WORKLOAD.md, launched from host code in .cpp files (kernels.cu holds
//! the device code). Both read `in` and write `out` (the same pointer for in-place work;
//! `coro_mapped` reads mapped host memory and writes device memory, then the reverse).

#include <cuda_runtime_api.h>

#include <cstddef>

namespace cuawait::bench {

//! Grid of kernels A and B: min(4 * SMs, ceil(n / 256)) blocks of `kernel_block` threads.
inline constexpr int kernel_block = 256;
[[nodiscard]] constexpr int kernel_grid(std::size_t n, int sms) noexcept {
  const std::size_t blocks = (n + kernel_block - 1) / kernel_block;
  const std::size_t cap = static_cast<std::size_t>(4 * sms);
  return static_cast<int>(blocks < cap ? blocks : cap);
}

//! The kernels' signature: (in, out, n floats, iters).
using kernel_fn = void (*)(const float*, float*, std::size_t, int);

//! Host handles of kernel A and kernel B, for `cudaLaunchKernel`-style APIs.
[[nodiscard]] kernel_fn kernel_a_handle() noexcept;
[[nodiscard]] kernel_fn kernel_b_handle() noexcept;

//! Enqueues kernel A (or B) on `s`. Returns the launch error, if any (`cudaGetLastError`).
[[nodiscard]] cudaError_t launch_kernel_a(const float* in, float* out, std::size_t n, int iters,
                                          int grid, cudaStream_t s) noexcept;
[[nodiscard]] cudaError_t launch_kernel_b(const float* in, float* out, std::size_t n, int iters,
                                          int grid, cudaStream_t s) noexcept;

//! Enqueues one block that spins until `*flag` (mapped host memory) becomes non-zero or
//! `max_ns` of GPU time passed, whichever is first; the bound keeps a host bug from
//! hanging the GPU. Used to hold back work while the host enqueues it.
[[nodiscard]] cudaError_t launch_gate(const volatile int* flag, unsigned long long max_ns,
                                      cudaStream_t s) noexcept;

} // namespace cuawait::bench
