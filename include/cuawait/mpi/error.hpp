// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The MPI error model (target cuawait::mpi): one exception type that names the operation,
//! the MPI error class and MPI's own message (`MPI_Error_string`), and a throwing check.

#include <mpi.h>

#include <stdexcept>
#include <string>

namespace cuawait::mpi {

//! A failed MPI call or request. `what()` names the operation and the error, e.g.
//! "cuawait::mpi::recv (MPI_Irecv): MPI_ERR_TRUNCATE: message truncated".
class mpi_error : public std::runtime_error {
public:
  //! `operation` and `api` may be null.
  mpi_error(int code, const char* operation, const char* api);

  //! The MPI error code as returned (or as found in `MPI_Status::MPI_ERROR`).
  [[nodiscard]] int code() const noexcept { return m_code; }
  //! Its class (`MPI_Error_class`): MPI_ERR_TRUNCATE, MPI_ERR_RANK...
  [[nodiscard]] int error_class() const noexcept { return m_class; }
  //! The cuawait operation that failed ("cuawait::mpi::recv", "cuawait::mpi::wait"...).
  [[nodiscard]] const std::string& operation() const noexcept { return m_operation; }
  //! The MPI function that reported it ("MPI_Isend", "MPI_Testsome"...).
  [[nodiscard]] const std::string& api() const noexcept { return m_api; }

private:
  int m_code;
  int m_class;
  std::string m_operation;
  std::string m_api;
};

//! MPI's message for `code` (`MPI_Error_string`), or "unknown MPI error <code>".
[[nodiscard]] std::string error_string(int code);

//! The symbolic name of an error class, e.g. "MPI_ERR_TRUNCATE" ("MPI error class <n>" for
//! one it does not know).
[[nodiscard]] std::string error_class_name(int error_class);

//! Throws `mpi_error` when `code` is not MPI_SUCCESS. The operation comes first, as in
//! `cuda::check`.
inline void check(const char* operation, int code, const char* api) {
  if (code != MPI_SUCCESS) {
    throw mpi_error(code, operation, api);
  }
}

} // namespace cuawait::mpi
