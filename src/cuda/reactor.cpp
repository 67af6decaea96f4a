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

} // namespace cuawait::cuda
