// SPDX-License-Identifier: Apache-2.0
// The coroutine mode's gate: images in flight are bounded by their number as well as by
// their bytes, and a share gives both back.

#include "coro_mode.hpp"
#include "memory_gate.hpp"

#include <cuawait/async_scope.hpp>
#include <cuawait/sync_wait.hpp>
#include <cuawait/task.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <optional>

namespace {

namespace ca = cuawait;
namespace ci = cuawait::images;

constexpr std::size_t mib = std::size_t{1} << 20;

//! Spawned on `scope` with no executor: runs inline until the gate makes it wait.
ca::task<void> take(ci::memory_gate& gate, std::size_t bytes,
                    std::optional<ci::memory_gate::share>& out) {
  out.emplace(co_await gate.acquire(bytes));
}

TEST(MemoryGate, BoundsTheImagesInFlightBesidesTheBytes) {
  ci::memory_gate gate(64 * mib, 2); // room for 64 images of 1 MiB, places for 2
  std::optional<ci::memory_gate::share> a;
  std::optional<ci::memory_gate::share> b;
  std::optional<ci::memory_gate::share> c;
  ca::async_scope scope;
  scope.spawn(take(gate, mib, a));
  scope.spawn(take(gate, mib, b));
  scope.spawn(take(gate, mib, c));
  EXPECT_TRUE(a && b);
  EXPECT_FALSE(c) << "a third image got in while the bytes had room for 62 more";
  a->release(); // the place and the bytes come back: the third image goes in
  EXPECT_TRUE(c);
  b.reset();
  c.reset();
  ca::sync_wait(scope.join());
}

TEST(MemoryGate, WithoutAnImageBoundTheBytesBoundTheImages) {
  ci::memory_gate gate(4 * mib); // 0 places: as many as the budget lets in
  std::optional<ci::memory_gate::share> s[5];
  ca::async_scope scope;
  for (auto& share : s) {
    scope.spawn(take(gate, mib, share));
  }
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(s[i]) << "image " << i;
  }
  EXPECT_FALSE(s[4]) << "a fifth image of 1 MiB got into a 4 MiB budget";
  s[0].reset();
  EXPECT_TRUE(s[4]);
  for (auto& share : s) {
    share.reset();
  }
  ca::sync_wait(scope.join());
}

TEST(MemoryGate, TheBytesStillBoundImagesBelowThePlaces) {
  ci::memory_gate gate(8 * mib, 100);
  std::optional<ci::memory_gate::share> big[3];
  ca::async_scope scope;
  for (auto& share : big) {
    scope.spawn(take(gate, 3 * mib, share));
  }
  EXPECT_TRUE(big[0] && big[1]);
  EXPECT_FALSE(big[2]) << "9 MiB of images in an 8 MiB budget";
  big[1].reset();
  EXPECT_TRUE(big[2]);
  for (auto& share : big) {
    share.reset();
  }
  ca::sync_wait(scope.join());
}

TEST(MemoryGate, DefaultBoundIsTwoImagesPerThreadAndAtLeastEight) {
  EXPECT_EQ(ci::default_max_in_flight(1), 8U);
  EXPECT_EQ(ci::default_max_in_flight(4), 8U);
  EXPECT_EQ(ci::default_max_in_flight(16), 32U);
  // 16 threads, the default budget (1.5 GiB): 0.25 MP images are held to 32 (the budget alone
  // lets in about 260); 4 MP images to the 16 that the budget lets in.
  const std::size_t budget = ci::default_memory_budget(16, 0);
  EXPECT_EQ(ci::images_in_flight(budget, ci::gpu_image_footprint(512 * 512), 32), 32U);
  EXPECT_GT(ci::images_in_flight(budget, ci::gpu_image_footprint(512 * 512)), 200U);
  EXPECT_EQ(ci::images_in_flight(budget, ci::gpu_image_footprint(2048 * 2048), 32),
            ci::images_in_flight(budget, ci::gpu_image_footprint(2048 * 2048)));
  EXPECT_LE(ci::images_in_flight(budget, ci::gpu_image_footprint(2048 * 2048)), 17U);
}

} // namespace
