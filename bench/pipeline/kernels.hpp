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

//! Buffers of one batch for kernels A and B in one launch: up to `max_kernel_runs` buffers,
//! each worked in place (what a user who batches jobs writes instead of a launch per job).
struct kernel_run {
  float* data = nullptr;
  std::size_t n = 0; //!< floats
};
inline constexpr int max_kernel_runs = 64;
struct kernel_runs {
  kernel_run run[max_kernel_runs];
  int count = 0;
};

//! Enqueues kernel A (or B) over every buffer of `runs` in place, one launch per
//! `max_kernel_runs` buffers: each element gets exactly what `launch_kernel_a` would give it.
//! Returns the first launch error, if any.
[[nodiscard]] cudaError_t launch_kernel_a_runs(const kernel_run* runs, std::size_t count, int iters,
                                               int sms, cudaStream_t s) noexcept;
[[nodiscard]] cudaError_t launch_kernel_b_runs(const kernel_run* runs, std::size_t count, int iters,
                                               int sms, cudaStream_t s) noexcept;

//! Enqueues one block that spins until `*flag` (mapped host memory) becomes non-zero or
//! `max_ns` of GPU time passed, whichever is first; the bound keeps a host bug from
//! hanging the GPU. Used to hold back work while the host enqueues it.
[[nodiscard]] cudaError_t launch_gate(const volatile int* flag, unsigned long long max_ns,
                                      cudaStream_t s) noexcept;

} // namespace cuawait::bench
