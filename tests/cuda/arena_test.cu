// SPDX-License-Identifier: Apache-2.0
// arena_pair on a GPU: slots at the same offset in both arenas, merged copies of a batch's
// adjacent slots (every element checked), leasing and the out-of-memory path.

#include "common/gpu.hpp"
#include "common/owned_coroutine.hpp"

#include <cuawait/cuda/arena.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <coroutine>
#include <exception>
#include <optional>
#include <string>
#include <vector>

namespace {

namespace cu = cuawait::cuda;

__global__ void add_index(float* p, std::size_t n) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += std::size_t{blockDim.x} * gridDim.x) {
    p[i] += static_cast<float>(i % 7);
  }
}

using cuawait::test::owned_coroutine;

owned_coroutine take_slot(cu::arena_pair& a, std::optional<std::size_t>& index) {
  auto slot = co_await a.acquire();
  index = slot.index();
}

class ArenaTest : public ::testing::Test {
protected:
  void SetUp() override { CUAWAIT_REQUIRE_GPU(); }
};

TEST_F(ArenaTest, SlotsShareOffsetsAndAreAligned) {
  cu::arena_pair arenas(1000, 8);
  EXPECT_EQ(arenas.slot_bytes(), 1024u);
  auto a = arenas.try_acquire();
  auto b = arenas.try_acquire();
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->index(), 0u);
  EXPECT_EQ(b->index(), 1u);
  EXPECT_EQ(b->host().data() - arenas.host_base(), 1024);
  EXPECT_EQ(b->device().data() - arenas.device_base(), 1024);
  EXPECT_EQ(b->host_as<float>().size(), 256u);
  a.reset();
  EXPECT_EQ(arenas.available(), 7u);
}

TEST_F(ArenaTest, ABatchOfAdjacentSlotsIsCopiedWithOneTransferEachWay) {
  constexpr std::size_t floats = 65536; // 256 KiB per job, as in W1
  constexpr std::size_t jobs = 16;
  cu::stream s;
  cu::arena_pair arenas(floats * sizeof(float), jobs);
  std::vector<cu::arena_slot> slots;
  std::vector<std::size_t> indices;
  for (std::size_t j = 0; j < jobs; ++j) {
    auto slot = arenas.try_acquire();
    ASSERT_TRUE(slot);
    auto h = slot->host_as<float>();
    for (std::size_t i = 0; i < floats; ++i) {
      h[i] = static_cast<float>(j * 1000 + i % 1000);
    }
    indices.push_back(slot->index());
    slots.push_back(std::move(*slot));
  }
  EXPECT_EQ(arenas.copy_to_device(s, indices, floats * sizeof(float)), 1u);
  add_index<<<512, 256, 0, s.get()>>>(reinterpret_cast<float*>(arenas.device_base()),
                                      floats * jobs);
  CUAWAIT_CUDA_CHECK("kernel", cudaGetLastError());
  s.sync(); // the H2D copy has read the host slots: overwrite them to see the D2H result
  for (auto& slot : slots) {
    auto h = slot.host_as<float>();
    std::fill(h.begin(), h.end(), -1.0f);
  }
  EXPECT_EQ(arenas.copy_to_host(s, indices, floats * sizeof(float)), 1u);
  s.sync();
  for (std::size_t j = 0; j < jobs; ++j) {
    auto h = slots[j].host_as<float>();
    for (std::size_t i = 0; i < floats; ++i) {
      const std::size_t global = j * floats + i;
      ASSERT_EQ(h[i], static_cast<float>(j * 1000 + i % 1000) + static_cast<float>(global % 7))
          << j << ":" << i;
    }
  }
}

TEST_F(ArenaTest, RunsAndWaitingAcquire) {
  cu::arena_pair arenas(256, 4);
  auto run = arenas.try_acquire_run(3);
  ASSERT_TRUE(run);
  EXPECT_EQ(run->count(), 3u);
  EXPECT_EQ(run->host().size(), 768u);
  auto last = arenas.try_acquire();
  ASSERT_TRUE(last);
  std::optional<std::size_t> got;
  auto c = take_slot(arenas, got);
  EXPECT_FALSE(c.handle.done());
  run.reset(); // three slots back: the waiter takes the lowest
  EXPECT_TRUE(c.handle.done());
  EXPECT_EQ(got, 0u);
  c.handle.destroy();
  EXPECT_EQ(arenas.available(), 3u);
}

TEST_F(ArenaTest, OutOfMemoryNamesTheSize) {
  try {
    cu::arena_pair huge(std::size_t{1} << 40, 1024); // 1 PiB
    FAIL() << "a 1 PiB arena was allocated";
  } catch (const cu::cuda_error& e) {
    EXPECT_NE(std::string(e.what()).find("arena_pair: allocate"), std::string::npos) << e.what();
  }
  cu::arena_pair ok(256, 2);
  EXPECT_EQ(ok.available(), 2u);
}

} // namespace
