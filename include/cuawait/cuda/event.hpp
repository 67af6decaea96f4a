// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! CUDA event handles: `event_ref` (non-owning) and `event` (owning, move-only).
//! `co_await ev` (see operation.hpp) waits for the work the event last recorded.

#include "cuawait/cuda/detail/lane_registry.hpp"
#include "cuawait/cuda/error.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

namespace cuawait::cuda {

//! A non-owning view of a CUDA event; the event must outlive the view's uses.
class event_ref {
public:
  constexpr event_ref() noexcept = default;
  //! Views `e`; ownership stays with the caller.
  constexpr event_ref(cudaEvent_t e) noexcept : m_event(e) {} // NOLINT: implicit on purpose
  event_ref(int) = delete;
  event_ref(std::nullptr_t) = delete;

  //! The native handle.
  [[nodiscard]] constexpr cudaEvent_t get() const noexcept { return m_event; }

  //! True when the recorded work has finished (`cudaEventQuery`).
  //! @throws cuda_error on any error other than "not ready".
  [[nodiscard]] bool ready() const {
    const cudaError_t e = cudaEventQuery(m_event);
    if (e == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    check(e, "event query", "cudaEventQuery");
    return true;
  }
  //! Blocks the calling thread until the recorded work finished (tests, shutdown).
  //! @throws cuda_error
  void sync() const { check(cudaEventSynchronize(m_event), "event sync", "cudaEventSynchronize"); }

  friend constexpr bool operator==(event_ref a, event_ref b) noexcept {
    return a.m_event == b.m_event;
  }

private:
  cudaEvent_t m_event = nullptr;
};

//! An owning CUDA event, move-only; created with `cudaEventDisableTiming` unless flags are
//! given. The destructor never throws (CUDA defers the release if work still records it).
class event : public event_ref {
public:
  //! Creates an event with `cudaEventDisableTiming`.
  //! @throws cuda_error
  event() : event(static_cast<unsigned>(cudaEventDisableTiming), flags_tag{}) {}
  //! Creates an event with `cudaEventCreateWithFlags(flags)`.
  //! @throws cuda_error
  [[nodiscard]] static event with_flags(unsigned flags) { return event(flags, flags_tag{}); }
  event(int) = delete;
  event(std::nullptr_t) = delete;

  event(event&& o) noexcept : event_ref(o.release()) {}
  event& operator=(event&& o) noexcept {
    if (this != &o) {
      destroy();
      static_cast<event_ref&>(*this) = event_ref(o.release());
    }
    return *this;
  }
  event(const event&) = delete;
  event& operator=(const event&) = delete;
  ~event() { destroy(); }

  //! Takes ownership of `e`.
  [[nodiscard]] static event from_native_handle(cudaEvent_t e) noexcept { return event(e); }
  //! Gives up ownership.
  [[nodiscard]] cudaEvent_t release() noexcept {
    const cudaEvent_t e = get();
    static_cast<event_ref&>(*this) = event_ref(cudaEvent_t{});
    return e;
  }

private:
  struct flags_tag {};
  explicit event(cudaEvent_t e) noexcept : event_ref(e) {}
  event(unsigned flags, flags_tag) : event_ref(create(flags)) {}
  static cudaEvent_t create(unsigned flags) {
    cudaEvent_t e = nullptr;
    CUAWAIT_CUDA_CHECK("event create", cudaEventCreateWithFlags(&e, flags));
    return e;
  }
  void destroy() noexcept {
    if (get() != nullptr) {
      detail::forget_event(get());
      check_noexcept(cudaEventDestroy(release()), "event destroy", "cudaEventDestroy");
    }
  }
};

} // namespace cuawait::cuda
