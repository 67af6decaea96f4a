// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `release_order`: the streams a buffer's memory must outlive. Its primary stream is where
//! the release is ordered (cudaFreeAsync, or the fence event of a pinned block); streams
//! added with `free_after` are joined into the primary one (an event on each, waited on by
//! the primary) just before the release, so the release follows their work too.

#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>

namespace cuawait::cuda::detail {

//! Extra streams one buffer can be ordered after, besides its own.
inline constexpr std::size_t max_release_streams = 3;

//! Plain value (copyable), owned by a buffer.
class release_order {
public:
  release_order() noexcept = default;
  explicit release_order(cudaStream_t primary) noexcept : m_primary(primary), m_has_primary(true) {}

  [[nodiscard]] bool has_primary() const noexcept { return m_has_primary; }
  [[nodiscard]] cudaStream_t primary() const noexcept { return m_primary; }
  [[nodiscard]] std::size_t extra_count() const noexcept { return m_extra_count; }

  //! Orders the release on `s` from now on; extra streams stay.
  void set_primary(cudaStream_t s) noexcept {
    m_primary = s;
    m_has_primary = true;
  }

  //! Adds `s` to the streams the release must follow. Without a primary stream, `s`
  //! becomes it.
  //! @throws std::length_error when `max_release_streams` extra streams are already added.
  void add(cudaStream_t s);

  //! Makes the primary stream wait for the work enqueued so far on every extra stream,
  //! then forgets them. Never throws: a failure is reported (check_noexcept) and false is
  //! returned; the caller must then release only once the device is idle
  //! (`release_after_device_idle`), never on the calling thread.
  [[nodiscard]] bool join() noexcept;

private:
  cudaStream_t m_primary{};
  std::array<cudaStream_t, max_release_streams> m_extra{};
  std::uint8_t m_extra_count = 0;
  bool m_has_primary = false;
};

} // namespace cuawait::cuda::detail
