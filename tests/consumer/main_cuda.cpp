// SPDX-License-Identifier: Apache-2.0
// Built against an installed cuawait through find_package(cuawait COMPONENTS cuda): the
// CUDA layer's headers, the CUDA runtime's headers and libraries come with cuawait::cuda.
#include <cuawait/cuda.hpp>

#include <cuda_runtime_api.h>

#include <cstdio>
#include <type_traits>

static_assert(!std::is_copy_constructible_v<cuawait::cuda::stream>, "streams are move-only");

int main() {
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  std::printf("consumer_cuda: %s, %d devices\n", cudaGetErrorName(e), devices);
  return 0;
}
