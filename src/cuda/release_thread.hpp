// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The release thread of a device context: runs releases that block (frees that synchronize,
//! waits for streams) in order, off the threads that resume coroutines. See
//! `cuawait/cuda/detail/deferred_release.hpp` for the entry points.

#include "cuawait/cuda/detail/deferred_release.hpp"

#include <cuda_runtime_api.h>

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <thread>

namespace cuawait::cuda::detail {

//! One release: `fn(p)` once `fence` completed (when set) or the device is idle (when
//! `device_idle`).
struct release_item {
  release_fn fn = nullptr;
  void* p = nullptr;
  cudaEvent_t fence = nullptr;
  bool device_idle = false;
};

//! A thread that runs `release_item`s in order. The thread starts with the first item, so a
//! context that never releases anything costs no thread.
class release_thread {
public:
  explicit release_thread(int device) noexcept : m_device(device) {}
  release_thread(const release_thread&) = delete;
  release_thread& operator=(const release_thread&) = delete;
  //! Runs every item still queued, then joins the thread.
  ~release_thread();

  //! Queues `item`; false when it could not (out of memory, or no thread could be started):
  //! the caller then runs it itself.
  [[nodiscard]] bool post(release_item item) noexcept;
  //! Returns once every item posted before the call has run.
  void drain() noexcept;
  //! Items run so far.
  [[nodiscard]] std::size_t completed() const noexcept;

  //! Runs `item` on the calling thread (waits for its fence or the device first).
  static void run(release_item& item) noexcept;

private:
  void main() noexcept;

  int m_device;
  mutable std::mutex m_mutex;
  std::condition_variable m_wake;
  std::condition_variable m_done;
  std::deque<release_item> m_queue;
  std::size_t m_posted = 0;
  std::size_t m_completed = 0;
  bool m_stopping = false;
  std::thread m_thread;
};

} // namespace cuawait::cuda::detail
