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

//! Block row y works buffer y of `runs`, its blocks striding over that buffer's elements.
template <int Which>
__global__ void kernel_runs_inplace(const kernel_runs runs, int iters) {
  const kernel_run r = runs.run[blockIdx.y];
  transform<Which>(r.data, r.data, r.n, iters);
}

template <int Which>
cudaError_t launch_runs(const kernel_run* runs, std::size_t count, int iters, int sms,
                        cudaStream_t s) noexcept {
  for (std::size_t first = 0; first < count; first += max_kernel_runs) {
    kernel_runs batch;
    std::size_t largest = 0;
    const std::size_t k = count - first < max_kernel_runs ? count - first : max_kernel_runs;
    for (std::size_t i = 0; i < k; ++i) {
      batch.run[i] = runs[first + i];
      largest = runs[first + i].n > largest ? runs[first + i].n : largest;
    }
    batch.count = static_cast<int>(k);
    // As many blocks in all as one launch over the largest buffer would use, shared among
    // the buffers (each at least one block, at most what its elements fill).
    const std::size_t want = static_cast<std::size_t>(kernel_grid(largest, sms));
    std::size_t per = (static_cast<std::size_t>(4 * sms) + k - 1) / k;
    per = per < want ? per : want;
    per = per < 1 ? 1 : per;
    const dim3 grid(static_cast<unsigned>(per), static_cast<unsigned>(k));
    kernel_runs_inplace<Which><<<grid, kernel_block, 0, s>>>(batch, iters);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
      return e;
    }
  }
  return cudaSuccess;
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

cudaError_t launch_kernel_a_runs(const kernel_run* runs, std::size_t count, int iters, int sms,
                                 cudaStream_t s) noexcept {
  return launch_runs<0>(runs, count, iters, sms, s);
}

cudaError_t launch_kernel_b_runs(const kernel_run* runs, std::size_t count, int iters, int sms,
                                 cudaStream_t s) noexcept {
  return launch_runs<1>(runs, count, iters, sms, s);
}

cudaError_t launch_gate(const volatile int* flag, unsigned long long max_ns,
                        cudaStream_t s) noexcept {
  gate_kernel<<<1, 1, 0, s>>>(flag, max_ns);
  return cudaGetLastError();
}

} // namespace cuawait::bench
