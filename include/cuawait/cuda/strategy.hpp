// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! How the reactor learns that GPU work finished: the completion strategies, selectable at
//! run time. Each enqueues a marker behind the awaited work (`arm`) and answers the
//! reactor's queries about the oldest wait of each stream.
//!
//! | strategy        | marker at `co_await`                 | query by the reactor           |
//! | --------------- | ------------------------------------ | ------------------------------ |
//! | `event_poll`    | `cudaEventRecord` of a pooled event  | `cudaEventQuery`               |
//! | `host_callback` | `cudaLaunchHostFunc` setting a flag  | read the flag (callback wakes) |
//! | `blocking_sync` | record a blocking-sync event; a      | read the flag (helper wakes)   |
//! |                 | helper thread `cudaEventSynchronize`s |                                |
//! | `stream_poll`   | none (an event on the default        | `cudaStreamQuery` of the lane  |
//! |                 | streams)                             |                                |
//! | `timeline`      | `cuStreamWriteValue64` of a per-     | read one pinned word: resolves |
//! |                 | stream ticket into pinned memory     | every ticket <= its value      |
//! |                 | (an event record while large copies  | (`cudaEventQuery` for those)   |
//! |                 | are in flight)                       |                                |
//!
//! No strategy resumes a coroutine or calls the reactor's lock from a CUDA callback
//! thread: callbacks only set a flag and `notify()` the reactor.

#include "cuawait/completion_source.hpp"
#include "cuawait/cuda/error.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <optional>
#include <string_view>

namespace cuawait {
class completion_reactor;
}

namespace cuawait::cuda {

//! The completion strategies (see the file comment).
enum class strategy { event_poll, host_callback, blocking_sync, timeline, stream_poll };

//! The strategy used when none is asked for, chosen by measurement on the H200 machine
//! (docs/REACTOR_BENCH.md): `timeline` matched raw `cudaEventQuery` spinning in latency and
//! was the only one under 0.5 µs of reactor CPU per completion. Where the driver lacks
//! `cuStreamWriteValue64`, a reactor asked for the default falls back to `event_poll`.
inline constexpr strategy default_strategy = strategy::timeline;

//! "event_poll", "host_callback", "blocking_sync", "timeline", "stream_poll".
[[nodiscard]] const char* to_string(strategy s) noexcept;
//! The strategy named `name` (as `to_string` writes it), or nothing.
[[nodiscard]] std::optional<strategy> parse_strategy(std::string_view name) noexcept;

//! A completion source that can also mark GPU work on a stream.
//!
//! Convention for waits: `w.source_data == nullptr` means `w.token` is a `cudaEvent_t`
//! recorded by someone else (`co_await event`), which every strategy answers with
//! `cudaEventQuery`.
class gpu_completion_source : public completion_source {
public:
  virtual ~gpu_completion_source() = default;

  //! Enqueues on `s` a marker that completes after all work enqueued on `s` so far, and
  //! fills `w.token`/`w.source_data`. Called on the awaiting thread, not under the
  //! reactor's lock. @throws cuda_error
  virtual void arm(cudaStream_t s, ::cuawait::detail::wait_node& w) = 0;

  //! The reactor to notify from completion callbacks (strategies that notify).
  virtual void attach(completion_reactor* r) noexcept { (void)r; }

  //! A copy of `bytes` (at least `detail::large_copy_bytes`) was enqueued on some stream.
  //! `timeline` uses event markers for a while then: its stream-written marker waits behind
  //! copies in flight on other streams (measured: two pipelines of 32 MiB jobs ran at half
  //! the PCIe floor, as if their copies never overlapped). Safe from any thread.
  virtual void note_large_copy(std::size_t bytes) noexcept { (void)bytes; }

  //! `s` is being destroyed: drop what the source keeps for it (the reactor has already
  //! forgotten the lane, or keeps it while waits are pending). Safe from any thread.
  virtual void forget_stream(cudaStream_t s) noexcept { (void)s; }

  //! Per-stream state the source keeps now (e.g. timeline counters); for tests.
  [[nodiscard]] virtual std::size_t stream_state_count() const noexcept { return 0; }

  //! Which strategy this is.
  [[nodiscard]] virtual strategy kind() const noexcept = 0;

  //! The completion state a CUDA status stands for.
  [[nodiscard]] static completion_status status_of(cudaError_t e) noexcept {
    if (e == cudaSuccess) {
      return {completion_state::done, 0};
    }
    if (e == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return {};
    }
    if (cuda_error::is_sticky(e)) {
      return {completion_state::context_lost, static_cast<int>(e)};
    }
    (void)cudaGetLastError();
    return {completion_state::failed, static_cast<int>(e)};
  }
};

//! A new source for strategy `s`. @throws cuda_error (e.g. `timeline` without the driver
//! entry point), std::bad_alloc
[[nodiscard]] std::unique_ptr<gpu_completion_source> make_completion_source(strategy s);

} // namespace cuawait::cuda
