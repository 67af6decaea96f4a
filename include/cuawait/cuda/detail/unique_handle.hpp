// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `unique_handle<Traits>`: the one owner of a native CUDA handle (stream, event, graph,
//! executable graph). Move-only; a move leaves the source holding `Traits::moved_from()`,
//! a sentinel that is never a valid handle (and, for streams, not `nullptr`, which names
//! the legacy default stream). Handing the sentinel to an API call throws the error
//! `Traits::throw_moved_from` raises, which names the handle ("use of a moved-from
//! cuda::stream"). Destroying a moved-from handle, or move-assigning into it, is fine.
//!
//! The check is one compare of the handle against the sentinel (`checked`), marked
//! unlikely; the throw sits in a cold function. No allocation, no atomic.
//!
//! This header makes no CUDA call and includes no CUDA header, so that the owner logic is
//! tested on the CPU with fake traits.
//!
//! Traits requirements:
//! - `handle_type`: the native handle, a pointer type.
//! - `base_type`: what the owner derives from: a non-owning view that stores the handle
//!   (`stream_ref`, `event_ref`) or `handle_holder<handle_type>` for handles without one (the
//!   traits then derive from `handle_holder_access`, which provides `storage`).
//! - `static handle_type& storage(base_type&) noexcept`: the handle stored in the base.
//! - `static handle_type moved_from() noexcept`: the sentinel.
//! - `static bool is_moved_from(handle_type) noexcept`: true for the sentinel (a traits
//!   may accept a small family of sentinels in the same single compare).
//! - `static void destroy(handle_type) noexcept`: destroys a live, non-null handle.
//! - `[[noreturn]] static void throw_moved_from(handle_type, std::source_location)`.

#include <cstdint>
#include <source_location>
#include <utility>

namespace cuawait::cuda::detail {

//! Sentinel `n` (0 to 15) of handle type `H`: an address at the very top of the address
//! space, which no CUDA handle ever is (nor `0`, the legacy stream, `1` or `2`,
//! `cudaStreamLegacy` and `cudaStreamPerThread`).
template <class H>
[[nodiscard]] inline H sentinel_handle(unsigned n = 0) noexcept {
  return reinterpret_cast<H>(~std::uintptr_t{0} - n); // NOLINT: a tag, never dereferenced
}
//! True for any of the 16 sentinels of `sentinel_handle`: one unsigned compare.
template <class H>
[[nodiscard]] inline bool is_sentinel_handle(H h) noexcept {
  return reinterpret_cast<std::uintptr_t>(h) > ~std::uintptr_t{0} - 16; // NOLINT
}

//! Storage for a handle that has no public non-owning view.
template <class Handle>
class handle_holder {
public:
  constexpr handle_holder() noexcept = default;
  constexpr explicit handle_holder(Handle h) noexcept : m_handle(h) {}

private:
  friend struct handle_holder_access;
  Handle m_handle{};
};

//! `storage()` for traits whose base is `handle_holder`: derive the traits from it.
struct handle_holder_access {
  template <class Handle>
  static Handle& storage(handle_holder<Handle>& b) noexcept {
    return b.m_handle;
  }
};

//! `h`, or the error naming the handle when `h` is a moved-from sentinel.
template <class Traits>
[[nodiscard]] typename Traits::handle_type
checked(typename Traits::handle_type h,
        std::source_location where = std::source_location::current()) {
  if (Traits::is_moved_from(h)) [[unlikely]] {
    Traits::throw_moved_from(h, where);
  }
  return h;
}

//! The owner: see the file comment.
template <class Traits>
class unique_handle : public Traits::base_type {
public:
  using handle_type = typename Traits::handle_type;
  using base_type = typename Traits::base_type;

  //! Owns `h` (null is allowed: an empty owner that destroys nothing).
  explicit unique_handle(handle_type h) noexcept : base_type(h) {}
  unique_handle(unique_handle&& other) noexcept : base_type(other.release()) {}
  unique_handle& operator=(unique_handle&& other) noexcept {
    if (this != &other) {
      reset(other.release());
    }
    return *this;
  }
  unique_handle(const unique_handle&) = delete;
  unique_handle& operator=(const unique_handle&) = delete;
  ~unique_handle() { reset(Traits::moved_from()); }

  //! Gives up ownership and returns the handle; this owner is then moved-from.
  [[nodiscard]] handle_type release() noexcept {
    return std::exchange(raw(), Traits::moved_from());
  }
  //! True unless moved from or released.
  [[nodiscard]] bool owns_handle() const noexcept { return !Traits::is_moved_from(raw()); }

protected:
  //! The stored handle, unchecked: for the owner's bookkeeping, never for an API call.
  [[nodiscard]] handle_type& raw() noexcept { return Traits::storage(*this); }
  [[nodiscard]] handle_type raw() const noexcept {
    return Traits::storage(const_cast<unique_handle&>(*this));
  }
  //! The stored handle for an API call: throws the named error when moved from.
  [[nodiscard]] handle_type
  checked_handle(std::source_location where = std::source_location::current()) const {
    return checked<Traits>(raw(), where);
  }

private:
  void reset(handle_type next) noexcept {
    const handle_type old = std::exchange(raw(), next);
    if (old != handle_type{} && !Traits::is_moved_from(old)) {
      Traits::destroy(old);
    }
  }
};

} // namespace cuawait::cuda::detail
