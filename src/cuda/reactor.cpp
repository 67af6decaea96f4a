// SPDX-License-Identifier: Apache-2.0
#include "cuawait/cuda/reactor.hpp"

#include <atomic>

namespace cuawait::cuda {

namespace {
std::unique_ptr<gpu_completion_source> make_source_or_fallback(strategy s) {
  try {
    return make_completion_source(s);
  } catch (const cuda_error&) {
    if (s != default_strategy) {
      throw;
    }
    return make_completion_source(strategy::event_poll);
  }
}
} // namespace

gpu_reactor::gpu_reactor(strategy s, reactor_options options)
    : m_source(make_source_or_fallback(s)),
      m_reactor(std::make_unique<completion_reactor>(*m_source, options)) {
  m_source->attach(m_reactor.get());
}

gpu_reactor::~gpu_reactor() {
  m_source->attach(nullptr); // late callbacks must not notify a dead reactor
  m_reactor.reset();         // stops its thread and cancels what is left before the source goes
}

namespace {
std::atomic<gpu_reactor*> g_installed{nullptr};
}

std::atomic<gpu_reactor*> g_process_wide{nullptr}; // set once the process-wide one exists

gpu_reactor& current_reactor() {
  if (gpu_reactor* r = g_installed.load(std::memory_order_acquire); r != nullptr) {
    return *r;
  }
  static gpu_reactor process_wide;
  g_process_wide.store(&process_wide, std::memory_order_release);
  return process_wide;
}

void detail::note_large_copy_slow(std::size_t bytes) noexcept {
  gpu_reactor* r = g_installed.load(std::memory_order_acquire);
  if (r == nullptr) {
    r = g_process_wide.load(std::memory_order_acquire);
  }
  if (r != nullptr) {
    r->source().note_large_copy(bytes);
  }
}

gpu_reactor* install_reactor(gpu_reactor* r) noexcept { return g_installed.exchange(r); }

} // namespace cuawait::cuda
