// SPDX-License-Identifier: Apache-2.0
// The public umbrella headers compile under nvcc -std=c++20, beside a kernel, in one .cu.
#include <cuawait/cuawait.hpp>
#if __has_include(<cuawait/cuda.hpp>)
#include <cuawait/cuda.hpp>
#endif

__global__ void cuawait_nvcc_header_check_kernel(float* p) { p[threadIdx.x] += 1.0f; }

cuawait::task<int> cuawait_nvcc_header_check_task() { co_return 1; }
