// SPDX-License-Identifier: Apache-2.0
#include "cuawait/cuda/mapped_buffer.hpp"

#include "cuawait/cuda/detail/deferred_release.hpp"

#include <cstring>
#include <string>

namespace cuawait::cuda::detail {

std::size_t checked_bytes(std::size_t count, std::size_t element, const char* what);

void* mapped_allocate(std::size_t count, std::size_t element, void*& device) {
  const std::size_t bytes = checked_bytes(count, element, "mapped_buffer");
  device = nullptr;
  if (bytes == 0) {
    return nullptr;
  }
  const std::string what = "mapped_buffer: allocate " + std::to_string(bytes) + " bytes";
  void* host = nullptr;
  check(what.c_str(), cudaHostAlloc(&host, bytes, cudaHostAllocMapped | cudaHostAllocPortable),
        "cudaHostAlloc");
  const cudaError_t e = cudaHostGetDevicePointer(&device, host, 0);
  if (e != cudaSuccess) {
    release_later(&free_host, host);
    check(what.c_str(), e, "cudaHostGetDevicePointer");
  }
  std::memset(host, 0, bytes);
  return host;
}

void mapped_free(void* host) noexcept { release_later(&free_host, host); }

void mapped_free_after(void* host, cudaStream_t s) noexcept { release_after(s, &free_host, host); }

} // namespace cuawait::cuda::detail
