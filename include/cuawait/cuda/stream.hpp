// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! CUDA stream handles: `stream_ref` (non-owning, cheap to copy, wraps any `cudaStream_t`,
//! e.g. one owned by cuBLAS or PyTorch) and `stream` (owning, move-only).

#include "cuawait/cuda/error.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

namespace cuawait::cuda {

//! A non-owning view of a CUDA stream. Cheap to copy; the viewed stream must outlive every
//! use of the view. Default-constructed, it views the legacy default stream (0).
//!
//! Construction from `int` and `nullptr` is deleted so that `stream_ref{0}` cannot silently
//! name the default stream; write `stream_ref{cudaStream_t{}}` when that is meant.
class stream_ref {
public:
  //! Views the legacy default stream.
  constexpr stream_ref() noexcept = default;
  //! Views `s`; ownership stays with the caller.
  constexpr stream_ref(cudaStream_t s) noexcept : m_stream(s) {} // NOLINT: implicit on purpose
  stream_ref(int) = delete;
  stream_ref(std::nullptr_t) = delete;

  //! The native handle.
  [[nodiscard]] constexpr cudaStream_t get() const noexcept { return m_stream; }

  //! True when all work enqueued so far has completed (`cudaStreamQuery`).
  //! @throws cuda_error on any error other than `cudaErrorNotReady`.
  [[nodiscard]] bool ready() const {
    const cudaError_t e = cudaStreamQuery(m_stream);
    if (e == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    check(e, "stream query", "cudaStreamQuery");
    return true;
  }

  //! Blocks the calling thread until the stream is idle. For tests and shutdown paths; a
  //! coroutine writes `co_await s` instead.
  //! @throws cuda_error when enqueued work failed.
  void sync() const {
    check(cudaStreamSynchronize(m_stream), "stream sync", "cudaStreamSynchronize");
  }

  //! The stream's priority (lower numbers run first, CUDA's convention).
  //! @throws cuda_error
  [[nodiscard]] int priority() const {
    int p = 0;
    check(cudaStreamGetPriority(m_stream, &p), "stream priority", "cudaStreamGetPriority");
    return p;
  }

  friend constexpr bool operator==(stream_ref a, stream_ref b) noexcept {
    return a.m_stream == b.m_stream;
  }

private:
  cudaStream_t m_stream = nullptr;
};

//! Options for creating an owning `stream`.
struct stream_options {
  //! `cudaStreamNonBlocking`: no implicit synchronisation with the legacy default stream.
  bool non_blocking = true;
  //! CUDA priority; lower numbers are higher priority. Clamped by CUDA to the device's
  //! range (`cudaDeviceGetStreamPriorityRange`).
  int priority = 0;
};

//! An owning CUDA stream, move-only. Being a `stream_ref`, it offers every stream
//! operation. The destructor destroys the stream without waiting: CUDA lets enqueued work
//! finish, and the reactor never touches a stream handle after its last wait resolves.
//! Never throws from the destructor.
class stream : public stream_ref {
public:
  //! Creates a non-blocking stream of default priority on the current device.
  //! @throws cuda_error
  stream() : stream(stream_options{}) {}
  //! Creates a stream with `options` on the current device.
  //! @throws cuda_error
  explicit stream(stream_options options) : stream_ref(create(options)) {}
  stream(int) = delete;
  stream(std::nullptr_t) = delete;

  stream(stream&& other) noexcept : stream_ref(other.release()) {}
  stream& operator=(stream&& other) noexcept {
    if (this != &other) {
      destroy();
      static_cast<stream_ref&>(*this) = stream_ref(other.release());
    }
    return *this;
  }
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;
  ~stream() { destroy(); }

  //! Takes ownership of `s` (it will be destroyed by this object).
  [[nodiscard]] static stream from_native_handle(cudaStream_t s) noexcept { return stream(s, 0); }

  //! Gives up ownership; the caller destroys the returned handle.
  [[nodiscard]] cudaStream_t release() noexcept {
    const cudaStream_t s = get();
    static_cast<stream_ref&>(*this) = stream_ref(cudaStream_t{});
    return s;
  }

private:
  stream(cudaStream_t s, int /*adopt*/) noexcept : stream_ref(s) {}

  static cudaStream_t create(stream_options o) {
    cudaStream_t s = nullptr;
    CUAWAIT_CUDA_CHECK(
        "stream create",
        cudaStreamCreateWithPriority(&s, o.non_blocking ? cudaStreamNonBlocking : cudaStreamDefault,
                                     o.priority));
    return s;
  }
  void destroy() noexcept {
    if (get() != nullptr) {
      check_noexcept(cudaStreamDestroy(release()), "stream destroy", "cudaStreamDestroy");
    }
  }
};

} // namespace cuawait::cuda
