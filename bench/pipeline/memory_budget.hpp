// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Whether a mode run's buffers fit: checked before allocating, so that a level too large
//! for the machine is reported as skipped with the sizes instead of failing deep inside an
//! allocation (or swapping the host to a halt with pinned memory).

#include "modes.hpp"

#include <cuawait/cuda/device_context.hpp>
#include <cuawait/cuda/error.hpp>
#include <cuawait/cuda/memory_pool.hpp>
#include <cuawait/cuda/pinned_pool.hpp>

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

namespace cuawait::bench {

//! Share of the free memory a run may take: the rest is for the CUDA context, the
//! runtime's streams and events, the checker and the other processes.
inline constexpr double memory_headroom = 0.8;

//! Host memory available to new allocations (`MemAvailable` of /proc/meminfo: free plus
//! reclaimable cache), bytes; free pages (`sysconf`) where that is missing; 0 if unknown.
[[nodiscard]] inline double host_available_bytes() noexcept {
  if (std::FILE* f = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    long long kib = -1;
    while (std::fgets(line, sizeof line, f) != nullptr) {
      if (std::sscanf(line, "MemAvailable: %lld kB", &kib) == 1) {
        break;
      }
    }
    std::fclose(f);
    if (kib >= 0) {
      return static_cast<double>(kib) * 1024.0;
    }
  }
  const long pages = sysconf(_SC_AVPHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0.0;
}

//! Throws `mode_skipped` naming both sizes when `pinned_bytes` of pinned host memory or
//! `device_bytes` of device memory exceed `memory_headroom` of what is free now. First gives
//! back what is cached in the pools of the calling thread's device context, if it has one
//! (each mode's runtime owns its pools, so what an earlier mode cached went with it), so that
//! a large run after others is judged on the memory really available.
//! @throws mode_skipped; cuda_error when the device cannot be asked.
inline void require_memory(const char* mode, double pinned_bytes, double device_bytes) {
  if (cuda::device_context* c = cuda::current_context_or_null(); c != nullptr) {
    (void)c->pinned().trim();
    c->memory().trim_to(0);
  }
  std::size_t free_dev = 0;
  std::size_t total_dev = 0;
  CUAWAIT_CUDA_CHECK("memory info", cudaMemGetInfo(&free_dev, &total_dev));
  const double free_host = host_available_bytes();
  auto gib = [](double b) { return b / double(1 << 30); };
  char msg[256];
  if (device_bytes > memory_headroom * static_cast<double>(free_dev)) {
    std::snprintf(msg, sizeof msg, "skipped: %s needs %.2f GiB of device memory, %.2f GiB free",
                  mode, gib(device_bytes), gib(static_cast<double>(free_dev)));
    throw mode_skipped(msg);
  }
  if (free_host > 0 && pinned_bytes > memory_headroom * free_host) {
    std::snprintf(msg, sizeof msg,
                  "skipped: %s needs %.2f GiB of pinned host memory, %.2f GiB available", mode,
                  gib(pinned_bytes), gib(free_host));
    throw mode_skipped(msg);
  }
}

} // namespace cuawait::bench
