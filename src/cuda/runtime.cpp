// SPDX-License-Identifier: Apache-2.0
#include "cuawait/cuda/runtime.hpp"

#include "cuawait/cuda/device.hpp"

#include <cuda_runtime_api.h>

#if defined(__linux__)
#include <pthread.h>
#endif

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

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

//! The devices served: `devices`, else the one `device` names (-1: the current one).
std::vector<int> served_devices(const runtime_options& o) {
  std::vector<int> d = o.devices.empty() ? std::vector<int>{o.device} : o.devices;
  for (int& id : d) {
    if (id < 0 && id != cuda::no_device) {
      id = cuda::device::current_id();
    }
  }
  return d;
}

cuda::device_context_options context_options(const runtime_options& o, int device) {
  cuda::device_context_options c;
  c.device = device;
  c.completion = o.strategy;
  c.reactor = with_thread(o.reactor, use_reactor_thread(o.reactor_thread));
  c.reactor.idle_spinners = idle_spinners(o.reactor.idle_spinners);
  c.regions = o.regions;
  c.streams = o.streams;
  return c;
}

//! The contexts of the devices after the first.
std::vector<std::unique_ptr<cuda::device_context>> more_contexts(const runtime_options& o,
                                                                 const std::vector<int>& devices) {
  std::vector<std::unique_ptr<cuda::device_context>> more;
  for (std::size_t i = 1; i < devices.size(); ++i) {
    more.push_back(std::make_unique<cuda::device_context>(context_options(o, devices[i])));
  }
  return more;
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
    : m_devices(served_devices(options)), m_context(context_options(options, m_devices.front())),
      m_more(more_contexts(options, m_devices)),
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
  m_slots.push_back(&m_context);
  for (const auto& c : m_more) {
    m_slots.push_back(c.get());
  }
  if (m_slots.size() > 1) {
    for (cuda::device_context* c : m_slots) {
      cuda::detail::set_context_peers(*c, &m_slots);
    }
  }
  completion_reactor& reactor = m_context.reactor().reactor();
  // First: it may throw (a bad CUAWAIT_LOG...) before anything is wired to the reactor.
  m_observability.attach_from_environment(reactor, {{&m_pool, "pool"}, {&m_loop, "run loop"}});
  m_doctor = doctor_at_exit();
  // The pool and the loop poll every device's reactor, the timers and the sources the user
  // gave (an MPI reactor), as one set.
  std::vector<idle_source*> sources;
  if (m_idle_polling) {
    for (cuda::device_context* c : m_slots) {
      sources.push_back(&c->reactor().reactor());
    }
  }
  sources.push_back(&m_timers);
  sources.insert(sources.end(), options.idle_sources.begin(), options.idle_sources.end());
  m_sources = std::make_unique<idle_source_set>(std::span<idle_source* const>(sources));
  for (idle_source* src : sources) {
    // A new earliest sleep shortens the parked poller's park: it must wake whoever spins.
    src->set_idle_waker(src == &m_timers ? &runtime::wake_pool_timers : &runtime::wake_pool,
                        &m_pool);
  }
  m_pool.set_idle_source(m_sources.get());
  m_loop.set_idle_source(m_sources.get()); // `run` polls too: its completions need no wake-up
  m_pool.set_timer_service(&m_timers);
  m_loop.set_timer_service(&m_timers);
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
  // Sleeps still pending (of coroutines nobody spawned) end now with operation_cancelled;
  // their coroutines run on the pool, or here on the loop, and may still await GPU work.
  m_timers.close();
  (void)m_loop.poll();
  // In-flight GPU work is waited for; coroutines it resumes run on the pool or the loop
  // (with several devices they may await another device's work: drain until every reactor
  // is idle; one device drains once, as it always did).
  for (bool again = true; again;) {
    again = false;
    for (cuda::device_context* c : m_slots) {
      completion_reactor& r = c->reactor().reactor();
      r.drain();
      (void)m_loop.poll();
    }
    for (std::size_t i = 0; m_slots.size() > 1 && i < m_slots.size(); ++i) {
      again = again || m_slots[i]->reactor().reactor().idle_pending();
    }
  }
  if (m_is_default) {
    cuda::detail::remove_default_context(&m_context);
  }
  m_loop.set_idle_source(nullptr); // nobody drives the loop any more
  m_pool.set_idle_source(nullptr); // returns once no worker polls the sources any more
  m_loop.set_timer_service(nullptr);
  m_pool.set_timer_service(nullptr);
  for (idle_source* s : *m_sources) {
    s->set_idle_waker(nullptr, nullptr);
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

// The CUDA layer's part of the doctor's snapshot (docs/DOCTOR.md): the strategy, waits on
// the default streams (lanes keyed by their `cudaStream_t`), the pinned pool's counters.
doctor_snapshot runtime::snapshot() const {
  doctor_snapshot s = doctor::snapshot(m_context.reactor().reactor(), &m_pool);
  s.strategy = cuda::to_string(m_context.reactor().kind());
  for (const lane_usage& lane : s.reactor.lane_waits) {
    const auto* key = static_cast<const void*>(lane.lane_key);
    if (key == static_cast<const void*>(cudaStreamLegacy)) {
      s.legacy_stream_waits += lane.waits;
    } else if (key == static_cast<const void*>(cudaStreamPerThread)) {
      s.per_thread_stream_waits += lane.waits;
    } else if (key == nullptr) {
      // Stream 0 is the legacy default stream unless this translation unit was built with
      // per-thread default streams; what the awaiting code was built with is not known.
#if defined(CUDA_API_PER_THREAD_DEFAULT_STREAM)
      s.per_thread_stream_waits += lane.waits;
#else
      s.legacy_stream_waits += lane.waits;
#endif
    }
  }
  s.pinned = m_context.pinned().stats();
  return s;
}

} // namespace cuawait
