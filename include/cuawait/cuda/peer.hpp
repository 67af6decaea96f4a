// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `copy_peer`: an awaitable copy from one device's memory to another's. Between devices
//! that can reach each other's memory (`cudaDeviceCanAccessPeer`) it is a direct copy
//! (`cudaMemcpyPeerAsync`, peer access enabled once per pair, both ways where allowed);
//! otherwise it is staged through pinned host memory (device to host, host to device, on
//! the same stream); on one device it is a plain device-to-device copy.
//!
//! ```cpp
//! s.wait(producer_stream);  // order the copy after the work that writes src
//! co_await cuawait::cuda::copy_peer(s, dst, 1, src, 0, n);
//! ```

// stream.hpp first: it must be parsed before any header opens cuawait::cuda::detail.
#include "cuawait/cuda/stream.hpp"

#include "cuawait/cuda/operation.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <source_location>
#include <type_traits>

namespace cuawait::cuda {

//! How `copy_peer` moves the bytes.
enum class peer_path {
  automatic, //!< same device: device to device; peers: direct; else staged
  direct,    //!< `cudaMemcpyPeerAsync` (the driver stages it when the devices are not peers)
  staged,    //!< device to pinned host memory to device, on the copy's stream
};

//! True when `device` can access `peer`'s memory directly (`cudaDeviceCanAccessPeer`;
//! true for `device == peer`). Never throws: an error reads as false.
[[nodiscard]] bool can_access_peer(int device, int peer) noexcept;

//! Enables direct access between `a` and `b` in each direction `cudaDeviceCanAccessPeer`
//! allows, once per pair for the process (later calls return the first answer).
//! @returns true when `a` and `b` are the same device or peer access is on from `b` to `a`'s
//! memory.
//! @throws cuda_error naming the pair when enabling fails (other than "already enabled").
bool enable_peer_access(int a, int b);

namespace detail {
//! Enqueues the copy of `bytes` on `s` along `path`. @throws cuda_error "copy_peer: ..."
void enqueue_copy_peer(cudaStream_t s, void* dst, int dst_device, const void* src, int src_device,
                       std::size_t bytes, peer_path path, const std::source_location& where);
} // namespace detail

//! Copies `count` elements from `src` (memory of `src_device`) to `dst` (memory of
//! `dst_device`) on `s`, and returns its awaitable. The copy is ordered after the work
//! enqueued on `s` only: make `s` wait for the work that writes `src` on other streams
//! first. `s` may belong to either device (usually the destination's). The staged path
//! takes a block of the calling thread's pinned pool (`pinned_pool::current()`, given
//! back fenced on `s`) and copies through it in chunks of at most 32 MiB.
//! @throws cuda_error naming "copy_peer" and the CUDA call when a step cannot be
//! enqueued; no_device_context for a staged copy on a thread without a context.
template <class T>
operation copy_peer(stream_ref s, T* dst, int dst_device, const T* src, int src_device,
                    std::size_t count, peer_path path = peer_path::automatic,
                    std::source_location where = std::source_location::current()) {
  static_assert(std::is_trivially_copyable_v<T>, "copy_peer: T must be trivially copyable");
  detail::enqueue_copy_peer(s.get(), dst, dst_device, src, src_device, count * sizeof(T), path,
                            where);
  return {s.get(), "copy_peer", where};
}

} // namespace cuawait::cuda
