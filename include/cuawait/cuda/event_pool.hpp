// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! A thread-safe pool of CUDA events (create + destroy costs ~0.42 µs on the H200 machine,
//! a pooled acquire/release a few tens of ns).

#include "cuawait/cuda/error.hpp"

#include <cuda_runtime_api.h>

#include <mutex>
#include <vector>

namespace cuawait::cuda {

//! Recycles events created with one set of flags. Events handed out are owned by the
//! caller until `release`d; the pool destroys the ones it holds when destroyed.
class event_pool {
public:
  //! A pool of events created with `flags` (default: no timing).
  explicit event_pool(unsigned flags = cudaEventDisableTiming) noexcept : m_flags(flags) {}
  event_pool(const event_pool&) = delete;
  event_pool& operator=(const event_pool&) = delete;
  ~event_pool() {
    for (cudaEvent_t e : m_free) {
      check_noexcept("event pool", cudaEventDestroy(e), "cudaEventDestroy");
    }
  }

  //! A free event, created if none is free.
  //! @throws cuda_error when creation fails.
  [[nodiscard]] cudaEvent_t acquire() {
    {
      const std::lock_guard lock(m_mutex);
      if (!m_free.empty()) {
        const cudaEvent_t e = m_free.back();
        m_free.pop_back();
        return e;
      }
    }
    cudaEvent_t e = nullptr;
    CUAWAIT_CUDA_CHECK("event pool", cudaEventCreateWithFlags(&e, m_flags));
    return e;
  }

  //! Returns `e` to the pool. Re-recording it later is safe even if earlier work is still
  //! pending: CUDA waits and queries always refer to the latest record.
  void release(cudaEvent_t e) noexcept {
    try {
      const std::lock_guard lock(m_mutex);
      m_free.push_back(e);
    } catch (...) {
      check_noexcept("event pool", cudaEventDestroy(e), "cudaEventDestroy");
    }
  }

  //! Events currently free in the pool.
  [[nodiscard]] std::size_t free_count() const {
    const std::lock_guard lock(m_mutex);
    return m_free.size();
  }

private:
  unsigned m_flags;
  mutable std::mutex m_mutex;
  std::vector<cudaEvent_t> m_free;
};

} // namespace cuawait::cuda
