// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `idle_source_set`: several idle sources polled as one, so that one `thread_pool` can
//! find GPU completions and MPI completions (or any other polled kind) with the same idle
//! workers:
//!
//! ```cpp
//! cuawait::idle_source_set sources{&gpu_reactor, &mpi_reactor};
//! pool.set_idle_source(&sources);
//! ```

#include "cuawait/idle_source.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <initializer_list>
#include <span>
#include <stdexcept>

namespace cuawait {

//! A fixed set of up to `max_sources` idle sources, polled in turn. Each member keeps its
//! own contract (one poller at a time, never blocking), so the set needs no lock of its own.
//!
//! Lifetime: the members must outlive the set, and the set must outlive its use by an
//! executor (`thread_pool::set_idle_source(nullptr)` before destroying it). Each member
//! still wakes the pool itself when it gets new work (e.g. `completion_reactor::
//! set_idle_waker`, `mpi::reactor::set_idle_waker`).
class idle_source_set final : public idle_source {
public:
  //! Most sources one set holds.
  static constexpr std::size_t max_sources = 16;

  //! @throws std::invalid_argument for a null member or more than `max_sources` of them.
  idle_source_set(std::initializer_list<idle_source*> sources)
      : idle_source_set(std::span<idle_source* const>(sources.begin(), sources.size())) {}
  //! The same from a run-time list (e.g. the reactors of every device a runtime serves).
  //! @throws std::invalid_argument for a null member or more than `max_sources` of them.
  explicit idle_source_set(std::span<idle_source* const> sources) {
    if (sources.size() > max_sources) {
      throw std::invalid_argument("cuawait::idle_source_set: too many sources");
    }
    for (idle_source* s : sources) {
      if (s == nullptr) {
        throw std::invalid_argument("cuawait::idle_source_set: null source");
      }
      m_sources[m_count++] = s;
    }
  }
  idle_source_set(const idle_source_set&) = delete;
  idle_source_set& operator=(const idle_source_set&) = delete;
  ~idle_source_set() = default;

  //! Polls every member once; returns the total resolved.
  std::size_t poll_idle() noexcept override {
    std::size_t n = 0;
    for (std::size_t i = 0; i < m_count; ++i) {
      n += m_sources[i]->poll_idle();
    }
    return n;
  }

  //! Polls every member once from a busy thread (`idle_source::poll_busy`).
  std::size_t poll_busy() noexcept override {
    std::size_t n = 0;
    for (std::size_t i = 0; i < m_count; ++i) {
      n += m_sources[i]->poll_busy();
    }
    return n;
  }

  //! True when any member wants its pollers to keep spinning.
  [[nodiscard]] bool idle_keep_spinning() const noexcept override {
    return std::any_of(begin(), end(), [](idle_source* s) { return s->idle_keep_spinning(); });
  }

  //! True when any member has work pending.
  [[nodiscard]] bool idle_pending() const noexcept override {
    return std::any_of(begin(), end(), [](idle_source* s) { return s->idle_pending(); });
  }

  //! True when any member has work ready now.
  [[nodiscard]] bool idle_due() const noexcept override {
    return std::any_of(begin(), end(), [](idle_source* s) { return s->idle_due(); });
  }

  //! The members' wants added up (saturating: one that wants every idle thread makes the
  //! set want them all), since each member's pending work needs its own spinners.
  [[nodiscard]] std::size_t idle_spinners_wanted() const noexcept override {
    constexpr auto all = static_cast<std::size_t>(-1);
    std::size_t sum = 0;
    for (idle_source* s : *this) {
      const std::size_t w = s->idle_spinners_wanted();
      if (w >= all - sum) {
        return all;
      }
      sum += w;
    }
    return sum;
  }

  //! The shortest period among the members with work pending (or among all, when none has).
  [[nodiscard]] std::chrono::nanoseconds idle_park_period() const noexcept override {
    auto best = std::chrono::nanoseconds::max();
    auto any = std::chrono::nanoseconds::max();
    for (idle_source* s : *this) {
      const auto p = s->idle_park_period();
      any = std::min(any, p);
      if (s->idle_pending()) {
        best = std::min(best, p);
      }
    }
    return best != std::chrono::nanoseconds::max() ? best : any;
  }

  //! Number of members.
  [[nodiscard]] std::size_t size() const noexcept { return m_count; }
  [[nodiscard]] idle_source* const* begin() const noexcept { return m_sources.data(); }
  [[nodiscard]] idle_source* const* end() const noexcept { return m_sources.data() + m_count; }

private:
  std::array<idle_source*, max_sources> m_sources{};
  std::size_t m_count = 0;
};

} // namespace cuawait
