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
                              "blocking_sync, timeline, stream_poll)");
}
} // namespace

namespace {
reactor_options with_thread(reactor_options r, bool thread) {
  r.start_thread = thread;
  return r;
}

//! `CUAWAIT_REACTOR_THREAD=1` forces the dedicated reactor thread (=0 forbids it), so one
//! binary can compare both designs.
bool use_reactor_thread(bool asked) {
  const char* env = std::getenv("CUAWAIT_REACTOR_THREAD");
  if (env == nullptr || *env == '\0') {
    return asked;
  }
  return std::string(env) != "0";
}
} // namespace

runtime::runtime(runtime_options options)
    : m_pool(std::max<std::size_t>(options.threads, 1)),
      m_reactor(chosen_strategy(options.strategy),
                with_thread(options.reactor, use_reactor_thread(options.reactor_thread))),
      m_idle_polling(!use_reactor_thread(options.reactor_thread)) {
  // First: it may throw (a bad CUAWAIT_LOG...) before anything is wired to the reactor.
  m_observability.attach_from_environment(m_reactor.reactor(),
                                          {{&m_pool, "pool"}, {&m_loop, "run loop"}});
  if (m_idle_polling) {
    m_reactor.reactor().set_idle_waker(&runtime::wake_pool, &m_pool);
    m_pool.set_idle_source(&m_reactor.reactor());
  }
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
  if (m_idle_polling) {
    m_pool.set_idle_source(nullptr); // returns once no worker polls the reactor any more
    m_reactor.reactor().set_idle_waker(nullptr, nullptr);
  }
  m_pool.shutdown();
  m_observability.finish(m_reactor.reactor()); // writes CUAWAIT_TRACE, removes the hooks
}

} // namespace cuawait
