// SPDX-License-Identifier: Apache-2.0
// cuawait-images: the executable. The CUDA backend is linked in when the build has CUDA.

#include "program.hpp"

#if defined(CUAWAIT_IMAGES_HAS_CUDA)
#include "cuda/cuda_backend.hpp"
#endif

int main(int argc, char** argv) {
  cuawait::images::install_stop_handlers();
#if defined(CUAWAIT_IMAGES_HAS_CUDA)
  const auto gpu = cuawait::images::make_cuda_backend();
  return cuawait::images::run_program(argc, argv, gpu.get());
#else
  return cuawait::images::run_program(argc, argv, nullptr);
#endif
}
