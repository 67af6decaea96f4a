// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Observers of the completion reactor's waits, and `observer_set`, the one dispatcher that
//! the reactor's tracing hooks (`reactor_trace`) call: it stamps each wait with an id and a
//! time once, then fans the event out to the observers added to it (a trace recorder, a
//! lifecycle log, NVTX ranges).
//!
//! ```cpp
//! cuawait::trace_recorder rec;
//! cuawait::observer_set observers;
//! observers.add(rec);
//! observers.install(reactor);            // before any wait is submitted
//! ... run ...
//! reactor.set_trace({});                 // before `observers` and `rec` go
//! rec.write_json("trace.json");
//! ```
//!
//! Nothing here runs unless installed: a reactor without hooks pays one branch per event.

#include "cuawait/detail/reactor_node.hpp"
#include "cuawait/reactor_stats.hpp"

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace cuawait {

class completion_reactor;

//! What happened to a wait.
enum class wait_event : std::uint8_t {
  suspend,  //!< a coroutine suspends on it (awaiting thread)
  ready,    //!< it had finished already: the coroutine did not suspend (awaiting thread)
  complete, //!< the reactor saw it finish, done or failed (polling thread)
  resume,   //!< its coroutine runs again (resuming thread)
  withdraw, //!< its coroutine was destroyed while it waited (destroying thread)
};

//! A short name of `e` ("suspend", "resume"...).
[[nodiscard]] const char* to_string(wait_event e) noexcept;

//! One event as observers see it. `node` is the reactor's node: its operation, lane, status,
//! executor and trace slot (`node.trace.id` == `id`, `node.trace.suspend_ns`).
struct wait_info {
  wait_event event = wait_event::suspend;
  std::uint64_t id = 0;     //!< the wait's id, unique in the process, never 0
  std::uint64_t now_ns = 0; //!< steady-clock time of the event
  std::uint32_t thread = 0; //!< the calling thread's ordinal (`observed_thread_ordinal()`)
  const detail::wait_node& node;
};

//! Receives wait events. Called on the threads named by `wait_event`, some under the
//! reactor's lock: keep it short, never call the reactor, never throw.
class wait_observer {
public:
  virtual void observe(const wait_info& e) noexcept = 0;

protected:
  ~wait_observer() = default;
};

//! Wait ids: the suspending thread's ordinal in bits 33 to 52, that thread's count of waits
//! (modulo 2^33) below, so that an id fits a double exactly (JSON readers, Perfetto).
inline constexpr int wait_id_count_bits = 33;

//! The ordinal of the thread that suspended on the wait `id`.
[[nodiscard]] constexpr std::uint32_t suspending_thread(std::uint64_t id) noexcept {
  return static_cast<std::uint32_t>(id >> wait_id_count_bits);
}

//! The suspending thread's count of waits at wait `id` (1, 2, ...): what sampling uses.
[[nodiscard]] constexpr std::uint64_t wait_sequence(std::uint64_t id) noexcept {
  return id & ((std::uint64_t{1} << wait_id_count_bits) - 1);
}

//! A small number (1, 2, ...) naming the calling thread for observers, stable for the
//! thread's life; threads are numbered in the order they first ask.
[[nodiscard]] std::uint32_t observed_thread_ordinal() noexcept;

//! The steady clock in nanoseconds, the clock of `wait_info::now_ns` and of the reactor.
[[nodiscard]] std::uint64_t observer_clock_ns() noexcept;

//! The dispatcher behind a reactor's tracing hooks. Observers may be added at any time
//! (thread-safe, visible to the next events); removing one, installing or uninstalling the
//! set must happen while no wait is in flight, because the reactor and its awaiters read the
//! hooks without synchronisation. Lifetime: the set and its observers must outlive their
//! installation (uninstall with `reactor.set_trace({})`).
class observer_set {
public:
  //! Observers at most.
  static constexpr std::size_t capacity = 4;

  observer_set() = default;
  observer_set(const observer_set&) = delete;
  observer_set& operator=(const observer_set&) = delete;

  //! Adds `o` (once). Returns false when the set is full.
  bool add(wait_observer& o) noexcept;
  //! Removes `o`; only while no wait is in flight. Returns false when it was not there.
  bool remove(wait_observer& o) noexcept;
  //! True when no observer is added.
  [[nodiscard]] bool empty() const noexcept;

  //! The hooks that call this set.
  [[nodiscard]] reactor_trace hooks() noexcept;
  //! `r.set_trace(hooks())`: call before submitting waits to `r`.
  void install(completion_reactor& r) noexcept;

  //! Dispatches one event (what the hooks call); public for sources other than the reactor.
  void dispatch(wait_event e, const detail::wait_node& w) noexcept;

private:
  std::array<std::atomic<wait_observer*>, capacity> m_observers{};
};

} // namespace cuawait
