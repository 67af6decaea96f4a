// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Releases that may block (`cudaFree`, `cudaFreeHost`, waiting for a stream) handed to the
//! release thread of the calling thread's device context, so that they never run on a
//! thread that resumes coroutines. Without a context, or when the hand-off itself fails
//! (out of memory), they run on the calling thread, which then blocks as before.

#include <cuda_runtime_api.h>

namespace cuawait::cuda::detail {

//! What a deferred release does with its pointer. Must not throw.
using release_fn = void (*)(void* p) noexcept;

//! Runs `fn(p)` on the release thread: at once (in order with the releases before it).
void release_later(release_fn fn, void* p) noexcept;
//! Runs `fn(p)` on the release thread once the work enqueued on `after` so far has finished
//! (an event recorded now; when it cannot be recorded, once the whole device is idle).
void release_after(cudaStream_t after, release_fn fn, void* p) noexcept;
//! Runs `fn(p)` on the release thread once the whole device is idle (`cudaDeviceSynchronize`):
//! the last resort when the streams that use `p` cannot be fenced.
void release_after_device_idle(release_fn fn, void* p) noexcept;

//! `cudaFreeHost(p)`, reported and never thrown: a `release_fn`.
void free_host(void* p) noexcept;
//! `cudaFree(p)`, reported and never thrown: a `release_fn`.
void free_device(void* p) noexcept;

//! True on a device context's release thread.
[[nodiscard]] bool on_release_thread() noexcept;

} // namespace cuawait::cuda::detail
