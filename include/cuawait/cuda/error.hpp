// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The CUDA error model: one exception type, a throwing check, an asserting check for
//! destructors and noexcept paths, and a status-returning form.
//!
//! Argument order: every check names the operation first, then what it checks, then the
//! API: `check("copy", cudaMemcpyAsync(...), "cudaMemcpyAsync")`,
//! `check_noexcept("stream destroy", cudaStreamDestroy(s), "cudaStreamDestroy")`,
//! `CUAWAIT_CUDA_CHECK("copy", cudaMemcpyAsync(...))` (the API named from the expression),
//! and likewise `check_status` (library_status.hpp) and `mpi::check`.

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <source_location>
#include <stdexcept>
#include <string>

namespace cuawait::cuda {

//! A failed CUDA call or GPU operation. `what()` names the operation, the CUDA API, the
//! error and where it was raised, e.g.
//! "copy H2D (cudaMemcpyAsync): cudaErrorInvalidValue: invalid argument [stream.hpp:120]".
class cuda_error : public std::runtime_error {
public:
  cuda_error(cudaError_t code, const char* operation, const char* api,
             std::source_location where = std::source_location::current())
      : std::runtime_error(format(code, operation, api, where)), m_code(code),
        m_operation(operation ? operation : ""), m_api(api ? api : ""), m_where(where) {}

  //! The CUDA error code.
  [[nodiscard]] cudaError_t code() const noexcept { return m_code; }
  //! The cuawait operation that failed ("copy H2D", "kernel launch", "event wait"...).
  [[nodiscard]] const std::string& operation() const noexcept { return m_operation; }
  //! The CUDA API that reported the error ("cudaMemcpyAsync"...).
  [[nodiscard]] const std::string& api() const noexcept { return m_api; }
  //! Where the check was made.
  [[nodiscard]] const std::source_location& where() const noexcept { return m_where; }
  //! True for errors after which the CUDA context is unusable (sticky errors).
  [[nodiscard]] bool context_lost() const noexcept { return is_sticky(m_code); }

  //! The error for a use of a moved-from (or released) handle, thrown before any CUDA call:
  //! `cudaErrorInvalidResourceHandle`, operation "use of a moved-from <handle>", e.g.
  //! "use of a moved-from cuda::stream".
  [[nodiscard]] static cuda_error
  moved_from(const char* handle, std::source_location where = std::source_location::current()) {
    return cuda_error(cudaErrorInvalidResourceHandle,
                      (std::string("use of a moved-from ") + handle).c_str(), "", where);
  }

  //! Whether `code` is one of the errors that corrupt the context for good.
  static bool is_sticky(cudaError_t code) noexcept {
    switch (code) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
      return true;
    default:
      return false;
    }
  }

private:
  static std::string format(cudaError_t code, const char* operation, const char* api,
                            const std::source_location& where) {
    std::string s = operation ? operation : "CUDA call";
    if (api && *api) {
      s += " (";
      s += api;
      s += ")";
    }
    s += ": ";
    s += cudaGetErrorName(code);
    s += ": ";
    s += cudaGetErrorString(code);
    if (is_sticky(code)) {
      s += " (the CUDA context is lost)";
    }
    s += " [";
    const std::string file = where.file_name();
    s += file.substr(file.find_last_of('/') + 1);
    s += ":";
    s += std::to_string(where.line());
    s += "]";
    return s;
  }

  cudaError_t m_code;
  std::string m_operation;
  std::string m_api;
  std::source_location m_where;
};

//! Throws `cuda_error` when `code` is not `cudaSuccess`. Clears CUDA's last-error slot for
//! non-sticky errors so that a later unrelated check does not see this one again.
inline void check(const char* operation, cudaError_t code, const char* api,
                  std::source_location where = std::source_location::current()) {
  if (code != cudaSuccess) [[unlikely]] {
    if (!cuda_error::is_sticky(code)) {
      (void)cudaGetLastError();
    }
    throw cuda_error(code, operation, api, where);
  }
}

//! For destructors and noexcept paths: reports a failure on stderr and, in debug builds,
//! aborts. Never throws.
inline void check_noexcept(const char* operation, cudaError_t code, const char* api,
                           std::source_location where = std::source_location::current()) noexcept {
  if (code != cudaSuccess) [[unlikely]] {
    if (!cuda_error::is_sticky(code)) {
      (void)cudaGetLastError();
    }
    std::fprintf(stderr, "cuawait: %s (%s) failed: %s [%s:%u]\n", operation, api,
                 cudaGetErrorName(code), where.file_name(), static_cast<unsigned>(where.line()));
#ifndef NDEBUG
    // Shutdown after a lost context is expected to fail quietly; anything else is a bug.
    if (!cuda_error::is_sticky(code) && code != cudaErrorCudartUnloading) {
      std::abort();
    }
#endif
  }
}

//! Status-returning form: `cudaSuccess` or the error, with the last-error slot cleared
//! for non-sticky errors. For callers that branch instead of catching.
[[nodiscard]] inline cudaError_t try_check(cudaError_t code) noexcept {
  if (code != cudaSuccess && !cuda_error::is_sticky(code)) {
    (void)cudaGetLastError();
  }
  return code;
}

} // namespace cuawait::cuda

//! Checks a CUDA runtime call, naming the API from the expression:
//! `CUAWAIT_CUDA_CHECK("copy H2D", cudaMemcpyAsync(...))`.
#define CUAWAIT_CUDA_CHECK(operation, call) ::cuawait::cuda::check((operation), (call), #call)
