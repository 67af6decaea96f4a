// SPDX-License-Identifier: Apache-2.0
#pragma once

// GPU test helpers: skip cleanly when no CUDA device can be used.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <string>

namespace cuawait::test {

//! Empty when a CUDA device is usable, otherwise why not ("no CUDA device: ...").
//! Any error from cudaGetDeviceCount (no driver, insufficient driver, ...) means no device.
inline std::string gpu_unavailable_reason() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return std::string("no CUDA device: ") + cudaGetErrorName(e) + ": " + cudaGetErrorString(e);
  }
  if (count == 0) {
    return "no CUDA device: cudaGetDeviceCount found 0 devices";
  }
  return {};
}

} // namespace cuawait::test

//! Skips the current test (GTEST_SKIP) with a clear message when no CUDA device is usable.
//! Use at the top of every GPU test body.
#define CUAWAIT_REQUIRE_GPU()                                                                      \
  do {                                                                                             \
    if (const std::string cuawait_gpu_reason = ::cuawait::test::gpu_unavailable_reason();          \
        !cuawait_gpu_reason.empty()) {                                                             \
      GTEST_SKIP() << cuawait_gpu_reason;                                                          \
    }                                                                                              \
  } while (false)
