// SPDX-License-Identifier: Apache-2.0
#include "cuawait/runtime.hpp"

#if defined(__linux__)
#include <pthread.h>
#endif

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <stdexcept>
#include <string>

namespace cuawait {

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

//! `CUAWAIT_IDLE_SPINNERS=N` (or `all`) overrides `reactor_options::idle_spinners`, so one
//! binary can compare spinning policies.
std::size_t idle_spinners(std::size_t asked) {
  const char* env = std::getenv("CUAWAIT_IDLE_SPINNERS");
  if (env == nullptr || *env == '\0') {
    return asked;
  }
  if (std::string(env) == "all") {
    return static_cast<std::size_t>(-1);
  }
  try {
    return static_cast<std::size_t>(std::stoul(env));
  } catch (const std::exception&) {
    throw std::invalid_argument(std::string("CUAWAIT_IDLE_SPINNERS=") + env +
                                ": not a number of threads (or 'all')");
  }
}

//! `CUAWAIT_DOCTOR=1` prints the doctor's report when the runtime is destroyed.
bool doctor_at_exit() {
  const char* env = std::getenv("CUAWAIT_DOCTOR");
  if (env == nullptr || *env == '\0' || std::string(env) == "0") {
    return false;
  }
  if (std::string(env) != "1") {
    throw std::invalid_argument(std::string("CUAWAIT_DOCTOR=") + env + ": expected 0 or 1");
  }
  return true;
}

cuda::device_context_options context_options(const runtime_options& o) {
  cuda::device_context_options c;
  c.device = o.device;
  c.completion = o.strategy;
  c.reactor = with_thread(o.reactor, use_reactor_thread(o.reactor_thread));
  c.reactor.idle_spinners = idle_spinners(o.reactor.idle_spinners);
  c.regions = o.regions;
  return c;
}
//! Names the calling thread (Linux; at most 15 characters), for profilers and debuggers.
void name_this_thread(const char* name) noexcept {
#if defined(__linux__)
  (void)pthread_setname_np(pthread_self(), name);
#else
  (void)name;
#endif
}
} // namespace

runtime::runtime(runtime_options options)
    : m_context(context_options(options)),
      m_pool(std::max<std::size_t>(options.threads, 1),
             [ctx = &m_context](std::size_t) {
               if (ctx->device() != cuda::no_device) {
                 (void)cudaSetDevice(ctx->device()); // the context's device was usable just now
               }
               cuda::detail::set_thread_context(ctx);
               name_this_thread("cuawait-pool"); // for profilers, and tools that tell workers
             }),
      // Derived from the reactor actually made (the environment is read once, above).
      m_idle_polling(!m_context.reactor().reactor().options().start_thread) {
  completion_reactor& reactor = m_context.reactor().reactor();
  // First: it may throw (a bad CUAWAIT_LOG...) before anything is wired to the reactor.
  m_observability.attach_from_environment(reactor, {{&m_pool, "pool"}, {&m_loop, "run loop"}});
  m_doctor = doctor_at_exit();
  std::vector<idle_source*> sources;
  if (m_idle_polling) {
    sources.push_back(&reactor);
  }
  sources.insert(sources.end(), options.idle_sources.begin(), options.idle_sources.end());
  if (!options.idle_sources.empty()) {
    m_sources.emplace(std::span<idle_source* const>(sources)); // checks them; may throw
  }
  for (idle_source* s : sources) {
    s->set_idle_waker(&runtime::wake_pool, &m_pool);
  }
  if (!sources.empty()) {
    idle_source* const polled = m_sources ? &*m_sources : sources.front();
    m_pool.set_idle_source(polled);
    m_loop.set_idle_source(polled); // `run` polls too: its completions need no wake-up
  }
  m_is_default = cuda::detail::install_default_context_if_none(&m_context);
}

runtime::~runtime() {
  completion_reactor& reactor = m_context.reactor().reactor();
  const cuda::context_scope here(m_context);
  // Spawned tasks finish first; an exception nobody collected with join_spawned() is
  // dropped here (a destructor must not throw).
  try {
    m_loop.run(m_spawned.join());
  } catch (...) {
  }
  // In-flight GPU work is waited for; coroutines it resumes run on the pool or the loop.
  reactor.drain();
  (void)m_loop.poll();
  if (m_is_default) {
    cuda::detail::remove_default_context(&m_context);
  }
  if (m_idle_polling || m_sources) {
    m_loop.set_idle_source(nullptr); // nobody drives the loop any more
    m_pool.set_idle_source(nullptr); // returns once no worker polls the sources any more
    if (m_sources) {
      for (idle_source* s : *m_sources) {
        s->set_idle_waker(nullptr, nullptr);
      }
    } else {
      reactor.set_idle_waker(nullptr, nullptr);
    }
  }
  m_pool.shutdown();
  if (m_doctor) {
    try {
      std::fputs(report().to_string().c_str(), stderr);
    } catch (...) { // out of memory: a destructor reports nothing rather than throw
    }
  }
  m_observability.finish(reactor); // writes CUAWAIT_TRACE, removes the hooks
}

} // namespace cuawait
