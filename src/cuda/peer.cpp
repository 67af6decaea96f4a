// SPDX-License-Identifier: Apache-2.0
#include "cuawait/cuda/peer.hpp"

#include "cuawait/cuda/pinned_pool.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace cuawait::cuda {

namespace {

//! Pinned bytes a staged copy goes through at most (copies loop over the block).
constexpr std::size_t staging_chunk = std::size_t{32} << 20;

//! Makes `device` current until destroyed, restoring the previous one.
class on_device {
public:
  explicit on_device(int device, const std::source_location& where) {
    check("copy_peer: current device", cudaGetDevice(&m_previous), "cudaGetDevice", where);
    if (m_previous != device) {
      check("copy_peer: select device", cudaSetDevice(device), "cudaSetDevice", where);
    }
  }
  on_device(const on_device&) = delete;
  on_device& operator=(const on_device&) = delete;
  ~on_device() { (void)cudaSetDevice(m_previous); }

private:
  int m_previous = 0;
};

//! The answers of `enable_peer_access`, per ordered pair (smaller ordinal first).
struct peer_table {
  std::mutex mutex;
  std::map<std::pair<int, int>, bool> enabled;
};

peer_table& peers() {
  static auto* const t = new peer_table; // never destroyed: copies may run at exit
  return *t;
}

//! Lets `device` access `peer`'s memory when CUDA allows it; true when it now can.
bool enable_one_way(int device, int peer) {
  if (!can_access_peer(device, peer)) {
    return false;
  }
  const on_device here(device, std::source_location::current());
  const cudaError_t e = cudaDeviceEnablePeerAccess(peer, 0);
  if (e == cudaErrorPeerAccessAlreadyEnabled) {
    (void)cudaGetLastError();
    return true;
  }
  const std::string what =
      "enable peer access " + std::to_string(device) + " -> " + std::to_string(peer);
  check(what.c_str(), e, "cudaDeviceEnablePeerAccess");
  return true;
}

void staged_copy(cudaStream_t s, void* dst, const void* src, std::size_t bytes,
                 const std::source_location& where) {
  // The block's fence (an event) is created and recorded with the stream's device current.
  int stream_device = 0;
  check("copy_peer: stream device", cudaStreamGetDevice(s, &stream_device), "cudaStreamGetDevice",
        where);
  const on_device here(stream_device, where);
  pinned_pool& pool = pinned_pool::current();
  pinned_pool::block b = pool.allocate(std::min(bytes, staging_chunk));
  auto* out = static_cast<unsigned char*>(dst);
  const auto* in = static_cast<const unsigned char*>(src);
  try {
    // One stream: each chunk's host-to-device copy runs before the next device-to-host
    // copy overwrites the block.
    for (std::size_t done = 0; done < bytes;) {
      const std::size_t n = std::min(b.bytes, bytes - done);
      check("copy_peer: stage to host", cudaMemcpyAsync(b.ptr, in + done, n, cudaMemcpyDefault, s),
            "cudaMemcpyAsync", where);
      check("copy_peer: stage to device",
            cudaMemcpyAsync(out + done, b.ptr, n, cudaMemcpyDefault, s), "cudaMemcpyAsync", where);
      done += n;
    }
  } catch (...) {
    pool.deallocate(b, stream_ref(s)); // reused once what was enqueued has run
    throw;
  }
  pool.deallocate(b, stream_ref(s));
}

} // namespace

bool can_access_peer(int device, int peer) noexcept {
  if (device == peer) {
    return true;
  }
  int can = 0;
  if (cudaDeviceCanAccessPeer(&can, device, peer) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return can != 0;
}

bool enable_peer_access(int a, int b) {
  if (a == b) {
    return true;
  }
  peer_table& t = peers();
  const std::lock_guard lock(t.mutex);
  const auto key = std::minmax(a, b);
  if (const auto it = t.enabled.find(key); it != t.enabled.end()) {
    return it->second;
  }
  const bool to_a = enable_one_way(b, a); // b reads or writes a's memory
  const bool to_b = enable_one_way(a, b);
  t.enabled.emplace(key, to_a || to_b);
  return to_a || to_b;
}

void detail::enqueue_copy_peer(cudaStream_t s, void* dst, int dst_device, const void* src,
                               int src_device, std::size_t bytes, peer_path path,
                               const std::source_location& where) {
  if (bytes == 0) {
    return;
  }
  if (path == peer_path::automatic) {
    if (dst_device == src_device) {
      check("copy_peer: same device", cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s),
            "cudaMemcpyAsync", where);
      note_copy(bytes);
      return;
    }
    path = enable_peer_access(dst_device, src_device) ? peer_path::direct : peer_path::staged;
  }
  if (path == peer_path::direct) {
    check("copy_peer", cudaMemcpyPeerAsync(dst, dst_device, src, src_device, bytes, s),
          "cudaMemcpyPeerAsync", where);
  } else {
    staged_copy(s, dst, src, bytes, where);
  }
  note_copy(bytes);
}

} // namespace cuawait::cuda
