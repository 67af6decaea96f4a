// SPDX-License-Identifier: Apache-2.0
#include "cuawait/cuda/detail/release_order.hpp"

#include "cuawait/cuda/error.hpp"

#include <stdexcept>

namespace cuawait::cuda::detail {

void release_order::add(cudaStream_t s) {
  if (!m_has_primary) {
    set_primary(s);
    return;
  }
  if (s == m_primary) {
    return;
  }
  for (std::size_t i = 0; i < m_extra_count; ++i) {
    if (m_extra[i] == s) {
      return;
    }
  }
  if (m_extra_count == max_release_streams) {
    throw std::length_error("free_after: a buffer follows at most 3 streams besides its own; "
                            "join the others into one stream first");
  }
  m_extra[m_extra_count++] = s;
}

bool release_order::join() noexcept {
  bool joined = true;
  for (std::size_t i = 0; i < m_extra_count; ++i) {
    // An event per join: this runs once per buffer that used free_after, not per operation.
    cudaEvent_t ev = nullptr;
    cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (e == cudaSuccess) {
      e = cudaEventRecord(ev, m_extra[i]);
      if (e == cudaSuccess) {
        e = cudaStreamWaitEvent(m_primary, ev, 0);
      }
      check_noexcept("buffer release: join streams", cudaEventDestroy(ev), "cudaEventDestroy");
    }
    if (e != cudaSuccess) {
      check_noexcept("buffer release: join streams", e, "cudaStreamWaitEvent");
      joined = false; // the caller defers the release until the device is idle
    }
  }
  m_extra_count = 0;
  return joined;
}

} // namespace cuawait::cuda::detail
