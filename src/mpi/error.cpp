// SPDX-License-Identifier: Apache-2.0
#include "cuawait/mpi/error.hpp"

#include <array>

namespace cuawait::mpi {

namespace {

int class_of(int code) noexcept {
  int cls = code;
  if (MPI_Error_class(code, &cls) != MPI_SUCCESS) {
    return code;
  }
  return cls;
}

std::string format(int code, const char* operation, const char* api) {
  std::string s = operation != nullptr ? operation : "cuawait::mpi";
  if (api != nullptr) {
    s += " (";
    s += api;
    s += ')';
  }
  s += ": ";
  const std::string name = error_class_name(class_of(code));
  const std::string message = error_string(code);
  // Open MPI's messages start with the class name already ("MPI_ERR_TRUNCATE: message
  // truncated"); others do not.
  if (message.compare(0, name.size(), name) != 0) {
    s += name;
    s += ": ";
  }
  s += message;
  return s;
}

} // namespace

mpi_error::mpi_error(int code, const char* operation, const char* api)
    : std::runtime_error(format(code, operation, api)), m_code(code), m_class(class_of(code)),
      m_operation(operation != nullptr ? operation : ""), m_api(api != nullptr ? api : "") {}

std::string error_string(int code) {
  std::array<char, MPI_MAX_ERROR_STRING> buf{};
  int len = 0;
  // MPI_Error_string may be called before MPI_Init and after MPI_Finalize.
  if (MPI_Error_string(code, buf.data(), &len) == MPI_SUCCESS && len > 0) {
    return std::string(buf.data(), static_cast<std::size_t>(len));
  }
  return "unknown MPI error " + std::to_string(code);
}

std::string error_class_name(int error_class) {
  struct entry {
    int cls;
    const char* name;
  };
  static const entry names[] = {
      {MPI_SUCCESS, "MPI_SUCCESS"},
      {MPI_ERR_BUFFER, "MPI_ERR_BUFFER"},
      {MPI_ERR_COUNT, "MPI_ERR_COUNT"},
      {MPI_ERR_TYPE, "MPI_ERR_TYPE"},
      {MPI_ERR_TAG, "MPI_ERR_TAG"},
      {MPI_ERR_COMM, "MPI_ERR_COMM"},
      {MPI_ERR_RANK, "MPI_ERR_RANK"},
      {MPI_ERR_REQUEST, "MPI_ERR_REQUEST"},
      {MPI_ERR_ROOT, "MPI_ERR_ROOT"},
      {MPI_ERR_GROUP, "MPI_ERR_GROUP"},
      {MPI_ERR_OP, "MPI_ERR_OP"},
      {MPI_ERR_TOPOLOGY, "MPI_ERR_TOPOLOGY"},
      {MPI_ERR_DIMS, "MPI_ERR_DIMS"},
      {MPI_ERR_ARG, "MPI_ERR_ARG"},
      {MPI_ERR_UNKNOWN, "MPI_ERR_UNKNOWN"},
      {MPI_ERR_TRUNCATE, "MPI_ERR_TRUNCATE"},
      {MPI_ERR_OTHER, "MPI_ERR_OTHER"},
      {MPI_ERR_INTERN, "MPI_ERR_INTERN"},
      {MPI_ERR_IN_STATUS, "MPI_ERR_IN_STATUS"},
      {MPI_ERR_PENDING, "MPI_ERR_PENDING"},
      {MPI_ERR_NO_MEM, "MPI_ERR_NO_MEM"},
  };
  for (const entry& e : names) {
    if (e.cls == error_class) {
      return e.name;
    }
  }
  return "MPI error class " + std::to_string(error_class);
}

} // namespace cuawait::mpi
