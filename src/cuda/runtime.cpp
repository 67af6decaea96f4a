// SPDX-License-Identifier: Apache-2.0
#include "cuawait/runtime.hpp"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace cuawait {

namespace {
cuda::strategy chosen_strategy(const std::optional<cuda::strategy>& asked) {
  if (asked) {
    return *asked;
  }
  const char* env = std::getenv("CUAWAIT_STRATEGY");
  if (env == nullptr || *env == '\0') {
    return cuda::default_strategy;
  }
  if (const auto s = cuda::parse_strategy(env)) {
    return *s;
  }
  throw std::invalid_argument(std::string("CUAWAIT_STRATEGY=") + env +
                              ": not a completion strategy (event_poll, host_callback, "
                              "blocking_sync, timeline)");
}
} // namespace

runtime::runtime(runtime_options options)
    : m_pool(std::max<std::size_t>(options.threads, 1)),
      m_reactor(chosen_strategy(options.strategy), options.reactor) {
  m_previous = cuda::install_reactor(&m_reactor);
}

runtime::~runtime() {
  // Spawned tasks finish first; an exception nobody collected with join_spawned() is
  // dropped here (a destructor must not throw).
  try {
    m_loop.run(m_spawned.join());
  } catch (...) {
  }
  // In-flight GPU work is waited for; coroutines it resumes run on the pool or the loop.
  m_reactor.reactor().drain();
  (void)m_loop.poll();
  (void)cuda::install_reactor(m_previous);
  m_pool.shutdown();
}

} // namespace cuawait
