// SPDX-License-Identifier: Apache-2.0
#include "cuawait/cuda/memory_pool.hpp"

#include <array>
#include <atomic>
#include <mutex>
#include <stdexcept>
#include <string>

namespace cuawait::cuda {
namespace {

int resolve_device(int device) {
  if (device >= 0) {
    return device;
  }
  CUAWAIT_CUDA_CHECK("device_memory_pool: current device", cudaGetDevice(&device));
  return device;
}

std::uint64_t pool_attribute(cudaMemPool_t pool, cudaMemPoolAttr attr) {
  std::uint64_t value = 0;
  CUAWAIT_CUDA_CHECK("device_memory_pool: read attribute",
                     cudaMemPoolGetAttribute(pool, attr, &value));
  return value;
}

cudaMemPool_t create_pool(int device) {
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  cudaMemPool_t pool = nullptr;
  CUAWAIT_CUDA_CHECK("device_memory_pool: create", cudaMemPoolCreate(&pool, &props));
  return pool;
}

} // namespace

device_memory_pool::device_memory_pool(std::in_place_t /*tag*/, int device)
    : owner(create_pool(device)), m_device(device) {}

// Delegating: the owner holds the pool once the constructor above returns, so a failing
// threshold below destroys it.
device_memory_pool::device_memory_pool(device_memory_pool_options options)
    : device_memory_pool(std::in_place, resolve_device(options.device)) {
  set_release_threshold(options.release_threshold);
}

void device_memory_pool::set_release_threshold(std::uint64_t bytes) {
  CUAWAIT_CUDA_CHECK("device_memory_pool: set release threshold",
                     cudaMemPoolSetAttribute(get(), cudaMemPoolAttrReleaseThreshold, &bytes));
}

std::uint64_t device_memory_pool::reserved_bytes() const {
  return pool_attribute(get(), cudaMemPoolAttrReservedMemCurrent);
}

std::uint64_t device_memory_pool::used_bytes() const {
  return pool_attribute(get(), cudaMemPoolAttrUsedMemCurrent);
}

void device_memory_pool::trim_to(std::size_t keep_bytes) {
  CUAWAIT_CUDA_CHECK("device_memory_pool: trim", cudaMemPoolTrimTo(get(), keep_bytes));
}

} // namespace cuawait::cuda
