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

} // namespace

device_memory_pool::device_memory_pool(device_memory_pool_options options)
    : m_device(resolve_device(options.device)) {
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = m_device;
  CUAWAIT_CUDA_CHECK("device_memory_pool: create", cudaMemPoolCreate(&m_pool, &props));
  try {
    set_release_threshold(options.release_threshold);
  } catch (...) {
    (void)try_check(cudaMemPoolDestroy(m_pool));
    throw;
  }
}

device_memory_pool& device_memory_pool::operator=(device_memory_pool&& other) noexcept {
  if (this != &other) {
    this->~device_memory_pool();
    m_pool = other.m_pool;
    m_device = other.m_device;
    other.m_pool = nullptr;
  }
  return *this;
}

device_memory_pool::~device_memory_pool() {
  if (m_pool != nullptr) {
    check_noexcept("device_memory_pool: destroy", cudaMemPoolDestroy(m_pool), "cudaMemPoolDestroy");
    m_pool = nullptr;
  }
}

void device_memory_pool::set_release_threshold(std::uint64_t bytes) {
  CUAWAIT_CUDA_CHECK("device_memory_pool: set release threshold",
                     cudaMemPoolSetAttribute(m_pool, cudaMemPoolAttrReleaseThreshold, &bytes));
}

std::uint64_t device_memory_pool::reserved_bytes() const {
  return pool_attribute(m_pool, cudaMemPoolAttrReservedMemCurrent);
}

std::uint64_t device_memory_pool::used_bytes() const {
  return pool_attribute(m_pool, cudaMemPoolAttrUsedMemCurrent);
}

void device_memory_pool::trim_to(std::size_t keep_bytes) {
  CUAWAIT_CUDA_CHECK("device_memory_pool: trim", cudaMemPoolTrimTo(m_pool, keep_bytes));
}

} // namespace cuawait::cuda
