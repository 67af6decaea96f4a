// SPDX-License-Identifier: Apache-2.0
#include "release_thread.hpp"

#include "cuawait/cuda/device_context.hpp"
#include "cuawait/cuda/error.hpp"

#if defined(__linux__)
#include <pthread.h>
#endif

#include <utility>

namespace cuawait::cuda::detail {

namespace {
thread_local bool tl_on_release_thread = false;

//! The release thread of the calling thread's context, or nullptr (no context, or the
//! release thread itself: it runs its own releases inline).
release_thread* current_release_thread() noexcept {
  if (tl_on_release_thread) {
    return nullptr;
  }
  device_context* c = current_context_or_null();
  return c == nullptr ? nullptr : release_thread_of(*c);
}

void post_or_run(release_item item) noexcept {
  release_thread* t = current_release_thread();
  if (t == nullptr || !t->post(item)) {
    release_thread::run(item);
  }
}
} // namespace

release_thread::~release_thread() {
  {
    const std::lock_guard lock(m_mutex);
    m_stopping = true;
  }
  m_wake.notify_all();
  if (m_thread.joinable()) {
    m_thread.join();
  }
  for (release_item& item : m_queue) { // none unless the thread never started
    run(item);
  }
}

bool release_thread::post(release_item item) noexcept {
  try {
    const std::lock_guard lock(m_mutex);
    if (m_stopping) {
      return false;
    }
    if (!m_thread.joinable()) {
      m_thread = std::thread([this] { main(); });
    }
    m_queue.push_back(item);
    ++m_posted;
  } catch (...) { // out of memory, or no thread: the caller runs the release itself
    return false;
  }
  m_wake.notify_one();
  return true;
}

void release_thread::drain() noexcept {
  std::unique_lock lock(m_mutex);
  const std::size_t target = m_posted;
  m_done.wait(lock, [&] { return m_completed >= target; });
}

std::size_t release_thread::completed() const noexcept {
  const std::lock_guard lock(m_mutex);
  return m_completed;
}

void release_thread::run(release_item& item) noexcept {
  if (item.fence != nullptr) {
    // Success or an error after which the GPU runs nothing more: either way no work still
    // uses the memory.
    (void)try_check(cudaEventSynchronize(item.fence));
    (void)try_check(cudaEventDestroy(item.fence));
    item.fence = nullptr;
  }
  if (item.device_idle) {
    (void)try_check(cudaDeviceSynchronize());
  }
  if (item.fn != nullptr) {
    item.fn(item.p);
  }
}

void release_thread::main() noexcept {
  tl_on_release_thread = true;
  (void)cudaSetDevice(m_device);
#if defined(__linux__)
  (void)pthread_setname_np(pthread_self(), "cuawait-release");
#endif
  std::unique_lock lock(m_mutex);
  for (;;) {
    m_wake.wait(lock, [&] { return m_stopping || !m_queue.empty(); });
    if (m_queue.empty()) {
      return; // stopping, and everything posted has run
    }
    release_item item = m_queue.front();
    m_queue.pop_front();
    lock.unlock();
    run(item);
    lock.lock();
    ++m_completed;
    m_done.notify_all();
  }
}

void release_later(release_fn fn, void* p) noexcept { post_or_run({fn, p, nullptr, false}); }

void release_after(cudaStream_t after, release_fn fn, void* p) noexcept {
  cudaEvent_t ev = nullptr;
  cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  if (e == cudaSuccess) {
    e = cudaEventRecord(ev, after);
    if (e != cudaSuccess) {
      (void)try_check(cudaEventDestroy(ev));
      ev = nullptr;
    }
  }
  if (e != cudaSuccess) {
    check_noexcept("deferred release: fence the stream", e, "cudaEventRecord");
    post_or_run({fn, p, nullptr, true});
    return;
  }
  post_or_run({fn, p, ev, false});
}

void release_after_device_idle(release_fn fn, void* p) noexcept {
  post_or_run({fn, p, nullptr, true});
}

void free_host(void* p) noexcept {
  check_noexcept("deferred release", cudaFreeHost(p), "cudaFreeHost");
}

void free_device(void* p) noexcept { check_noexcept("deferred release", cudaFree(p), "cudaFree"); }

bool on_release_thread() noexcept { return tl_on_release_thread; }

} // namespace cuawait::cuda::detail
