// SPDX-License-Identifier: Apache-2.0
#include "cuawait/wait_observer.hpp"

#include "cuawait/completion_reactor.hpp"

#include <chrono>

namespace cuawait {

namespace {

std::atomic<std::uint32_t> g_thread_ordinals{0};

//! Per thread: its ordinal and the waits it has numbered. A wait id is the ordinal above the
//! thread's count (wait_id_count_bits), so ids are unique without a shared counter.
struct thread_ids {
  std::uint32_t ordinal = 0;
  std::uint64_t next = 0;
};
constinit thread_local thread_ids tl_ids{};

std::uint64_t next_wait_id() noexcept {
  const std::uint64_t ordinal = observed_thread_ordinal() & ((1U << 20) - 1);
  return (ordinal << wait_id_count_bits) | wait_sequence(++tl_ids.next);
}

void hook_suspend(void* set, const detail::wait_node& w) {
  static_cast<observer_set*>(set)->dispatch(wait_event::suspend, w);
}
void hook_complete(void* set, const detail::wait_node& w) {
  static_cast<observer_set*>(set)->dispatch(wait_event::complete, w);
}
void hook_resume(void* set, const detail::wait_node& w) {
  // resolved_ns == 0: the reactor never saw it pending (see reactor_trace::on_resume).
  static_cast<observer_set*>(set)->dispatch(
      w.resolved_ns == 0 ? wait_event::ready : wait_event::resume, w);
}
void hook_withdraw(void* set, const detail::wait_node& w) {
  static_cast<observer_set*>(set)->dispatch(wait_event::withdraw, w);
}

} // namespace

const char* to_string(wait_event e) noexcept {
  switch (e) {
  case wait_event::suspend:
    return "suspend";
  case wait_event::ready:
    return "ready";
  case wait_event::complete:
    return "complete";
  case wait_event::resume:
    return "resume";
  case wait_event::withdraw:
    return "withdraw";
  }
  return "?";
}

std::uint32_t observed_thread_ordinal() noexcept {
  if (tl_ids.ordinal == 0) {
    tl_ids.ordinal = g_thread_ordinals.fetch_add(1, std::memory_order_relaxed) + 1;
  }
  return tl_ids.ordinal;
}

std::uint64_t observer_clock_ns() noexcept {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

bool observer_set::add(wait_observer& o) noexcept {
  for (auto& slot : m_observers) {
    if (slot.load(std::memory_order_relaxed) == &o) {
      return true;
    }
  }
  for (auto& slot : m_observers) {
    wait_observer* expected = nullptr;
    if (slot.compare_exchange_strong(expected, &o, std::memory_order_release,
                                     std::memory_order_relaxed)) {
      return true;
    }
  }
  return false;
}

bool observer_set::remove(wait_observer& o) noexcept {
  for (auto& slot : m_observers) {
    wait_observer* expected = &o;
    if (slot.compare_exchange_strong(expected, nullptr)) {
      return true;
    }
  }
  return false;
}

bool observer_set::empty() const noexcept {
  for (const auto& slot : m_observers) {
    if (slot.load(std::memory_order_relaxed) != nullptr) {
      return false;
    }
  }
  return true;
}

reactor_trace observer_set::hooks() noexcept {
  reactor_trace t;
  t.context = this;
  t.on_suspend = &hook_suspend;
  t.on_complete = &hook_complete;
  t.on_resume = &hook_resume;
  t.on_withdraw = &hook_withdraw;
  return t;
}

void observer_set::install(completion_reactor& r) noexcept { r.set_trace(hooks()); }

void observer_set::dispatch(wait_event e, const detail::wait_node& w) noexcept {
  std::uint64_t now = 0;
  if (e == wait_event::suspend) {
    now = observer_clock_ns();
    w.trace.id = next_wait_id();
    w.trace.suspend_ns = now;
  } else if (w.trace.id == 0) {
    return; // suspended before the set was installed: not traced
  } else if (e == wait_event::complete && w.resolved_ns != 0) {
    now = w.resolved_ns; // the reactor's own reading: one clock read fewer under its lock
  } else {
    now = observer_clock_ns();
  }
  const wait_info info{e, w.trace.id, now, observed_thread_ordinal(), w};
  for (auto& slot : m_observers) {
    if (wait_observer* o = slot.load(std::memory_order_acquire); o != nullptr) {
      o->observe(info);
    }
  }
}

} // namespace cuawait
