// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `mpi::datatype_of<T>()`: the predefined MPI datatype of a C++ arithmetic type, so that
//! `reactor::send` and `reactor::recv` take a typed range.

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace cuawait::mpi {

//! True for the types `datatype_of` knows.
template <class T>
inline constexpr bool has_datatype_v = std::is_same_v<T, std::byte> ||
                                       (std::is_arithmetic_v<T> && !std::is_same_v<T, wchar_t> &&
                                        !std::is_same_v<T, char8_t> &&
                                        !std::is_same_v<T, char16_t> &&
                                        !std::is_same_v<T, char32_t>);

//! The predefined MPI datatype of `T` (a value, not a constant expression: MPI
//! implementations define their handles at run time).
template <class T>
requires has_datatype_v<T>
[[nodiscard]] MPI_Datatype datatype_of() noexcept {
  if constexpr (std::is_same_v<T, std::byte> || std::is_same_v<T, unsigned char>) {
    return MPI_UNSIGNED_CHAR;
  } else if constexpr (std::is_same_v<T, char>) {
    return MPI_CHAR;
  } else if constexpr (std::is_same_v<T, signed char>) {
    return MPI_SIGNED_CHAR;
  } else if constexpr (std::is_same_v<T, bool>) {
    return MPI_CXX_BOOL;
  } else if constexpr (std::is_same_v<T, short>) {
    return MPI_SHORT;
  } else if constexpr (std::is_same_v<T, unsigned short>) {
    return MPI_UNSIGNED_SHORT;
  } else if constexpr (std::is_same_v<T, int>) {
    return MPI_INT;
  } else if constexpr (std::is_same_v<T, unsigned>) {
    return MPI_UNSIGNED;
  } else if constexpr (std::is_same_v<T, long>) {
    return MPI_LONG;
  } else if constexpr (std::is_same_v<T, unsigned long>) {
    return MPI_UNSIGNED_LONG;
  } else if constexpr (std::is_same_v<T, long long>) {
    return MPI_LONG_LONG;
  } else if constexpr (std::is_same_v<T, unsigned long long>) {
    return MPI_UNSIGNED_LONG_LONG;
  } else if constexpr (std::is_same_v<T, float>) {
    return MPI_FLOAT;
  } else if constexpr (std::is_same_v<T, double>) {
    return MPI_DOUBLE;
  } else {
    static_assert(std::is_same_v<T, long double>);
    return MPI_LONG_DOUBLE;
  }
}

} // namespace cuawait::mpi
