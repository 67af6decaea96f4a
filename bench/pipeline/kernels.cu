// SPDX-License-Identifier: Apache-2.0
// Kernels A and B of docs/WORKLOAD.md. The multiply-add is written as __fmaf_rn so that the
// rounding is known (one rounding, as std::fmaf on the CPU) whatever nvcc's contraction
// setting: the check compares results bit for bit.

#include "kernels.hpp"
#include "reference.hpp"

namespace cuawait::bench {
namespace {

template <int Which>
__device__ __forceinline__ void transform(const float* in, float* out, std::size_t n, int iters) {
  constexpr float mul = Which == 0 ? kernel_a_mul : kernel_b_mul;
  constexpr float add = Which == 0 ? kernel_a_add : kernel_b_add;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    float v = in[i];
    for (int k = 0; k < iters; ++k) {
      v = __fmaf_rn(v, mul, add);
    }
    out[i] = v;
  }
}

__global__ void kernel_a(const float* in, float* out, std::size_t n, int iters) {
  transform<0>(in, out, n, iters);
}

__global__ void kernel_b(const float* in, float* out, std::size_t n, int iters) {
  transform<1>(in, out, n, iters);
}

__global__ void gate_kernel(const volatile int* flag, unsigned long long max_ns) {
  unsigned long long start = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  for (;;) {
    if (*flag != 0) {
      return;
    }
    unsigned long long now = 0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - start > max_ns) {
      return;
    }
  }
}

} // namespace

kernel_fn kernel_a_handle() noexcept { return kernel_a; }
kernel_fn kernel_b_handle() noexcept { return kernel_b; }

cudaError_t launch_kernel_a(const float* in, float* out, std::size_t n, int iters, int grid,
                            cudaStream_t s) noexcept {
  kernel_a<<<grid, kernel_block, 0, s>>>(in, out, n, iters);
  return cudaGetLastError();
}

cudaError_t launch_kernel_b(const float* in, float* out, std::size_t n, int iters, int grid,
                            cudaStream_t s) noexcept {
  kernel_b<<<grid, kernel_block, 0, s>>>(in, out, n, iters);
  return cudaGetLastError();
}

cudaError_t launch_gate(const volatile int* flag, unsigned long long max_ns,
                        cudaStream_t s) noexcept {
  gate_kernel<<<1, 1, 0, s>>>(flag, max_ns);
  return cudaGetLastError();
}

} // namespace cuawait::bench
