// SPDX-License-Identifier: Apache-2.0

#include "synthetic.hpp"

#include <gtest/gtest.h>

#include <set>

namespace ci = cuawait::images;

TEST(Synthetic, SameSeedAndIndexGiveTheSameBytes) {
  for (int i = 0; i < ci::synthetic_kind_count; ++i) {
    EXPECT_EQ(ci::make_synthetic(7, i, 33, 21).pixels, ci::make_synthetic(7, i, 33, 21).pixels);
    EXPECT_NE(ci::make_synthetic(7, i, 33, 21).pixels, ci::make_synthetic(8, i, 33, 21).pixels)
        << i;
  }
}

TEST(Synthetic, TheBatchCyclesThroughVariedKinds) {
  std::set<std::string> names;
  for (int i = 0; i < 10; ++i) {
    const ci::image8 img = ci::make_synthetic(1, i, 64, 48);
    EXPECT_EQ(img.width, 64);
    EXPECT_EQ(img.height, 48);
    EXPECT_EQ(img.pixels.size(), img.pixel_count() * img.channels);
    EXPECT_EQ(img.channels, ci::synthetic_channels(i)); // what prepare_inputs budgets for
    const std::set<std::uint8_t> values(img.pixels.begin(), img.pixels.end());
    EXPECT_GE(values.size(), 2U) << ci::synthetic_name(i); // never a flat image
    names.insert(ci::to_string(ci::synthetic_kind_of(i)));
  }
  EXPECT_EQ(names.size(), 5U);
  EXPECT_EQ(ci::synthetic_name(3), "synthetic-0003-text");
  EXPECT_THROW((void)ci::make_synthetic(1, 0, 0, 5), std::invalid_argument);
}
