// SPDX-License-Identifier: Apache-2.0
// Merging arena ranges into few copies (the core of arena_pair's merged transfers).

#include <cuawait/cuda/detail/arena_ranges.hpp>

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace {

using cuawait::cuda::detail::byte_range;
using cuawait::cuda::detail::merge_ranges;
using cuawait::cuda::detail::merge_slot_ranges;

TEST(ArenaRanges, AdjacentFullSlotsBecomeOneCopy) {
  const std::vector<std::size_t> slots{3, 1, 2, 0};
  const auto r = merge_slot_ranges(slots, 1024, 1024);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0], (byte_range{0, 4096}));
}

TEST(ArenaRanges, GapsSplitCopies) {
  const std::vector<std::size_t> slots{0, 1, 5, 6, 9};
  const auto r = merge_slot_ranges(slots, 100, 100);
  EXPECT_EQ(r, (std::vector<byte_range>{{0, 200}, {500, 200}, {900, 100}}));
}

TEST(ArenaRanges, PartlyUsedSlotsDoNotCopyTheirUnusedTail) {
  const std::vector<std::size_t> slots{0, 1};
  const auto r = merge_slot_ranges(slots, 100, 60);
  EXPECT_EQ(r, (std::vector<byte_range>{{0, 60}, {100, 60}}));
}

TEST(ArenaRanges, OverlapsAndEmptiesAreHandled) {
  const auto r = merge_ranges({{10, 5}, {0, 0}, {12, 10}, {30, 0}, {22, 3}});
  EXPECT_EQ(r, (std::vector<byte_range>{{10, 15}}));
  EXPECT_TRUE(merge_ranges({}).empty());
}

TEST(ArenaRanges, RandomSlotSetsCoverExactlyTheirBytes) {
  std::mt19937 rng(42);
  for (int round = 0; round < 200; ++round) {
    std::vector<bool> used(64, false);
    std::vector<std::size_t> slots;
    for (std::size_t i = 0; i < 64; ++i) {
      if (rng() % 2 == 0) {
        used[i] = true;
        slots.push_back(i);
      }
    }
    std::shuffle(slots.begin(), slots.end(), rng);
    const auto r = merge_slot_ranges(slots, 8, 8);
    std::vector<bool> covered(64, false);
    for (std::size_t k = 0; k < r.size(); ++k) {
      if (k > 0) {
        ASSERT_GT(r[k].offset, r[k - 1].offset + r[k - 1].bytes) << "touching ranges not merged";
      }
      for (std::size_t b = r[k].offset; b < r[k].offset + r[k].bytes; b += 8) {
        covered[b / 8] = true;
      }
    }
    ASSERT_EQ(covered, used);
  }
}

} // namespace
