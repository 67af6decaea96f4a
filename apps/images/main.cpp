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

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace {

//! Keeps freed image memory in the allocator for the next image instead of handing it back
//! to the kernel. In the coro mode many images are in flight at once and each is freed by
//! whichever worker finishes it; with glibc's defaults the freed megabytes went back to the
//! kernel (heap trimming, and mmap for the largest blocks) and the next image faulted them
//! in again: 6x the page faults of the threads mode and 0.7x its rate on 0.25 MP images
//! (CPU backend, 2 threads), 0.97x with this. What is kept is bounded by the peak in flight,
//! which the memory budget bounds. Both settings are needed: a fixed trim threshold alone
//! also fixes the mmap threshold at its 128 KiB start, so every image buffer is mmapped.
void keep_freed_memory() noexcept {
#if defined(__GLIBC__)
  (void)mallopt(M_MMAP_THRESHOLD, 32 << 20); // glibc's largest (half a 64 MiB arena heap)
  (void)mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

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
  keep_freed_memory();
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
