// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `memory_gate`: bounds the bytes of image buffers in flight in the coroutine mode, and
//! the images themselves. An image takes one of the image places, then a share of the
//! budget (in 1 MiB units of an `async_semaphore`), before its buffers are allocated, and
//! gives both back when it is done. A share is taken whole, in one
//! `acquire(n)`, so two half-served images can never hold the budget between them and wait
//! for each other, and a large image at the head of the queue is not starved by small ones.

#include <cuawait/async_semaphore.hpp>
#include <cuawait/task.hpp>

#include <algorithm>
#include <cstddef>
#include <utility>

namespace cuawait::images {

class memory_gate {
public:
  //! Bytes per semaphore permit: rounding a share up wastes at most 1 MiB.
  static constexpr std::size_t unit = std::size_t{1} << 20;

  //! A share of the budget, returned on destruction. Move-only.
  class share {
  public:
    share() = default;
    share(memory_gate* gate, std::ptrdiff_t units) noexcept : m_gate(gate), m_units(units) {}
    share(share&& o) noexcept
        : m_gate(std::exchange(o.m_gate, nullptr)), m_units(std::exchange(o.m_units, 0)) {}
    share& operator=(share&& o) noexcept {
      if (this != &o) {
        release();
        m_gate = std::exchange(o.m_gate, nullptr);
        m_units = std::exchange(o.m_units, 0);
      }
      return *this;
    }
    share(const share&) = delete;
    share& operator=(const share&) = delete;
    ~share() { release(); }

    //! Returns the share now (waiters resume inside this call, on this thread).
    void release() noexcept {
      if (m_gate != nullptr && m_units > 0) {
        m_gate->m_permits.release(m_units);
        m_gate->m_places.release(1);
      }
      m_gate = nullptr;
      m_units = 0;
    }

  private:
    memory_gate* m_gate = nullptr;
    std::ptrdiff_t m_units = 0;
  };

  //! A gate of `budget_bytes` (at least one unit) and `max_images` images at once (0: as
  //! many as the budget lets in).
  explicit memory_gate(std::size_t budget_bytes, std::size_t max_images = 0)
      : m_total(static_cast<std::ptrdiff_t>(std::max<std::size_t>(1, budget_bytes / unit))),
        m_permits(m_total),
        m_places(max_images == 0 ? m_total
                                 : static_cast<std::ptrdiff_t>(std::min<std::size_t>(
                                       max_images, static_cast<std::size_t>(m_total)))) {}

  //! `co_await gate.acquire(bytes)`: waits for an image place, then until `bytes` (capped at
  //! the whole budget, so one image always fits) are free, and takes them. (Every share
  //! takes at least one unit, so the budget alone never lets in more than `m_total`
  //! images: that many places leave the bound to the bytes.)
  [[nodiscard]] task<share> acquire(std::size_t bytes) {
    const auto units = std::min<std::ptrdiff_t>(
        m_total, static_cast<std::ptrdiff_t>(std::max<std::size_t>(1, (bytes + unit - 1) / unit)));
    co_await m_places.acquire(1);
    struct place_held { // given back if this frame dies before the share is made
      memory_gate* gate;
      ~place_held() {
        if (gate != nullptr) {
          gate->m_places.release(1);
        }
      }
    } held{this};
    co_await m_permits.acquire(units);
    held.gate = nullptr;
    co_return share{this, units};
  }

private:
  std::ptrdiff_t m_total;
  async_semaphore m_permits;
  async_semaphore m_places;
};

} // namespace cuawait::images
