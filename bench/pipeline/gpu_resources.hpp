// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Minimal raw-CUDA owners for the baselines and the floor measurements: pinned host
//! memory, device memory, streams and events. The baselines are written in raw CUDA on
//! purpose (they stand for code written without cuawait), so they do not use its handles.

#include <cuawait/cuda/error.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstring>
#include <utility>

namespace cuawait::bench {

//! A move-only owner of one CUDA allocation or handle; `Release` frees it (never throws).
template <class T, cudaError_t (*Release)(T)>
class cuda_owner {
public:
  cuda_owner() noexcept = default;
  explicit cuda_owner(T h) noexcept : m_h(h) {}
  cuda_owner(cuda_owner&& o) noexcept : m_h(std::exchange(o.m_h, T{})) {}
  cuda_owner& operator=(cuda_owner&& o) noexcept {
    if (this != &o) {
      reset();
      m_h = std::exchange(o.m_h, T{});
    }
    return *this;
  }
  cuda_owner(const cuda_owner&) = delete;
  cuda_owner& operator=(const cuda_owner&) = delete;
  ~cuda_owner() { reset(); }

  [[nodiscard]] T get() const noexcept { return m_h; }
  void reset() noexcept {
    if (m_h != T{}) {
      cuda::check_noexcept("release", Release(std::exchange(m_h, T{})), "cuda free/destroy");
    }
  }

private:
  T m_h{};
};

inline cudaError_t free_host(void* p) { return cudaFreeHost(p); }
inline cudaError_t free_device(void* p) { return cudaFree(p); }
inline cudaError_t destroy_stream(cudaStream_t s) { return cudaStreamDestroy(s); }
inline cudaError_t destroy_event(cudaEvent_t e) { return cudaEventDestroy(e); }

using host_ptr = cuda_owner<void*, free_host>;
using device_ptr = cuda_owner<void*, free_device>;
using raw_stream = cuda_owner<cudaStream_t, destroy_stream>;
using raw_event = cuda_owner<cudaEvent_t, destroy_event>;

//! `bytes` of pinned host memory (`cudaHostAllocDefault`, or `flags`), zero-filled.
//! @throws cuda_error
inline host_ptr make_pinned(std::size_t bytes, unsigned flags = cudaHostAllocDefault) {
  void* p = nullptr;
  CUAWAIT_CUDA_CHECK("pinned alloc", cudaHostAlloc(&p, bytes, flags));
  host_ptr owner(p);
  std::memset(p, 0, bytes);
  return owner;
}

//! `bytes` of device memory, zero-filled. @throws cuda_error
inline device_ptr make_device(std::size_t bytes) {
  void* p = nullptr;
  CUAWAIT_CUDA_CHECK("device alloc", cudaMalloc(&p, bytes));
  device_ptr owner(p);
  CUAWAIT_CUDA_CHECK("device memset", cudaMemset(p, 0, bytes));
  return owner;
}

//! A non-blocking stream. @throws cuda_error
inline raw_stream make_stream() {
  cudaStream_t s = nullptr;
  CUAWAIT_CUDA_CHECK("stream create", cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return raw_stream(s);
}

//! An event; timing disabled unless `timing`. @throws cuda_error
inline raw_event make_event(bool timing = false) {
  cudaEvent_t e = nullptr;
  CUAWAIT_CUDA_CHECK("event create", cudaEventCreateWithFlags(&e, timing ? cudaEventDefault
                                                                         : cudaEventDisableTiming));
  return raw_event(e);
}

//! One pipeline's resources in the baselines: a stream and a host and a device buffer.
struct raw_slot {
  raw_stream stream;
  host_ptr host;
  device_ptr device;

  //! @throws cuda_error
  explicit raw_slot(std::size_t bytes)
      : stream(make_stream()), host(make_pinned(bytes)), device(make_device(bytes)) {}

  [[nodiscard]] float* h() const noexcept { return static_cast<float*>(host.get()); }
  [[nodiscard]] float* d() const noexcept { return static_cast<float*>(device.get()); }
};

} // namespace cuawait::bench
