// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `result<T, E>`: a value or an error, the non-throwing form of an await. The same
//! declaration in every language mode (nvcc C++20, g++ C++20 and C++23); under C++23 it
//! converts to `std::expected<T, E>`. CUDA-free.

#include <exception>
#include <type_traits>
#include <utility>
#include <variant>

#if __cplusplus >= 202302L && __has_include(<expected>)
#include <expected>
#endif

namespace cuawait {

//! Thrown by `result::value()` when the result holds an error that is not an exception
//! type (with `E = std::exception_ptr` the held exception itself is rethrown).
class bad_result_access : public std::exception {
public:
  [[nodiscard]] const char* what() const noexcept override {
    return "cuawait::result: value() on a result holding an error";
  }
};

//! Tag to construct a `result` holding an error.
struct error_tag_t {
  explicit error_tag_t() = default;
};
//! The `error_tag_t` value.
inline constexpr error_tag_t error_tag{};

//! Holds either a `T` (possibly `void`) or an error `E`. `value()` returns the value or
//! throws: the error itself when `E` is an exception type, the held exception when `E` is
//! `std::exception_ptr`, otherwise `bad_result_access`.
template <class T, class E = std::exception_ptr>
class result {
  using stored_t = std::conditional_t<std::is_void_v<T>, std::monostate, T>;

public:
  using value_type = T;
  using error_type = E;

  //! A value-initialised value (for `void`: success).
  result() requires std::is_default_constructible_v<stored_t> : m_data(std::in_place_index<0>) {}
  //! Holds `v`.
  template <class U = stored_t>
  requires(!std::is_void_v<T> && std::is_constructible_v<stored_t, U&&> &&
           !std::is_same_v<std::remove_cvref_t<U>, result>) result(U&& v)
      : m_data(std::in_place_index<0>, std::forward<U>(v)) {} // NOLINT: implicit
  //! Holds the error `e`.
  template <class G>
  result(error_tag_t, G&& e) : m_data(std::in_place_index<1>, std::forward<G>(e)) {}

  //! True when a value is held.
  [[nodiscard]] bool has_value() const noexcept { return m_data.index() == 0; }
  explicit operator bool() const noexcept { return has_value(); }

  //! The value; throws (see the class comment) when an error is held.
  decltype(auto) value() & {
    throw_if_error();
    if constexpr (!std::is_void_v<T>) {
      return std::get<0>(m_data);
    }
  }
  decltype(auto) value() const& {
    throw_if_error();
    if constexpr (!std::is_void_v<T>) {
      return std::get<0>(m_data);
    }
  }
  decltype(auto) value() && {
    throw_if_error();
    if constexpr (!std::is_void_v<T>) {
      return std::move(std::get<0>(m_data));
    }
  }
  //! The value; precondition: `has_value()`.
  decltype(auto) operator*() & requires(!std::is_void_v<T>) { return std::get<0>(m_data); }
  decltype(auto) operator*() const& requires(!std::is_void_v<T>) { return std::get<0>(m_data); }
  auto operator->() requires(!std::is_void_v<T>) { return &std::get<0>(m_data); }

  //! The error; precondition: `!has_value()`.
  [[nodiscard]] const E& error() const& { return std::get<1>(m_data); }
  [[nodiscard]] E& error() & { return std::get<1>(m_data); }

#if __cplusplus >= 202302L && defined(__cpp_lib_expected)
  //! Converts to `std::expected<T, E>` (C++23 only).
  operator std::expected<T, E>() const& { // NOLINT: implicit on purpose
    if (has_value()) {
      if constexpr (std::is_void_v<T>) {
        return {};
      } else {
        return std::get<0>(m_data);
      }
    }
    return std::unexpected<E>(std::get<1>(m_data));
  }
  operator std::expected<T, E>() && { // NOLINT: implicit on purpose
    if (has_value()) {
      if constexpr (std::is_void_v<T>) {
        return {};
      } else {
        return std::move(std::get<0>(m_data));
      }
    }
    return std::unexpected<E>(std::move(std::get<1>(m_data)));
  }
#endif

private:
  void throw_if_error() const {
    if (has_value()) {
      return;
    }
    if constexpr (std::is_same_v<E, std::exception_ptr>) {
      std::rethrow_exception(std::get<1>(m_data));
    } else if constexpr (std::is_base_of_v<std::exception, E>) {
      throw std::get<1>(m_data);
    } else {
      throw bad_result_access();
    }
  }

  std::variant<stored_t, E> m_data;
};

} // namespace cuawait
