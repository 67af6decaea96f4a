// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! What a cached region enqueued, as plain data: one record per operation (kernel launch,
//! 1-D copy, memset) with its parameters and the kernel arguments' bytes. The region cache
//! compares two recordings to decide between "same parameters" (launch as cached), "same
//! shape" (update the changed nodes in place) and "shape changed" (instantiate again, and
//! say why). CUDA-free, so that the decisions are CPU-tested.

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace cuawait::cuda::detail {

//! The kind of a recorded operation; the sequence of kinds is a region's shape.
enum class region_op_kind : std::uint8_t { kernel, copy, memset };

//! "kernel launch", "copy" or "memset".
[[nodiscard]] inline const char* region_op_name(region_op_kind k) noexcept {
  switch (k) {
  case region_op_kind::kernel:
    return "kernel launch";
  case region_op_kind::copy:
    return "copy";
  default:
    return "memset";
  }
}

//! Grid or block dimensions (CUDA's dim3 without CUDA).
using region_dim = std::array<std::uint32_t, 3>;

//! One recorded operation. Fields not used by its kind stay zero.
struct region_op {
  region_op_kind kind = region_op_kind::kernel;
  const void* func = nullptr;   //!< kernel: the kernel (its host stub)
  region_dim grid{1, 1, 1};     //!< kernel
  region_dim block{1, 1, 1};    //!< kernel
  std::size_t shared_bytes = 0; //!< kernel: dynamic shared memory
  void* dst = nullptr;          //!< copy, memset
  const void* src = nullptr;    //!< copy
  std::size_t bytes = 0;        //!< copy, memset
  int value = 0;                //!< memset: the byte value
  std::uint32_t first_arg = 0;  //!< kernel: index of its first argument
  std::uint32_t arg_count = 0;  //!< kernel: number of arguments
};

//! A region's recording: operations in stream order, and the kernel arguments' bytes.
//! Copy-assigning one recording to another reuses the target's storage.
class region_ops {
public:
  //! Kernel arguments are stored at offsets aligned to this (the largest CUDA vector type).
  static constexpr std::size_t arg_alignment = 16;

  //! Records a kernel launch; `args[i]` points to `sizes[i]` bytes of argument i.
  void add_kernel(const void* func, region_dim grid, region_dim block, std::size_t shared_bytes,
                  const void* const* args, const std::uint32_t* sizes, std::uint32_t count) {
    region_op op;
    op.kind = region_op_kind::kernel;
    op.func = func;
    op.grid = grid;
    op.block = block;
    op.shared_bytes = shared_bytes;
    op.first_arg = static_cast<std::uint32_t>(m_arg_offset.size());
    op.arg_count = count;
    for (std::uint32_t i = 0; i < count; ++i) {
      const std::size_t at = (m_bytes.size() + arg_alignment - 1) / arg_alignment * arg_alignment;
      m_bytes.resize(at + sizes[i]);
      std::memcpy(m_bytes.data() + at, args[i], sizes[i]);
      m_arg_offset.push_back(static_cast<std::uint32_t>(at));
      m_arg_size.push_back(sizes[i]);
    }
    m_ops.push_back(op);
  }
  //! Records a 1-D copy of `bytes` bytes (direction from the addresses).
  void add_copy(void* dst, const void* src, std::size_t bytes) {
    region_op op;
    op.kind = region_op_kind::copy;
    op.dst = dst;
    op.src = src;
    op.bytes = bytes;
    m_ops.push_back(op);
  }
  //! Records a memset of `bytes` bytes at `dst` to the byte `value`.
  void add_memset(void* dst, int value, std::size_t bytes) {
    region_op op;
    op.kind = region_op_kind::memset;
    op.dst = dst;
    op.value = value;
    op.bytes = bytes;
    m_ops.push_back(op);
  }

  [[nodiscard]] std::size_t size() const noexcept { return m_ops.size(); }
  [[nodiscard]] bool empty() const noexcept { return m_ops.empty(); }
  [[nodiscard]] const region_op& operator[](std::size_t i) const noexcept { return m_ops[i]; }
  //! Forgets every operation (keeps the storage).
  void clear() noexcept {
    m_ops.clear();
    m_arg_offset.clear();
    m_arg_size.clear();
    m_bytes.clear();
  }

  //! Appends pointers to the arguments of kernel operation `op` to `out` (CUDA's
  //! `kernelParams`). They stay valid until this recording is changed.
  void arg_pointers(const region_op& op, std::vector<void*>& out) const {
    for (std::uint32_t j = 0; j < op.arg_count; ++j) {
      // CUDA's API takes void**; it only reads through them.
      out.push_back(const_cast<std::byte*>(m_bytes.data() + m_arg_offset[op.first_arg + j]));
    }
  }

  //! True when operation `i` has the same parameters here and in `other` (both of the same
  //! kind at `i`): nothing to update for it.
  [[nodiscard]] bool same_params(std::size_t i, const region_ops& other) const noexcept {
    const region_op& a = m_ops[i];
    const region_op& b = other.m_ops[i];
    if (a.kind != b.kind || a.func != b.func || a.grid != b.grid || a.block != b.block ||
        a.shared_bytes != b.shared_bytes || a.dst != b.dst || a.src != b.src ||
        a.bytes != b.bytes || a.value != b.value || a.arg_count != b.arg_count) {
      return false;
    }
    for (std::uint32_t j = 0; j < a.arg_count; ++j) {
      const std::uint32_t sa = m_arg_size[a.first_arg + j];
      if (sa != other.m_arg_size[b.first_arg + j] ||
          std::memcmp(m_bytes.data() + m_arg_offset[a.first_arg + j],
                      other.m_bytes.data() + other.m_arg_offset[b.first_arg + j], sa) != 0) {
        return false;
      }
    }
    return true;
  }

  //! True when both recordings have the same shape: the same kinds of operations in the
  //! same order (parameters, kernels and launch shapes may differ: they are updatable).
  [[nodiscard]] bool same_shape(const region_ops& other) const noexcept {
    if (m_ops.size() != other.m_ops.size()) {
      return false;
    }
    for (std::size_t i = 0; i < m_ops.size(); ++i) {
      if (m_ops[i].kind != other.m_ops[i].kind) {
        return false;
      }
    }
    return true;
  }

private:
  std::vector<region_op> m_ops;
  std::vector<std::uint32_t> m_arg_offset;
  std::vector<std::uint32_t> m_arg_size;
  std::vector<std::byte> m_bytes;
};

//! Why `now` cannot update an executable made from `was`: "12 operations instead of 32",
//! or "operation 3 is a copy instead of a kernel launch"; empty when the shapes match.
[[nodiscard]] inline std::string describe_shape_change(const region_ops& was,
                                                       const region_ops& now) {
  const std::size_t n = was.size() < now.size() ? was.size() : now.size();
  for (std::size_t i = 0; i < n; ++i) {
    if (was[i].kind != now[i].kind) {
      return "the shape changed: operation " + std::to_string(i) + " is a " +
             region_op_name(now[i].kind) + " instead of a " + region_op_name(was[i].kind);
    }
  }
  if (was.size() != now.size()) {
    return "the shape changed: " + std::to_string(now.size()) + " operations instead of " +
           std::to_string(was.size());
  }
  return {};
}

} // namespace cuawait::cuda::detail
