// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! CUDA event handles: `event_ref` (non-owning) and `event` (owning, move-only).
//! `co_await ev` (see operation.hpp) waits for the work the event last recorded.
//!
//! Use after move: a moved-from (or released) `event` holds a sentinel; recording it,
//! waiting for it, querying it, `get()`, and the same on an `event_ref` copied from it after
//! the move throw `cuda_error` ("use of a moved-from cuda::event") before any CUDA call.
//! Destroying it or move-assigning into it is fine.

#include "cuawait/cuda/detail/lane_registry.hpp"
#include "cuawait/cuda/detail/unique_handle.hpp"
#include "cuawait/cuda/error.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <source_location>
#include <utility>

namespace cuawait::cuda {

class event_ref;

namespace detail {
//! The owner traits of `event` (see unique_handle.hpp).
struct event_traits {
  using handle_type = cudaEvent_t;
  using base_type = event_ref;
  static cudaEvent_t& storage(event_ref& e) noexcept;
  static cudaEvent_t moved_from() noexcept { return sentinel_handle<cudaEvent_t>(); }
  static bool is_moved_from(cudaEvent_t e) noexcept { return is_sentinel_handle(e); }
  static void destroy(cudaEvent_t e) noexcept {
    forget_event(e);
    check_noexcept("event destroy", cudaEventDestroy(e), "cudaEventDestroy");
  }
  [[noreturn]] static void throw_moved_from(cudaEvent_t /*e*/, std::source_location where) {
    throw cuda_error::moved_from("cuda::event", where);
  }
};
} // namespace detail

//! A non-owning view of a CUDA event; the event must outlive the view's uses. A view of a
//! moved-from `event` refuses every use with `cuda_error` naming the event.
class event_ref {
public:
  constexpr event_ref() noexcept = default;
  //! Views `e`; ownership stays with the caller.
  constexpr event_ref(cudaEvent_t e) noexcept : m_event(e) {} // NOLINT: implicit on purpose
  event_ref(int) = delete;
  event_ref(std::nullptr_t) = delete;

  //! The native handle, for a call into CUDA.
  //! @throws cuda_error ("use of a moved-from cuda::event") for a view of a moved-from event.
  [[nodiscard]] cudaEvent_t get() const { return detail::checked<detail::event_traits>(m_event); }

  //! True when the recorded work has finished (`cudaEventQuery`).
  //! @throws cuda_error on any error other than "not ready".
  [[nodiscard]] bool ready() const {
    const cudaError_t e = cudaEventQuery(get());
    if (e == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    check("event query", e, "cudaEventQuery");
    return true;
  }
  //! Blocks the calling thread until the recorded work finished (tests, shutdown).
  //! @throws cuda_error
  void sync() const { check("event sync", cudaEventSynchronize(get()), "cudaEventSynchronize"); }

  friend constexpr bool operator==(event_ref a, event_ref b) noexcept {
    return a.m_event == b.m_event;
  }

private:
  friend struct detail::event_traits;
  cudaEvent_t m_event = nullptr;
};

inline cudaEvent_t& detail::event_traits::storage(event_ref& e) noexcept { return e.m_event; }

//! An owning CUDA event, move-only; created with `cudaEventDisableTiming` unless flags are
//! given. The destructor never throws (CUDA defers the release if work still records it).
class event : public detail::unique_handle<detail::event_traits> {
  using owner = detail::unique_handle<detail::event_traits>;

public:
  //! Creates an event with `cudaEventDisableTiming`.
  //! @throws cuda_error
  event() : event(static_cast<unsigned>(cudaEventDisableTiming), flags_tag{}) {}
  //! Creates an event with `cudaEventCreateWithFlags(flags)`.
  //! @throws cuda_error
  [[nodiscard]] static event with_flags(unsigned flags) { return event(flags, flags_tag{}); }
  event(int) = delete;
  event(std::nullptr_t) = delete;

  //! Moves the event; `o` is left moved-from (see the file comment).
  event(event&& o) noexcept = default;
  //! Destroys this event, then takes `o`'s; `o` is left moved-from.
  event& operator=(event&& o) noexcept = default;
  ~event() = default;

  //! Takes ownership of `e`.
  [[nodiscard]] static event from_native_handle(cudaEvent_t e) noexcept { return event(e); }
  //! Gives up ownership; this object is then moved-from.
  using owner::release;

private:
  struct flags_tag {};
  explicit event(cudaEvent_t e) noexcept : owner(e) {}
  event(unsigned flags, flags_tag) : owner(create(flags)) {}
  static cudaEvent_t create(unsigned flags) {
    cudaEvent_t e = nullptr;
    CUAWAIT_CUDA_CHECK("event create", cudaEventCreateWithFlags(&e, flags));
    return e;
  }
};

} // namespace cuawait::cuda
