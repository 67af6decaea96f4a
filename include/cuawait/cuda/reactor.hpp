// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The GPU completion reactor: a completion strategy joined to a `completion_reactor`, and
//! the calling thread's reactor GPU awaitables use.

#include "cuawait/completion_reactor.hpp"
#include "cuawait/cuda/strategy.hpp"
#include "cuawait/reactor_stats.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>

namespace cuawait::cuda {

class device_context;

//! A completion strategy and the reactor that polls it, with its thread.
class gpu_reactor {
public:
  //! @throws cuda_error when the strategy cannot be set up (`default_strategy` falls back
  //! to `event_poll` instead).
  explicit gpu_reactor(strategy s = default_strategy, reactor_options options = {});
  gpu_reactor(const gpu_reactor&) = delete;
  gpu_reactor& operator=(const gpu_reactor&) = delete;
  //! Stops polling; waits still pending are cancelled (see `completion_reactor`).
  ~gpu_reactor();

  [[nodiscard]] completion_reactor& reactor() noexcept { return *m_reactor; }
  [[nodiscard]] gpu_completion_source& source() noexcept { return *m_source; }
  [[nodiscard]] strategy kind() const noexcept { return m_source->kind(); }
  [[nodiscard]] reactor_stats stats() const { return m_reactor->stats(); }

private:
  std::unique_ptr<gpu_completion_source> m_source;
  std::unique_ptr<completion_reactor> m_reactor;
};

//! The reactor of the calling thread's device context (`current_context().reactor()`, see
//! cuawait/cuda/device_context.hpp). @throws no_device_context when the thread has none.
[[nodiscard]] gpu_reactor& current_reactor();

namespace detail {
//! The reactor a wait on `s` goes to: the calling thread's context's (as
//! `current_reactor()`), or, when that context is one of several a runtime serves, the
//! context of `s`'s device, which it then makes the thread's context and current device
//! and stores in `*entered` (left alone otherwise). @throws no_device_context
[[nodiscard]] gpu_reactor& reactor_for_stream(cudaStream_t s, device_context** entered);
//! Makes `ctx` the calling thread's context and its device current (after a coroutine
//! whose wait `reactor_for_stream` routed resumes, maybe on another thread). Never throws.
void reenter_context(device_context& ctx) noexcept;

//! Copies at least this large are reported to the reactor's source (`note_large_copy`).
inline constexpr std::size_t large_copy_bytes = std::size_t{1} << 20;

//! Tells the source of the calling thread's context (if any) that a copy of `bytes` was enqueued,
//! so that it can choose completion markers that do not wait behind other streams' copies (see
//! `gpu_completion_source::note_large_copy`). Never throws.
void note_large_copy_slow(std::size_t bytes) noexcept;

//! Called by every copy cuawait enqueues; costs one comparison for small copies.
inline void note_copy(std::size_t bytes) noexcept {
  if (bytes >= large_copy_bytes) {
    note_large_copy_slow(bytes);
  }
}
} // namespace detail

} // namespace cuawait::cuda
