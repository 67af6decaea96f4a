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
  //! A pool of events created with `flags` (default: no timing) on the calling thread's
  //! current device.
  explicit event_pool(unsigned flags = cudaEventDisableTiming) noexcept : m_flags(flags) {}
  //! A pool of events created with `flags` on `device`, whatever device is current when
  //! one is created (an event recorded on a stream of another device fails in CUDA).
  event_pool(unsigned flags, int device) noexcept : m_flags(flags), m_device(device) {}
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
    return create();
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

  //! The device the events are created on; -1: the current device at creation.
  [[nodiscard]] int device() const noexcept { return m_device; }

private:
  [[nodiscard]] cudaEvent_t create() const {
    int previous = -1;
    if (m_device >= 0) {
      CUAWAIT_CUDA_CHECK("event pool", cudaGetDevice(&previous));
      if (previous != m_device) {
        CUAWAIT_CUDA_CHECK("event pool", cudaSetDevice(m_device));
      }
    }
    cudaEvent_t e = nullptr;
    const cudaError_t created = cudaEventCreateWithFlags(&e, m_flags);
    if (m_device >= 0 && previous != m_device) {
      (void)cudaSetDevice(previous);
    }
    check("event pool", created, "cudaEventCreateWithFlags");
    return e;
  }

  unsigned m_flags;
  int m_device = -1;
  mutable std::mutex m_mutex;
  std::vector<cudaEvent_t> m_free;
};

} // namespace cuawait::cuda
