// SPDX-License-Identifier: Apache-2.0
#pragma once

// Kernels that hold the GPU until the host (or another kernel) says so, to test "not yet
// finished" states without sleeps. Each gives up after a clock64-measured bound and
// reports it, so a bug fails a test instead of hanging it.

#include <cuda_runtime_api.h>

#include <cstdint>

namespace cuawait::test {

//! Cycles after which a spin gives up (~2-5 s on current GPUs).
inline constexpr long long spin_bound_cycles = 5'000'000'000LL;

//! Spins until `*release != 0` (host-mapped memory written by the host), then writes 1 to
//! `*outcome`; writes 2 instead if `bound` cycles passed first.
__device__ inline void spin_until_released_or(const volatile int* release, int* outcome,
                                              long long bound) {
  const long long start = clock64();
  while (*release == 0) {
    if (clock64() - start > bound) {
      *outcome = 2;
      return;
    }
  }
  *outcome = 1;
}

//! Spins until released, giving up after `spin_bound_cycles` (see spin_until_released_or).
__global__ void spin_until_released(const volatile int* release, int* outcome) {
  spin_until_released_or(release, outcome, spin_bound_cycles);
}

//! The same, giving up after `bound` cycles: for a test whose host side may take seconds
//! under load (a communicator's abort) before it releases the kernel.
__global__ void spin_until_released_within(const volatile int* release, int* outcome,
                                           long long bound) {
  spin_until_released_or(release, outcome, bound);
}

//! Sets `*flag = 1` (for a kernel on another stream to see).
__global__ void set_flag(volatile int* flag) {
  __threadfence_system();
  *flag = 1;
}

//! Host-mapped memory for a release flag and an outcome, zeroed.
struct spin_control {
  int* host = nullptr;   // [0]: release, [1]: outcome
  int* device = nullptr; // the same, as the device sees it
  spin_control() {
    if (cudaHostAlloc(reinterpret_cast<void**>(&host), 2 * sizeof(int), cudaHostAllocMapped) ==
        cudaSuccess) {
      host[0] = host[1] = 0;
      (void)cudaHostGetDevicePointer(reinterpret_cast<void**>(&device), host, 0);
    }
  }
  spin_control(const spin_control&) = delete;
  spin_control& operator=(const spin_control&) = delete;
  ~spin_control() { (void)cudaFreeHost(host); }
  void release() { reinterpret_cast<volatile int*>(host)[0] = 1; }
  [[nodiscard]] int outcome() const { return reinterpret_cast<volatile int*>(host)[1]; }
};

} // namespace cuawait::test
