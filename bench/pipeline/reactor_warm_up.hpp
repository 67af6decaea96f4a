// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Moves the completion reactor's first-wait costs out of a mode's timed region.

#include <cuawait/cuda/stream.hpp>
#include <cuawait/runtime.hpp>
#include <cuawait/task.hpp>

#include <utility>
#include <vector>

namespace cuawait::bench {

//! Awaits each of `streams` once on `rt`: the reactor's state for a stream (its lane, and
//! with the timeline strategy a word of pinned memory, allocated with `cudaHostAlloc` per
//! 512 streams) is made on the stream's first wait; done here, before the timer starts,
//! it is setup rather than part of the first jobs. @throws cuda_error
inline void warm_reactor(runtime& rt, std::vector<cuda::stream_ref> streams) {
  rt.run([](std::vector<cuda::stream_ref> ss) -> task<void> {
    for (const cuda::stream_ref s : ss) {
      co_await s;
    }
  }(std::move(streams)));
}

} // namespace cuawait::bench
