// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `nccl::datatype_of<T>()`: the NCCL datatype of a C++ element type, so that the typed
//! collectives of `nccl::communicator` take `const float*`, `int*`... instead of a
//! `ncclDataType_t` written by hand.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <nccl.h>

#include <cstdint>
#include <type_traits>

namespace cuawait::nccl {

//! True for the element types NCCL reduces: 8-, 32- and 64-bit integers, `__half`,
//! `__nv_bfloat16`, `float` and `double`.
template <class T>
inline constexpr bool
    has_datatype_v = (std::is_integral_v<T> && !std::is_same_v<T, bool> &&
                      (sizeof(T) == 1 || sizeof(T) == 4 || sizeof(T) == 8)) ||
                     std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16> ||
                     std::is_same_v<T, float> || std::is_same_v<T, double>;

//! The `ncclDataType_t` of `T` (by size and signedness for integers: `long` is
//! `ncclInt64` where it has 64 bits).
template <class T>
requires has_datatype_v<T>
[[nodiscard]] constexpr ncclDataType_t datatype_of() noexcept {
  if constexpr (std::is_same_v<T, float>) {
    return ncclFloat32;
  } else if constexpr (std::is_same_v<T, double>) {
    return ncclFloat64;
  } else if constexpr (std::is_same_v<T, __half>) {
    return ncclFloat16;
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return ncclBfloat16;
  } else if constexpr (sizeof(T) == 1) {
    return std::is_signed_v<T> ? ncclInt8 : ncclUint8;
  } else if constexpr (sizeof(T) == 4) {
    return std::is_signed_v<T> ? ncclInt32 : ncclUint32;
  } else {
    return std::is_signed_v<T> ? ncclInt64 : ncclUint64;
  }
}

} // namespace cuawait::nccl
