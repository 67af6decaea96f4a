// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `gpu_timeline`: turns pairs of CUDA events into spans of the trace log, on the host's
//! clock, so the summary's GPU busy time comes from the GPU's own timestamps. An origin
//! event is recorded and waited for once; every later event is placed at the origin's host
//! time plus `cudaEventElapsedTime(origin, event)`.

#include "trace_log.hpp"

#include <cuda_runtime_api.h>

#include <mutex>

namespace cuawait::images::gpu {

class gpu_timeline {
public:
  //! Records the origin on `s` and waits for it.
  //! @throws cuawait::cuda::cuda_error
  gpu_timeline(trace_log& log, cudaStream_t s);
  gpu_timeline(const gpu_timeline&) = delete;
  gpu_timeline& operator=(const gpu_timeline&) = delete;
  ~gpu_timeline();

  //! Records the span [start, end] (both complete) on `lane` for `image`.
  //! @throws cuawait::cuda::cuda_error
  void record(int lane, int image, const char* name, cudaEvent_t start, cudaEvent_t end) const;

  [[nodiscard]] trace_log& log() const noexcept { return m_log; }

private:
  trace_log& m_log;
  cudaEvent_t m_origin = nullptr;
  double m_origin_us = 0;
};

//! A small owning set of timing events (created once, reused for every image).
class event_pair {
public:
  //! @throws cuawait::cuda::cuda_error
  event_pair();
  event_pair(const event_pair&) = delete;
  event_pair& operator=(const event_pair&) = delete;
  ~event_pair();
  [[nodiscard]] cudaEvent_t start() const noexcept { return m_start; }
  [[nodiscard]] cudaEvent_t end() const noexcept { return m_end; }

private:
  cudaEvent_t m_start = nullptr;
  cudaEvent_t m_end = nullptr;
};

} // namespace cuawait::images::gpu
