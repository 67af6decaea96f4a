// SPDX-License-Identifier: Apache-2.0
// cuawait-images: the executable. The CUDA backend is linked in when the build has CUDA, and
// the MPI layer when it has MPI: started by an MPI launcher with several processes, the run
// is spread over them (docs/IMAGES.md, Several processes).

#include "program.hpp"

#if defined(CUAWAIT_IMAGES_HAS_CUDA)
#include "cuda/cuda_backend.hpp"
#endif
#if defined(CUAWAIT_IMAGES_MPI)
#include "mpi_group.hpp"

#include <cstdio>
#include <exception>
#endif

#include <memory>

namespace {

int run(int argc, char** argv, cuawait::images::rank_group* group) {
#if defined(CUAWAIT_IMAGES_HAS_CUDA)
  const auto gpu = cuawait::images::make_cuda_backend();
  return cuawait::images::run_program(argc, argv, gpu.get(), group);
#else
  return cuawait::images::run_program(argc, argv, nullptr, group);
#endif
}

} // namespace

int main(int argc, char** argv) {
  cuawait::images::install_stop_handlers();
#if defined(CUAWAIT_IMAGES_MPI)
  if (cuawait::images::mpi_group::launched_by_mpi()) {
    std::unique_ptr<cuawait::images::mpi_group> group;
    try {
      group = std::make_unique<cuawait::images::mpi_group>(argc, argv);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "cuawait-images: %s\n", e.what());
      return cuawait::images::exit_usage;
    }
    return run(argc, argv, group->size() > 1 ? group.get() : nullptr);
  }
#endif
  return run(argc, argv, nullptr);
}
