// SPDX-License-Identifier: Apache-2.0
// stream_pool on a GPU: priorities, leases returned on scope exit, waiting acquire, and
// stream operations on a lease.

#include "common/gpu.hpp"
#include "common/owned_coroutine.hpp"

#include <cuawait/cuda/device_buffer.hpp>
#include <cuawait/cuda/pinned_buffer.hpp>
#include <cuawait/cuda/stream_pool.hpp>

#include <gtest/gtest.h>

#include <coroutine>
#include <exception>
#include <optional>
#include <set>
#include <vector>

namespace {

namespace cu = cuawait::cuda;
using cuawait::priority;

using cuawait::test::owned_coroutine;

owned_coroutine lease_and_record(cu::stream_pool& pool, std::optional<cudaStream_t>& got) {
  auto lease = co_await pool.acquire();
  got = lease.get();
}

class StreamPoolTest : public ::testing::Test {
protected:
  void SetUp() override { CUAWAIT_REQUIRE_GPU(); }
};

TEST_F(StreamPoolTest, StreamsGetPrioritiesFromTheDeviceRange) {
  int least = 0;
  int greatest = 0;
  CUAWAIT_CUDA_CHECK("range", cudaDeviceGetStreamPriorityRange(&least, &greatest));
  cu::stream_pool pool(cu::stream_pool_options{.normal = 2, .high = 1, .low = 1});
  EXPECT_EQ(pool.size(), 4u);
  EXPECT_EQ(pool.cuda_priority(priority::high), greatest);
  EXPECT_EQ(pool.cuda_priority(priority::low), least);
  auto high = pool.try_acquire(priority::high);
  ASSERT_TRUE(high);
  EXPECT_EQ(high->priority(), greatest);
  auto low = pool.try_acquire(priority::low);
  ASSERT_TRUE(low);
  EXPECT_EQ(low->priority(), least);
  auto normal = pool.try_acquire();
  ASSERT_TRUE(normal);
  EXPECT_EQ(normal->priority(), pool.cuda_priority(priority::normal));
}

TEST_F(StreamPoolTest, LeasesAreDistinctAndReturnedOnScopeExit) {
  cu::stream_pool pool(3);
  {
    std::vector<cu::stream_lease> leases;
    std::set<cudaStream_t> seen;
    while (auto l = pool.try_acquire()) {
      seen.insert(l->get());
      leases.push_back(std::move(*l));
    }
    EXPECT_EQ(leases.size(), 3u);
    EXPECT_EQ(seen.size(), 3u);
    EXPECT_EQ(pool.available(), 0u);
  }
  EXPECT_EQ(pool.available(), 3u);
}

TEST_F(StreamPoolTest, AcquireWaitsForAReturnedStream) {
  cu::stream_pool pool(1);
  auto held = pool.try_acquire();
  ASSERT_TRUE(held);
  const cudaStream_t only = held->get();
  std::optional<cudaStream_t> got;
  auto c = lease_and_record(pool, got);
  EXPECT_FALSE(c.handle.done());
  EXPECT_EQ(pool.waiting(), 1u);
  held->reset(); // resumes the waiter inline (it has no executor)
  EXPECT_TRUE(c.handle.done());
  EXPECT_EQ(got, only);
  c.handle.destroy(); // its lease goes back
  EXPECT_EQ(pool.available(), 1u);
}

TEST_F(StreamPoolTest, StreamOperationsWorkOnALease) {
  cu::stream_pool pool(2);
  auto lease = pool.try_acquire();
  ASSERT_TRUE(lease);
  cu::pinned_buffer<int> in(4096, *lease);
  cu::pinned_buffer<int> out(4096, *lease);
  for (int i = 0; i < 4096; ++i) {
    in[i] = i ^ 0x5a5a;
  }
  cu::device_buffer<int> d(4096, *lease);
  (void)lease->copy(d, in);
  (void)lease->copy(out, d);
  lease->sync();
  for (int i = 0; i < 4096; ++i) {
    ASSERT_EQ(out[i], i ^ 0x5a5a);
  }
}

} // namespace
