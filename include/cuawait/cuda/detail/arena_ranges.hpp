// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Merging byte ranges of an arena into as few copies as possible: the CUDA-free core of
//! `cuda::arena_pair`'s merged copies (a batch of jobs whose slots are adjacent is copied
//! with one transfer instead of one per job).

#include <algorithm>
#include <cstddef>
#include <span>
#include <utility>
#include <vector>

namespace cuawait::cuda::detail {

//! `bytes` bytes from `offset` on, in an arena.
struct byte_range {
  std::size_t offset = 0;
  std::size_t bytes = 0;
  friend bool operator==(const byte_range&, const byte_range&) = default;
};

//! The ranges sorted by offset, with touching or overlapping ones joined and empty ones
//! dropped. A copy of each result moves exactly the bytes of the inputs, no gap included.
[[nodiscard]] inline std::vector<byte_range> merge_ranges(std::vector<byte_range> ranges) {
  std::erase_if(ranges, [](const byte_range& r) { return r.bytes == 0; });
  std::sort(ranges.begin(), ranges.end(),
            [](const byte_range& a, const byte_range& b) { return a.offset < b.offset; });
  std::vector<byte_range> out;
  for (const byte_range& r : ranges) {
    if (!out.empty() && r.offset <= out.back().offset + out.back().bytes) {
      const std::size_t end = std::max(out.back().offset + out.back().bytes, r.offset + r.bytes);
      out.back().bytes = end - out.back().offset;
    } else {
      out.push_back(r);
    }
  }
  return out;
}

//! The merged ranges of the first `used_bytes` of each slot in `slots` (slot `i` starts at
//! `i * slot_bytes`). Only slots used in full merge with the next one.
[[nodiscard]] inline std::vector<byte_range> merge_slot_ranges(std::span<const std::size_t> slots,
                                                               std::size_t slot_bytes,
                                                               std::size_t used_bytes) {
  std::vector<byte_range> ranges;
  ranges.reserve(slots.size());
  for (const std::size_t s : slots) {
    ranges.push_back({s * slot_bytes, std::min(used_bytes, slot_bytes)});
  }
  return merge_ranges(std::move(ranges));
}

} // namespace cuawait::cuda::detail
