// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The stage streams of the staged modes (`coro_staged`, `coro_staged_batched`): streams
//! shared by every pipeline of a run, one per stage of a job, linked by events so that no
//! dependency goes through the host. One stream carries every host-to-device copy and one
//! every device-to-host copy, so exactly one copy per direction is in flight at any time,
//! in the order the jobs were enqueued: both directions of the link stay busy and the
//! oldest job's data arrives first (copies on many streams share the link's bandwidth and
//! all finish late). Kernels go to `compute` streams in turn.

#include <cuawait/cuda/stream.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

namespace cuawait::bench {

//! Kernel streams of the staged modes: two, so that one job's kernel B and the next job's
//! kernel A may overlap when the jobs are too small to fill the GPU alone.
inline constexpr std::size_t staged_compute_streams = 2;

//! The stage streams of one mode run. Enqueueing on them is thread-safe (CUDA's), but a
//! job's stages must be enqueued in one order on all three: the caller serialises that.
class stage_streams {
public:
  //! @throws cuda_error creating the streams.
  explicit stage_streams(std::size_t compute_streams = staged_compute_streams) {
    m_compute.reserve(compute_streams);
    for (std::size_t i = 0; i < compute_streams; ++i) {
      m_compute.emplace_back();
    }
  }
  stage_streams(const stage_streams&) = delete;
  stage_streams& operator=(const stage_streams&) = delete;
  //! Waits for whatever is still enqueued (after a failed run, a pipeline may have left
  //! work behind), so that the buffers the work uses can be freed after this. Never throws.
  ~stage_streams() {
    (void)cudaStreamSynchronize(m_in.get());
    for (const cuda::stream& s : m_compute) {
      (void)cudaStreamSynchronize(s.get());
    }
    (void)cudaStreamSynchronize(m_out.get());
    (void)cudaGetLastError();
  }

  //! The host-to-device stream.
  [[nodiscard]] cuda::stream_ref in() const noexcept { return m_in; }
  //! The device-to-host stream.
  [[nodiscard]] cuda::stream_ref out() const noexcept { return m_out; }
  //! The next kernel stream in turn. Not thread-safe: call it where the job's stages are
  //! serialised.
  [[nodiscard]] cuda::stream_ref next_compute() noexcept {
    return m_compute[m_next++ % m_compute.size()];
  }

private:
  cuda::stream m_in;
  cuda::stream m_out;
  std::vector<cuda::stream> m_compute;
  std::size_t m_next = 0;
};

} // namespace cuawait::bench
