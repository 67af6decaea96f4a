// SPDX-License-Identifier: Apache-2.0
#include "cuawait/cuda/arena.hpp"
#include "cuawait/cuda/reactor.hpp"

#include "cuawait/cuda/detail/deferred_release.hpp"

#include <limits>
#include <stdexcept>
#include <string>

namespace cuawait::cuda {
namespace {

constexpr std::size_t slot_alignment = 256;

std::size_t round_slot(std::size_t bytes) {
  if (bytes == 0 || bytes > std::numeric_limits<std::size_t>::max() - slot_alignment) {
    throw std::invalid_argument("arena_pair: bytes_per_slot must be in 1 .. SIZE_MAX - 256");
  }
  return (bytes + slot_alignment - 1) / slot_alignment * slot_alignment;
}

std::size_t total_bytes(std::size_t slot_bytes, std::size_t slots) {
  if (slots == 0) {
    throw std::invalid_argument("arena_pair: no slots");
  }
  if (slots > std::numeric_limits<std::size_t>::max() / slot_bytes) {
    throw std::length_error("arena_pair: slots * bytes_per_slot overflows size_t");
  }
  return slot_bytes * slots;
}

} // namespace

arena_pair::arena_pair(std::size_t bytes_per_slot, std::size_t slots)
    : m_slot_bytes(round_slot(bytes_per_slot)), m_slots({0, slots, 0}) {
  const std::size_t bytes = total_bytes(m_slot_bytes, slots);
  const std::string what = "arena_pair: allocate " + std::to_string(bytes) + " bytes";
  void* host = nullptr;
  check((what + " pinned").c_str(), cudaHostAlloc(&host, bytes, cudaHostAllocPortable),
        "cudaHostAlloc");
  void* device = nullptr;
  const cudaError_t e = cudaMalloc(&device, bytes);
  if (e != cudaSuccess) {
    detail::release_later(&detail::free_host, host);
    check((what + " on the device").c_str(), e, "cudaMalloc");
  }
  m_host = static_cast<std::byte*>(host);
  m_device = static_cast<std::byte*>(device);
}

arena_pair::~arena_pair() {
  // Both frees may wait for the device: on the context's release thread when there is one.
  detail::release_later(&detail::free_device, m_device);
  detail::release_later(&detail::free_host, m_host);
}

std::optional<arena_slot> arena_pair::try_acquire() noexcept {
  if (auto s = m_slots.try_acquire()) {
    return arena_slot(*this, *s, 1);
  }
  return std::nullopt;
}

std::optional<arena_slot> arena_pair::try_acquire_run(std::size_t n) noexcept {
  if (auto s = m_slots.try_acquire_run(n)) {
    return arena_slot(*this, *s, n);
  }
  return std::nullopt;
}

std::size_t arena_pair::copy_to_device(stream_ref s, std::span<const std::size_t> slot_indices,
                                       std::size_t used_bytes) const {
  return copy(s, slot_indices, used_bytes, true);
}

std::size_t arena_pair::copy_to_host(stream_ref s, std::span<const std::size_t> slot_indices,
                                     std::size_t used_bytes) const {
  return copy(s, slot_indices, used_bytes, false);
}

std::size_t arena_pair::copy(stream_ref s, std::span<const std::size_t> slots,
                             std::size_t used_bytes, bool to_device) const {
  for (const std::size_t i : slots) {
    if (i >= m_slots.size()) {
      throw std::out_of_range("arena_pair: slot " + std::to_string(i) + " beyond the " +
                              std::to_string(m_slots.size()) + " slots");
    }
  }
  const auto ranges = copy_ranges(slots, used_bytes);
  for (const auto& r : ranges) {
    void* dst = to_device ? static_cast<void*>(m_device + r.offset) : m_host + r.offset;
    const void* src = to_device ? static_cast<const void*>(m_host + r.offset) : m_device + r.offset;
    const cudaError_t e = cudaMemcpyAsync(
        dst, src, r.bytes, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, s.get());
    if (e != cudaSuccess) {
      const std::string what = std::string("arena_pair: copy ") + (to_device ? "H2D" : "D2H") +
                               " of " + std::to_string(r.bytes) + " bytes at offset " +
                               std::to_string(r.offset);
      check(what.c_str(), e, "cudaMemcpyAsync");
    }
    detail::note_copy(r.bytes);
  }
  return ranges.size();
}

} // namespace cuawait::cuda
