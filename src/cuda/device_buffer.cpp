// SPDX-License-Identifier: Apache-2.0
#include "cuawait/cuda/device_buffer.hpp"

#include "cuawait/cuda/detail/deferred_release.hpp"

#include <string>

namespace cuawait::cuda::detail {

void* device_allocate(std::size_t bytes, cudaStream_t s, cudaMemPool_t pool) {
  if (bytes == 0) {
    return nullptr;
  }
  void* p = nullptr;
  const cudaError_t e = cudaMallocFromPoolAsync(&p, bytes, pool, s);
  if (e != cudaSuccess) [[unlikely]] {
    const std::string what = "device_buffer: allocate " + std::to_string(bytes) + " bytes";
    check(what.c_str(), e, "cudaMallocFromPoolAsync");
  }
  return p;
}

void device_free(void* p, release_order& order) noexcept {
  if (!order.join()) {
    release_after_device_idle(&free_device, p); // cudaFree of pool memory: legal, synchronous
    return;
  }
  check_noexcept("device_buffer: free", cudaFreeAsync(p, order.primary()), "cudaFreeAsync");
}

std::size_t checked_bytes(std::size_t count, std::size_t element, const char* what) {
  if (element != 0 && count > std::numeric_limits<std::size_t>::max() / element) {
    throw std::length_error(std::string(what) + ": " + std::to_string(count) + " elements of " +
                            std::to_string(element) + " bytes overflow size_t");
  }
  return count * element;
}

} // namespace cuawait::cuda::detail
