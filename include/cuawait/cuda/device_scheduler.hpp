// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `device_scheduler`: spreads independent jobs over the devices a `runtime` serves, each
//! to the device with the fewest jobs in flight. A job stays one sequential coroutine on
//! its device:
//!
//! ```cpp
//! cuawait::runtime rt({.devices = cuawait::cuda::all_devices()});
//! cuawait::cuda::device_scheduler sched(rt);
//! co_await sched.run([&](cuawait::cuda::device_lease& d) -> cuawait::task<float> {
//!   auto s = co_await d.acquire_stream();        // a stream of d's device
//!   cuawait::cuda::device_buffer<float> buf(n, s); // from d's memory pool
//!   co_await s.copy(buf, host);
//!   ...
//! });
//! ```

#include "cuawait/cuda/detail/load_balancer.hpp"
#include "cuawait/cuda/device_context.hpp"
#include "cuawait/detail/awaitable_traits.hpp"
#include "cuawait/task.hpp"

#include <concepts>
#include <cstddef>
#include <stdexcept>
#include <stop_token>
#include <type_traits>
#include <utility>
#include <vector>

namespace cuawait::cuda {

//! One job's claim on a device, from `device_scheduler::acquire`: counted in flight on that
//! device until destroyed. Move-only; the scheduler must outlive it.
class device_lease {
public:
  device_lease(device_lease&&) noexcept = default;
  device_lease& operator=(device_lease&&) noexcept = default;
  device_lease(const device_lease&) = delete;
  device_lease& operator=(const device_lease&) = delete;
  ~device_lease() = default;

  //! The index of the device among the scheduler's (`runtime::devices()` order).
  [[nodiscard]] std::size_t index() const noexcept { return m_token.slot(); }
  //! The device ordinal.
  [[nodiscard]] int device() const noexcept { return m_context->device(); }
  //! The device's context (reactor, pools, streams).
  [[nodiscard]] device_context& context() const noexcept { return *m_context; }
  //! Makes the device's context and the device current on the calling thread: call it after
  //! an await that is not GPU work of this device, before launching kernels or allocating
  //! from the default pools (see `device_context::make_current`). @throws cuda_error
  void make_current() const { m_context->make_current(); }
  //! `co_await d.acquire_stream()`: a stream of the device's pool, with the device current
  //! on return. @throws operation_cancelled, cuda_error
  [[nodiscard]] device_context::acquire_stream_awaiter
  acquire_stream(priority p = priority::normal, std::stop_token token = {}) const {
    return m_context->acquire_stream(p, std::move(token));
  }
  //! Ends the claim now (the job counts as done); the lease must not be used afterwards.
  void reset() noexcept { m_token.reset(); }

private:
  friend class device_scheduler;
  device_lease(device_context& ctx, ::cuawait::cuda::detail::load_balancer::token t) noexcept
      : m_context(&ctx), m_token(std::move(t)) {}

  device_context* m_context;
  ::cuawait::cuda::detail::load_balancer::token m_token;
};

//! Hands each job the device with the fewest jobs in flight (ties go round). Thread-safe.
//! The contexts (a runtime's) must outlive the scheduler, which must outlive its leases.
class device_scheduler {
public:
  //! Over `contexts` (e.g. `runtime::contexts()`).
  //! @throws std::invalid_argument when `contexts` is empty or holds nullptr.
  explicit device_scheduler(std::vector<device_context*> contexts)
      : m_contexts(std::move(contexts)), m_balance(checked_size(m_contexts)) {}
  //! Over every device `rt` (a `cuawait::runtime`) serves.
  template <class Runtime>
  requires requires(Runtime& r) {
    { r.contexts() } -> std::convertible_to<const std::vector<device_context*>&>;
  }
  explicit device_scheduler(Runtime& rt) : device_scheduler(rt.contexts()) {}
  device_scheduler(const device_scheduler&) = delete;
  device_scheduler& operator=(const device_scheduler&) = delete;

  //! The least-loaded device now, made current (its context and device) on the calling
  //! thread. @throws cuda_error when the device cannot be made current.
  [[nodiscard]] device_lease acquire() {
    device_lease d(*m_contexts[0], m_balance.acquire());
    d.m_context = m_contexts[d.index()];
    d.make_current();
    return d;
  }

  //! `co_await sched.run(f)`: runs `co_await f(lease)` on the least-loaded device (made
  //! current first) and yields its result; the device counts the job in flight until `f`'s
  //! awaitable completes. `f` is kept in the returned task's frame.
  template <class F>
  requires std::is_invocable_v<F&, device_lease&>
  auto run(F f)
      -> task<std::remove_cvref_t<await_result_t<std::invoke_result_t<F&, device_lease&>>>> {
    device_lease d = acquire();
    co_return co_await f(d);
  }

  //! Number of devices.
  [[nodiscard]] std::size_t size() const noexcept { return m_contexts.size(); }
  //! The context of device `i` (scheduler order).
  [[nodiscard]] device_context& context(std::size_t i) const { return *m_contexts.at(i); }
  //! Jobs in flight on device `i` now.
  [[nodiscard]] std::size_t in_flight(std::size_t i) const noexcept { return m_balance.load(i); }
  //! Jobs finished on device `i` so far.
  [[nodiscard]] std::size_t completed(std::size_t i) const noexcept {
    return m_balance.completed(i);
  }

private:
  static std::size_t checked_size(const std::vector<device_context*>& c) {
    for (device_context* x : c) {
      if (x == nullptr) {
        throw std::invalid_argument("cuawait::cuda::device_scheduler: null context");
      }
    }
    if (c.empty()) {
      throw std::invalid_argument("cuawait::cuda::device_scheduler: no device");
    }
    return c.size();
  }

  std::vector<device_context*> m_contexts;
  ::cuawait::cuda::detail::load_balancer m_balance;
};

} // namespace cuawait::cuda
