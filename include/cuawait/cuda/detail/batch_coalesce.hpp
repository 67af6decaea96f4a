// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Merging a batch's copies: jobs whose buffers sit next to each other (arena slots at
//! equal offsets in one pinned and one device allocation) are copied in one transfer.
//! CUDA-free: addresses are only compared.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace cuawait {

//! One copy: `bytes` bytes from `src` to `dst` (host or device addresses).
struct copy_span {
  void* dst = nullptr;
  const void* src = nullptr;
  std::size_t bytes = 0;
};

} // namespace cuawait

namespace cuawait::cuda::detail {

//! Sorts `copies` by source address and merges each run whose sources and destinations both
//! continue where the previous copy ended, in place. Returns the number of copies left
//! (`copies` is resized to it). Overlapping or out-of-step copies are left separate, so
//! the merged copies move exactly the same bytes to the same places.
inline std::size_t coalesce_copies(std::vector<copy_span>& copies) {
  if (copies.size() < 2) {
    return copies.size();
  }
  const auto addr = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p); };
  std::sort(copies.begin(), copies.end(),
            [&](const copy_span& a, const copy_span& b) { return addr(a.src) < addr(b.src); });
  std::size_t out = 0;
  for (std::size_t i = 1; i < copies.size(); ++i) {
    copy_span& run = copies[out];
    const copy_span& next = copies[i];
    const bool follows =
        addr(run.src) + run.bytes == addr(next.src) && addr(run.dst) + run.bytes == addr(next.dst);
    if (follows) {
      run.bytes += next.bytes;
    } else {
      copies[++out] = next;
    }
  }
  copies.resize(out + 1);
  return copies.size();
}

} // namespace cuawait::cuda::detail
