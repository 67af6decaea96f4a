// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Type-checked kernel arguments for graph kernel nodes: the arguments are converted to the
//! kernel's parameter types, stored, and pointed to, as `cudaKernelNodeParams` expects.

#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

namespace cuawait::cuda::detail {

template <class... T>
struct graph_type_list {};

template <class List, class... Args>
inline constexpr bool graph_kernel_args_match_v = false;

template <class... Params, class... Args>
inline constexpr bool graph_kernel_args_match_v<graph_type_list<Params...>, Args...> = [] {
  if constexpr (sizeof...(Params) != sizeof...(Args)) {
    return false;
  } else {
    return (std::is_convertible_v<Args&&, std::remove_cvref_t<Params>> && ...);
  }
}();

//! True when `Args...` can be passed to a kernel taking `Params...` (same count, each
//! convertible), so a wrong argument is a compile error, as with a launch.
template <class List, class... Args>
concept graph_kernel_args_match = graph_kernel_args_match_v<List, Args...>;

//! The converted arguments and the array of pointers to them. Not copyable or movable:
//! the pointers point into the object itself. CUDA copies the values when a node is added
//! or set, so the object may die right after that call.
template <class... Params>
class graph_kernel_args {
public:
  template <class... Args>
  explicit graph_kernel_args(Args&&... args) : m_values(static_cast<Args&&>(args)...) {
    fill(std::index_sequence_for<Params...>{});
  }
  graph_kernel_args(const graph_kernel_args&) = delete;
  graph_kernel_args& operator=(const graph_kernel_args&) = delete;

  //! Node parameters for `kernel` (no dynamic shared memory).
  [[nodiscard]] cudaKernelNodeParams node_params(void (*kernel)(Params...), dim3 grid,
                                                 dim3 block) noexcept {
    cudaKernelNodeParams p{};
    p.func = reinterpret_cast<void*>(kernel);
    p.gridDim = grid;
    p.blockDim = block;
    p.sharedMemBytes = 0;
    p.kernelParams = sizeof...(Params) == 0 ? nullptr : m_pointers.data();
    p.extra = nullptr;
    return p;
  }

private:
  template <std::size_t... I>
  void fill(std::index_sequence<I...>) noexcept {
    ((m_pointers[I] = static_cast<void*>(std::addressof(std::get<I>(m_values)))), ...);
  }

  std::tuple<std::remove_cvref_t<Params>...> m_values;
  std::array<void*, sizeof...(Params)> m_pointers{};
};

} // namespace cuawait::cuda::detail
