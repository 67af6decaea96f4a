// SPDX-License-Identifier: Apache-2.0
#include "gpu_timeline.hpp"

#include <cuawait/cuda/error.hpp>

namespace cuawait::images::gpu {

gpu_timeline::gpu_timeline(trace_log& log, cudaStream_t s) : m_log(log) {
  CUAWAIT_CUDA_CHECK("timeline origin", cudaEventCreate(&m_origin));
  CUAWAIT_CUDA_CHECK("timeline origin", cudaEventRecord(m_origin, s));
  CUAWAIT_CUDA_CHECK("timeline origin", cudaEventSynchronize(m_origin));
  m_origin_us = m_log.now_us();
}

gpu_timeline::~gpu_timeline() {
  cuawait::cuda::check_noexcept("timeline origin", cudaEventDestroy(m_origin), "cudaEventDestroy");
}

void gpu_timeline::record(int lane, int image, const char* name, cudaEvent_t start,
                          cudaEvent_t end) const {
  float a = 0;
  float b = 0;
  CUAWAIT_CUDA_CHECK("timeline", cudaEventElapsedTime(&a, m_origin, start));
  CUAWAIT_CUDA_CHECK("timeline", cudaEventElapsedTime(&b, m_origin, end));
  m_log.record(lane, image, name, m_origin_us + 1000.0 * a, m_origin_us + 1000.0 * b);
}

event_pair::event_pair() {
  CUAWAIT_CUDA_CHECK("timing event", cudaEventCreate(&m_start));
  if (const cudaError_t e = cudaEventCreate(&m_end); e != cudaSuccess) {
    (void)cudaEventDestroy(m_start);
    cuawait::cuda::check("timing event", e, "cudaEventCreate");
  }
}

event_pair::~event_pair() {
  cuawait::cuda::check_noexcept("timing event", cudaEventDestroy(m_start), "cudaEventDestroy");
  cuawait::cuda::check_noexcept("timing event", cudaEventDestroy(m_end), "cudaEventDestroy");
}

} // namespace cuawait::images::gpu
