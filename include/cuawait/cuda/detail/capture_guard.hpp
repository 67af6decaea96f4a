// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The check every awaitable stream operation makes before it suspends: inside a graph
//! capture region the operation was recorded, not run, so waiting for it would never end.

#include "cuawait/cuda/error.hpp"

#include <cuda_runtime_api.h>

#include <atomic>
#include <source_location>
#include <string>

namespace cuawait::cuda::detail {

//! Capture regions open in the process (cuawait's `capture_region`s). While it is zero,
//! awaitables skip the driver query below: the check costs nothing outside captures.
//! Captures begun with the raw CUDA API are not counted and not detected.
inline std::atomic<int> open_capture_regions{0};

//! True when `s` is capturing into a graph (`cudaStreamIsCapturing`). A capture that was
//! invalidated counts as capturing: the region is still open.
//! @throws cuda_error ("stream capture query")
[[nodiscard]] inline bool stream_is_capturing(cudaStream_t s) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  ::cuawait::cuda::check("stream capture query", cudaStreamIsCapturing(s, &st),
                         "cudaStreamIsCapturing");
  return st != cudaStreamCaptureStatusNone;
}

//! Throws when `s` is capturing, naming `operation`: "co_await copy H2D inside a graph
//! capture region: ...". Awaitables call it in `await_suspend` (or before registering with
//! the reactor), so a wait inside a region fails at once instead of hanging. Does not
//! disturb the capture: the region can still end cleanly.
//! @throws cuda_error with `cudaErrorStreamCaptureUnsupported`
inline void throw_if_capturing(cudaStream_t s, const char* operation,
                               std::source_location where = std::source_location::current()) {
  if (open_capture_regions.load(std::memory_order_relaxed) != 0 && stream_is_capturing(s)) {
    const std::string what = std::string("co_await ") + (operation ? operation : "operation") +
                             " inside a graph capture region (operations there are recorded, "
                             "not run: await the graph's launch after the region ends)";
    throw ::cuawait::cuda::cuda_error(cudaErrorStreamCaptureUnsupported, what.c_str(),
                                      "cudaStreamIsCapturing", where);
  }
}

} // namespace cuawait::cuda::detail
