// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The intrusive node that represents one pending wait in the completion reactor. It lives
//! inside the awaiter, i.e. in the waiting coroutine's frame: a wait allocates nothing.

#include "cuawait/executor.hpp"

#include <atomic>
#include <coroutine>
#include <cstdint>

namespace cuawait {

//! What became of a wait.
enum class completion_state : std::uint8_t {
  pending,      //!< not finished yet
  done,         //!< finished successfully
  failed,       //!< finished with `completion_status::error`
  context_lost, //!< the device context died (sticky error): every wait fails so
  cancelled,    //!< the reactor shut down, or a stop request withdrew the wait, before the
                //!< work finished (the awaiter knows which: see `reactor_wait::stopped`)
};

//! A completion state and the source's error code (a `cudaError_t` for CUDA sources).
struct completion_status {
  completion_state state = completion_state::pending;
  int error = 0;
};

namespace detail {

//! `completion_status::error` of a wait ended by `completion_reactor::stop_all` (state
//! `cancelled`): a stop request for every wait at once, not a shutdown.
inline constexpr int stopped_by_request = -1;

struct reactor_lane;

//! Scratch space of the tracing hooks (`reactor_trace`): `on_suspend` may write it, the
//! later hooks of the same wait read it. The reactor and the awaiters never touch it. The
//! hooks get the node as `const`, hence `mutable` (the node itself is never const).
struct wait_trace_slot {
  std::uint64_t id = 0;         //!< a wait id (0: not traced)
  std::uint64_t suspend_ns = 0; //!< steady-clock time of the suspension
  std::uint64_t range = 0;      //!< a profiler's range handle (NVTX)
};

//! Where a node is, guarded by the reactor's lock. `stopped`: a stop request claimed it
//! and it left its lane; the reactor's next pass over the stop requests resumes it.
enum class node_state : std::uint8_t { idle, waiting, ready_inline, resolved, stopped };

//! Who ends a cancellable wait (`wait_node::stop_claim`, read and written through
//! `std::atomic_ref`): the reactor (its work finished, failed, or `stop_all`), or a stop
//! request, whichever claims it first; the loser leaves the node alone.
enum class stop_claim : std::uint8_t {
  open,    //!< nobody yet
  reactor, //!< the reactor ends it with the work's outcome
  queued,  //!< a stop request claimed it and queued it on the reactor's stop list
  taken,   //!< the reactor took it off that list (and resumes it as stopped)
};

//! One pending wait. The awaiter fills the first block before submitting it; the reactor
//! owns the second block while the node is submitted.
struct wait_node {
  // Filled by the awaiter.
  const void* lane_key = nullptr;  //!< the lane (CUDA stream) the work runs on, in order
  std::uint64_t token = 0;         //!< what the source needs to answer (event, ticket...)
  void* source_data = nullptr;     //!< more of the same, source-defined
  const char* operation = nullptr; //!< what is awaited ("kernel launch"...), for errors/traces
  //! Set by the source (or nullptr): a word that the finishing work writes after whatever
  //! `query` reads, with a value never written to it before, and that many lanes share (a
  //! doorbell). While it keeps the value the reactor last read, none of the lanes whose
  //! oldest wait names it has progressed, so a sweep skips them all with one read.
  std::uint64_t* bell = nullptr;
  std::coroutine_handle<> handle; //!< the coroutine to resume
  executor* exec = nullptr;       //!< where to resume it; nullptr: on the reactor's thread
  priority prio = priority::normal;
  //! The worker of `exec` it suspended on (`executor::post_near`), or `~0u`.
  std::uint32_t home = ~std::uint32_t{0};
  //! Set by an awaiter that a stop request can end: the flag of the arrival handshake
  //! between its `await_suspend` and whoever ends the wait (see `reactor_wait` in
  //! completion_reactor.hpp). The second to set it resumes the coroutine. nullptr: no handshake,
  //! the reactor resumes the coroutine as soon as it resolves the wait.
  std::atomic<bool>* arrival = nullptr;
  //! Of cancellable waits (`arrival` set): see `stop_claim`. Atomic through `atomic_ref`
  //! (a plain member keeps the node copyable before it is submitted).
  alignas(std::atomic_ref<stop_claim>::required_alignment) stop_claim claim = stop_claim::open;
  //! The next node of the reactor's lock-free list of stop requests (written by the stop
  //! request that claimed the node, before it publishes the node).
  wait_node* stop_next = nullptr;

  // Owned by the reactor.
  wait_node* prev = nullptr;
  wait_node* next = nullptr;
  reactor_lane* lane = nullptr;
  node_state state = node_state::idle;
  completion_status status{};
  std::uint64_t submitted_ns = 0; //!< steady-clock time it joined its lane (load statistics)
  std::uint64_t resolved_ns = 0;  //!< steady-clock time the reactor saw it finish

  // Owned by the tracing hooks.
  mutable wait_trace_slot trace{};
};

} // namespace detail
} // namespace cuawait
