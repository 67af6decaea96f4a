// SPDX-License-Identifier: Apache-2.0
#include "cuawait/cuda/device_context.hpp"

#include "cuawait/cuda/device.hpp"
#include "cuawait/cuda/gate.hpp"
#include "cuawait/cuda/region.hpp"

#include "cuawait/cuda/detail/lane_registry.hpp"

#include "release_thread.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

namespace cuawait::cuda {

namespace {

thread_local device_context* tl_context = nullptr;
std::atomic<device_context*> g_default{nullptr};

strategy chosen_strategy(const std::optional<strategy>& asked) {
  if (asked) {
    return *asked;
  }
  const char* env = std::getenv("CUAWAIT_STRATEGY");
  if (env == nullptr || *env == '\0') {
    return default_strategy;
  }
  if (const auto s = parse_strategy(env)) {
    return *s;
  }
  throw std::invalid_argument(std::string("CUAWAIT_STRATEGY=") + env +
                              ": not a completion strategy (event_poll, host_callback, "
                              "blocking_sync, timeline, stream_poll)");
}

//! Makes `device` current for the lifetime of the guard, restoring the previous one.
class device_guard {
public:
  explicit device_guard(int device) : m_previous(device::current_id()) {
    if (device != m_previous) {
      set_device(device);
    }
  }
  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;
  ~device_guard() { (void)cudaSetDevice(m_previous); }

private:
  int m_previous;
};

int resolve(int device) { return device < 0 ? device::current_id() : device; }

//! The live contexts, told when a stream or event is destroyed. Never destroyed itself: a
//! stream in static storage may be destroyed after any static object.
struct context_registry {
  std::mutex mutex;
  std::vector<device_context*> live;
  std::atomic<std::size_t> count{0};
};

context_registry& registry() {
  static auto* const r = new context_registry;
  return *r;
}

} // namespace

no_device_context::no_device_context()
    : std::logic_error(
          "cuawait: no device context on this thread: await GPU work inside a "
          "cuawait::runtime (its pool or its run loop), or create a cuda::device_context and "
          "name it with cuda::context_scope (this thread) or cuda::default_context_scope "
          "(threads without one)") {}

device_context::device_context(device_context_options options)
    : m_device(options.device == no_device ? no_device : resolve(options.device)),
      m_events(cudaEventDisableTiming, m_device), m_stream_options(options.streams) {
  const bool gpu = m_device != no_device;
  std::optional<device_guard> on;
  if (gpu) {
    on.emplace(m_device);
  }
  m_gates = std::make_unique<detail::gate_template_pool>();
  m_release = std::make_unique<detail::release_thread>(m_device);
  // Without a GPU, the strategy that needs nothing from CUDA until a wait is armed.
  const strategy s = gpu ? chosen_strategy(options.completion) : strategy::event_poll;
  reactor_options r = options.reactor;
  r.on_thread_start = [this, user = std::move(r.on_thread_start)] {
    if (m_device != no_device) {
      (void)cudaSetDevice(m_device);
    }
    tl_context = this; // a coroutine resumed inline here may await GPU work again
    if (user) {
      user();
    }
  };
  m_reactor = std::make_unique<gpu_reactor>(s, std::move(r));
  m_pinned = std::make_unique<pinned_pool>(options.pinned);
  if (gpu) {
    m_memory = std::make_unique<device_memory_pool>(device_memory_pool_options{m_device});
  }
  m_regions = std::make_unique<region_cache>(options.regions);
  context_registry& reg = registry();
  const std::lock_guard lock(reg.mutex);
  reg.live.push_back(this);
  reg.count.fetch_add(1, std::memory_order_release);
}

device_context::~device_context() {
  {
    context_registry& reg = registry();
    const std::lock_guard lock(reg.mutex);
    reg.live.erase(std::remove(reg.live.begin(), reg.live.end(), this), reg.live.end());
    reg.count.fetch_sub(1, std::memory_order_release);
  }
  detail::remove_default_context(this);
  if (tl_context == this) {
    tl_context = nullptr;
  }
  m_streams.reset(); // no lease may remain (the pool's rule); CUDA finishes their work
  m_regions.reset(); // executable graphs: CUDA lets launched ones finish
  m_reactor.reset(); // cancels what is left, before the pools its waits may name go
  m_pinned.reset();
  m_memory.reset();
  m_release.reset(); // runs every release still queued: everything is freed on return
  m_gates.reset();   // gates' graphs, returned by the releases above
}

void device_context::drain_releases() noexcept { m_release->drain(); }

stream_pool& device_context::streams() {
  std::call_once(m_streams_once, [this] {
    stream_pool_options o = m_stream_options;
    o.device = m_device;
    m_streams = std::make_unique<stream_pool>(o);
  });
  return *m_streams;
}

void device_context::make_current() {
  if (tl_context != nullptr) { // a thread that uses the default context keeps using it
    tl_context = this;
  }
  if (::cuawait::cuda::device::current_id() != m_device) {
    set_device(m_device);
  }
}

void detail::reenter_context(device_context& ctx) noexcept {
  if (tl_context != nullptr) { // see make_current
    tl_context = &ctx;
  }
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess || current != ctx.device()) {
    (void)cudaSetDevice(ctx.device()); // it was usable when the wait was submitted
  }
}

gpu_reactor& detail::reactor_for_stream(cudaStream_t s, device_context** entered) {
  device_context& here = current_context();
  if (here.m_peers == nullptr) {
    return here.reactor(); // one device: the thread's context, as `current_reactor()`
  }
  // Several devices: the context of the stream's device (the legacy and per-thread default
  // streams name the current device's). A stream of a device not served stays with the
  // thread's context: its marker then fails to enqueue with CUDA's error.
  device_context* target = &here;
  int d = -1;
  if (cudaStreamGetDevice(s, &d) != cudaSuccess) {
    (void)cudaGetLastError(); // the marker reports the stream's error
  } else if (d != here.device()) {
    for (device_context* c : *here.m_peers) {
      if (c->device() == d) {
        target = c;
        break;
      }
    }
  }
  reenter_context(*target); // the marker is enqueued with the stream's device current
  *entered = target;
  return target->reactor();
}

void detail::set_context_peers(device_context& ctx,
                               const std::vector<device_context*>* peers) noexcept {
  ctx.m_peers = peers;
}

detail::restore_device::restore_device(bool active) noexcept {
  if (active && cudaGetDevice(&m_device) != cudaSuccess) {
    (void)cudaGetLastError();
    m_device = -1;
  }
}

detail::restore_device::~restore_device() {
  if (m_device >= 0) {
    (void)cudaSetDevice(m_device);
  }
}

detail::release_thread* detail::release_thread_of(device_context& ctx) noexcept {
  return ctx.m_release.get();
}

device_context* current_context_or_null() noexcept {
  if (tl_context != nullptr) {
    return tl_context;
  }
  return g_default.load(std::memory_order_acquire);
}

device_context& current_context() {
  if (device_context* c = current_context_or_null(); c != nullptr) {
    return *c;
  }
  throw no_device_context();
}

context_scope::context_scope(device_context& ctx) noexcept : m_previous(tl_context) {
  tl_context = &ctx;
}

context_scope::~context_scope() { tl_context = m_previous; }

default_context_scope::default_context_scope(device_context& ctx) noexcept
    : m_previous(g_default.exchange(&ctx, std::memory_order_acq_rel)) {}

default_context_scope::~default_context_scope() {
  g_default.store(m_previous, std::memory_order_release);
}

void detail::set_thread_context(device_context* ctx) noexcept { tl_context = ctx; }

bool detail::install_default_context_if_none(device_context* ctx) noexcept {
  device_context* expected = nullptr;
  return g_default.compare_exchange_strong(expected, ctx, std::memory_order_acq_rel);
}

void detail::remove_default_context(device_context* ctx) noexcept {
  device_context* expected = ctx;
  (void)g_default.compare_exchange_strong(expected, nullptr, std::memory_order_acq_rel);
}

namespace {
//! Every live context forgets the lane keyed by `key` (and, for a stream, what its strategy
//! keeps for it).
void forget_everywhere(const void* key, cudaStream_t stream) noexcept {
  context_registry& reg = registry();
  if (reg.count.load(std::memory_order_acquire) == 0) {
    return;
  }
  const std::lock_guard lock(reg.mutex);
  for (device_context* c : reg.live) {
    (void)c->reactor().reactor().forget_lane(key);
    if (stream != nullptr) {
      c->reactor().source().forget_stream(stream);
    }
  }
}
} // namespace

void detail::forget_stream(cudaStream_t s) noexcept { forget_everywhere(s, s); }

void detail::forget_event(cudaEvent_t e) noexcept { forget_everywhere(e, nullptr); }

gpu_reactor& current_reactor() { return current_context().reactor(); }

void detail::note_large_copy_slow(std::size_t bytes) noexcept {
  if (device_context* c = current_context_or_null(); c != nullptr) {
    c->reactor().source().note_large_copy(bytes);
  }
}

pinned_pool& pinned_pool::current() { return current_context().pinned(); }

device_memory_pool& device_memory_pool::current() { return current_context().memory(); }

} // namespace cuawait::cuda
