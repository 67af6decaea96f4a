// SPDX-License-Identifier: Apache-2.0
// The CUDA layer's part of the doctor's snapshot (docs/DOCTOR.md): the strategy, waits on
// the default streams (lanes keyed by their `cudaStream_t`), the pinned pool's counters.
#include "cuawait/runtime.hpp"

#include <cuda_runtime_api.h>

namespace cuawait {

doctor_snapshot runtime::snapshot() const {
  doctor_snapshot s = doctor::snapshot(m_context.reactor().reactor(), &m_pool);
  s.strategy = cuda::to_string(m_context.reactor().kind());
  for (const lane_usage& lane : s.reactor.lane_waits) {
    const auto* key = static_cast<const void*>(lane.lane_key);
    if (key == static_cast<const void*>(cudaStreamLegacy)) {
      s.legacy_stream_waits += lane.waits;
    } else if (key == static_cast<const void*>(cudaStreamPerThread)) {
      s.per_thread_stream_waits += lane.waits;
    } else if (key == nullptr) {
      // Stream 0 is the legacy default stream unless this translation unit was built with
      // per-thread default streams; what the awaiting code was built with is not known.
#if defined(CUDA_API_PER_THREAD_DEFAULT_STREAM)
      s.per_thread_stream_waits += lane.waits;
#else
      s.legacy_stream_waits += lane.waits;
#endif
    }
  }
  s.pinned = m_context.pinned().stats();
  return s;
}

} // namespace cuawait
