// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Statuses of the CUDA libraries (cuBLAS, NCCL, or any library with a status type), so
//! that `stream_ref::enqueue(f)` checks what `f` returns and names a failure instead of
//! dropping it. A status type is known through a `status_checker` specialisation; cuawait
//! provides the ones for `cublasStatus_t` and `ncclResult_t` when their headers can be
//! found (`__has_include`; define `CUAWAIT_NO_LIBRARY_STATUSES` to leave them out), and a
//! program registers its own the same way:
//!
//! ```cpp
//! template <> struct cuawait::cuda::status_checker<my_status> {
//!   static constexpr const char* library = "mylib";
//!   static bool ok(my_status s) noexcept { return s == MY_OK; }
//!   static const char* name(my_status s) noexcept { return my_status_name(s); }
//! };
//! ```

#include <concepts>
#include <source_location>
#include <stdexcept>
#include <string>

#if !defined(CUAWAIT_NO_LIBRARY_STATUSES)
#if __has_include(<cublas_api.h>)
#include <cublas_api.h>
#define CUAWAIT_HAS_CUBLAS_STATUS 1
#endif
#if __has_include(<nccl.h>)
#include <nccl.h>
#define CUAWAIT_HAS_NCCL_STATUS 1
#endif
#endif

namespace cuawait::cuda {

//! How to check a library's status type `Status`. Not defined for types that are not
//! statuses; a specialisation provides `library` (a string literal naming the library),
//! `ok(s)` (success?) and `name(s)` (a string literal naming the status; must not allocate).
template <class Status>
struct status_checker;

namespace concepts {
//! A status type with a registered `status_checker`.
template <class S>
concept library_status = requires(S s) {
  { status_checker<S>::library } -> std::convertible_to<const char*>;
  { status_checker<S>::ok(s) } -> std::convertible_to<bool>;
  { status_checker<S>::name(s) } -> std::convertible_to<const char*>;
};
} // namespace concepts

//! A failed library call (not a CUDA runtime call: those throw `cuda_error`). `what()`
//! names the operation, the library, the status and where, e.g.
//! "enqueue (cuBLAS): CUBLAS_STATUS_INVALID_VALUE (7) [gemm.cpp:42]".
class library_error : public std::runtime_error {
public:
  library_error(const char* library, long long status, const char* status_name,
                const char* operation, std::source_location where = std::source_location::current())
      : std::runtime_error(format(library, status, status_name, operation, where)),
        m_library(library), m_status(status), m_status_name(status_name),
        m_operation(operation != nullptr ? operation : ""), m_where(where) {}

  //! The library ("cuBLAS", "NCCL"...).
  [[nodiscard]] const std::string& library() const noexcept { return m_library; }
  //! The status, as a number.
  [[nodiscard]] long long status() const noexcept { return m_status; }
  //! The status's name ("CUBLAS_STATUS_INVALID_VALUE").
  [[nodiscard]] const std::string& status_name() const noexcept { return m_status_name; }
  //! The cuawait operation that ran the call ("enqueue").
  [[nodiscard]] const std::string& operation() const noexcept { return m_operation; }
  //! Where the check was made.
  [[nodiscard]] const std::source_location& where() const noexcept { return m_where; }

private:
  static std::string format(const char* library, long long status, const char* status_name,
                            const char* operation, const std::source_location& where) {
    std::string s = operation != nullptr ? operation : "library call";
    s += " (";
    s += library;
    s += "): ";
    s += status_name;
    s += " (";
    s += std::to_string(status);
    s += ") [";
    const std::string file = where.file_name();
    s += file.substr(file.find_last_of('/') + 1);
    s += ":";
    s += std::to_string(where.line());
    s += "]";
    return s;
  }

  std::string m_library;
  long long m_status;
  std::string m_status_name;
  std::string m_operation;
  std::source_location m_where;
};

//! Throws `library_error` when `s` is not a success of its library.
template <concepts::library_status S>
void check_status(const char* operation, S s,
                  std::source_location where = std::source_location::current()) {
  using checker = status_checker<S>;
  if (!checker::ok(s)) [[unlikely]] {
    throw library_error(checker::library, static_cast<long long>(s), checker::name(s), operation,
                        where);
  }
}

#if defined(CUAWAIT_HAS_CUBLAS_STATUS)
//! cuBLAS (names written out here, so that nothing needs linking against cuBLAS).
template <>
struct status_checker<cublasStatus_t> {
  static constexpr const char* library = "cuBLAS";
  static bool ok(cublasStatus_t s) noexcept { return s == CUBLAS_STATUS_SUCCESS; }
  static const char* name(cublasStatus_t s) noexcept {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "CUBLAS_STATUS_LICENSE_ERROR";
    default:
      return "unknown cublasStatus_t";
    }
  }
};
#endif

#if defined(CUAWAIT_HAS_NCCL_STATUS)
//! NCCL (names written out here, so that nothing needs linking against NCCL).
template <>
struct status_checker<ncclResult_t> {
  static constexpr const char* library = "NCCL";
  static bool ok(ncclResult_t s) noexcept { return s == ncclSuccess; }
  static const char* name(ncclResult_t s) noexcept {
    switch (s) {
    case ncclSuccess:
      return "ncclSuccess";
    case ncclUnhandledCudaError:
      return "ncclUnhandledCudaError";
    case ncclSystemError:
      return "ncclSystemError";
    case ncclInternalError:
      return "ncclInternalError";
    case ncclInvalidArgument:
      return "ncclInvalidArgument";
    case ncclInvalidUsage:
      return "ncclInvalidUsage";
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= 21400
    case ncclRemoteError:
      return "ncclRemoteError";
    case ncclInProgress:
      return "ncclInProgress";
#endif
    default: // later ones, by number
      return "ncclResult_t error";
    }
  }
};
#endif

} // namespace cuawait::cuda
