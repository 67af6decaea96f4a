// SPDX-License-Identifier: Apache-2.0
#include "cuawait/cuda/pinned_pool.hpp"
#include "cuawait/cuda/pinned_buffer.hpp"

#include "cuawait/cuda/detail/deferred_release.hpp"

#include <string>
#include <utility>

namespace cuawait::cuda {
namespace detail {

pinned_backend::pinned_backend(pinned_backend&& other) noexcept
    : m_flags(other.m_flags), m_events(std::move(other.m_events)) {}

pinned_backend::~pinned_backend() {
  for (cudaEvent_t e : m_events) {
    check_noexcept("pinned_pool: destroy event", cudaEventDestroy(e), "cudaEventDestroy");
  }
}

void* pinned_backend::allocate(std::size_t bytes) {
  void* p = nullptr;
  const cudaError_t e = cudaHostAlloc(&p, bytes, m_flags);
  if (e != cudaSuccess) [[unlikely]] {
    const std::string what = "pinned_pool: allocate " + std::to_string(bytes) + " bytes";
    check(what.c_str(), e, "cudaHostAlloc");
  }
  return p;
}

void pinned_backend::deallocate(void* p, std::size_t) noexcept {
  release_later(&free_host, p); // cudaFreeHost may wait for the device: off this thread
}

bool pinned_backend::is_complete(fence_type& f) noexcept {
  if (f == nullptr) {
    return true;
  }
  const cudaError_t e = cudaEventQuery(f);
  if (e == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  // Success, or an error after which the GPU runs nothing more: either way no copy is
  // still writing the block.
  (void)try_check(e);
  return true;
}

void pinned_backend::wait(fence_type& f) noexcept {
  if (f != nullptr) {
    (void)try_check(cudaEventSynchronize(f));
  }
}

void pinned_backend::discard(fence_type& f) noexcept {
  if (f == nullptr) {
    return;
  }
  try {
    const std::lock_guard lock(m_mutex);
    m_events.push_back(f);
    f = nullptr;
    return;
  } catch (...) { // no room to cache it: destroy it below
  }
  check_noexcept("pinned_pool: destroy event", cudaEventDestroy(f), "cudaEventDestroy");
  f = nullptr;
}

pinned_backend::fence_type pinned_backend::record(cudaStream_t s) noexcept {
  cudaEvent_t ev = nullptr;
  {
    const std::lock_guard lock(m_mutex);
    if (!m_events.empty()) {
      ev = m_events.back();
      m_events.pop_back();
    }
  }
  cudaError_t e = cudaSuccess;
  if (ev == nullptr) {
    e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  }
  if (e == cudaSuccess) {
    e = cudaEventRecord(ev, s);
  }
  if (e == cudaSuccess) {
    return ev;
  }
  check_noexcept("pinned_pool: fence a returned block", e, "cudaEventRecord");
  if (ev != nullptr) {
    (void)try_check(cudaEventDestroy(ev));
  }
  return nullptr;
}

} // namespace detail

pinned_pool::pinned_pool(pinned_pool_options options)
    : m_pool(detail::pinned_backend(options.host_alloc_flags), options.max_cached_bytes) {}

pinned_pool::~pinned_pool() = default;

pinned_pool::block pinned_pool::allocate(std::size_t bytes) { return m_pool.allocate(bytes); }

void pinned_pool::deallocate(block b) noexcept { m_pool.deallocate(b); }

void pinned_pool::deallocate(block b, stream_ref s) noexcept {
  cudaEvent_t fence = m_pool.backend().record(s.get());
  if (fence == nullptr) {
    release_after_device_idle(b); // never reused: freed once nothing can use it
  } else {
    m_pool.deallocate(b, fence);
  }
}

void pinned_pool::release_after_device_idle(block b) noexcept {
  m_pool.abandon(b);
  detail::release_after_device_idle(&detail::free_host, b.ptr);
}

std::size_t pinned_pool::reserve(std::size_t bytes, std::size_t count) {
  return m_pool.reserve(bytes, count);
}

std::size_t pinned_pool::trim() noexcept { return m_pool.trim(); }

pinned_pool_stats pinned_pool::stats() const noexcept { return m_pool.stats(); }

} // namespace cuawait::cuda

namespace cuawait::cuda::detail {

void pinned_release(pinned_pool& pool, pinned_pool::block b, release_order& order) noexcept {
  if (!order.has_primary()) {
    pool.deallocate(b);
    return;
  }
  if (!order.join()) {
    pool.release_after_device_idle(b);
    return;
  }
  pool.deallocate(b, stream_ref(order.primary()));
}

} // namespace cuawait::cuda::detail
