// SPDX-License-Identifier: Apache-2.0
// The pinned pool's CUDA-free core, driven by fake memory and fake fences.

#include <cuawait/cuda/detail/size_class_pool.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <thread>
#include <vector>

namespace {

using cuawait::cuda::detail::size_class_for;
using cuawait::cuda::detail::size_class_pool;

// A fence the test completes by hand (the GPU finishing a copy).
struct fake_fence {
  std::shared_ptr<std::atomic<bool>> done = std::make_shared<std::atomic<bool>>(false);
  void complete() const { done->store(true); }
};

struct fake_backend {
  using fence_type = fake_fence;

  struct counters {
    std::atomic<int> allocations{0};
    std::atomic<int> deallocations{0};
    std::atomic<int> queries{0};
    std::atomic<int> waits{0};
    std::atomic<int> discards{0};
    std::atomic<std::size_t> fail_above{~std::size_t{0}};
    std::atomic<int> fail_after{-1}; // >= 0: allocations beyond this many throw
    std::mutex mutex;
    std::set<void*> live;
  };
  std::shared_ptr<counters> c = std::make_shared<counters>();

  void* allocate(std::size_t bytes) {
    if (bytes > c->fail_above.load() ||
        (c->fail_after.load() >= 0 && c->allocations.load() >= c->fail_after.load())) {
      throw std::bad_alloc();
    }
    void* p = std::malloc(bytes);
    ++c->allocations;
    const std::lock_guard lock(c->mutex);
    c->live.insert(p);
    return p;
  }
  void deallocate(void* p, std::size_t) noexcept {
    ++c->deallocations;
    {
      const std::lock_guard lock(c->mutex);
      EXPECT_EQ(c->live.erase(p), 1u) << "freed a block the backend did not hand out";
    }
    std::free(p);
  }
  bool is_complete(fence_type& f) noexcept {
    ++c->queries;
    return f.done->load();
  }
  // Stands for cudaEventSynchronize: returns once the GPU is done.
  void wait(fence_type& f) noexcept {
    ++c->waits;
    f.complete();
  }
  void discard(fence_type&) noexcept { ++c->discards; }
};

using pool_t = size_class_pool<fake_backend>;

TEST(SizeClass, RoundsUpWithAtMostAQuarterStep) {
  EXPECT_EQ(size_class_for(0).bytes, 256u);
  EXPECT_EQ(size_class_for(1).bytes, 256u);
  EXPECT_EQ(size_class_for(256).bytes, 256u);
  EXPECT_EQ(size_class_for(257).bytes, 320u);
  EXPECT_EQ(size_class_for(262144).bytes, 262144u);
  EXPECT_EQ(size_class_for(262145).bytes, 327680u);
  EXPECT_EQ(size_class_for(300000).bytes, 327680u);
  unsigned last_index = 0;
  std::size_t last_bytes = 256;
  for (std::size_t n = 257; n < (std::size_t{1} << 22); n += 97) {
    const auto sc = size_class_for(n);
    ASSERT_GE(sc.bytes, n);
    ASSERT_LE(sc.bytes - n, sc.bytes / 5 + 1) << n; // at most 20% waste
    ASSERT_GE(sc.index, last_index);
    ASSERT_EQ(sc.index == last_index, sc.bytes == last_bytes) << n; // one size per index
    last_index = sc.index;
    last_bytes = sc.bytes;
  }
}

TEST(SizeClass, LimitsAreConsistent) {
  const auto top = size_class_for(cuawait::cuda::detail::size_class_max_bytes);
  EXPECT_EQ(top.index, cuawait::cuda::detail::size_class_count - 1);
  EXPECT_EQ(top.bytes, cuawait::cuda::detail::size_class_max_bytes);
  const auto huge = size_class_for(cuawait::cuda::detail::size_class_max_bytes + 1);
  EXPECT_EQ(huge.index, cuawait::cuda::detail::size_class_count);
}

TEST(SizeClassPool, ReusesAReturnedBlockWithoutTheBackend) {
  pool_t pool;
  auto counters = pool.backend().c;
  auto a = pool.allocate(1000);
  EXPECT_GE(a.bytes, 1000u);
  void* first = a.ptr;
  pool.deallocate(a);
  auto b = pool.allocate(900); // same class
  EXPECT_EQ(b.ptr, first);
  EXPECT_EQ(counters->allocations.load(), 1);
  const auto s = pool.stats();
  EXPECT_EQ(s.reuses, 1u);
  EXPECT_EQ(s.bytes_in_use, b.bytes);
  EXPECT_EQ(s.bytes_held, b.bytes);
  EXPECT_EQ(s.bytes_cached, 0u);
  pool.deallocate(b);
  EXPECT_EQ(pool.stats().bytes_cached, b.bytes);
}

TEST(SizeClassPool, DifferentClassesDoNotShareBlocks) {
  pool_t pool;
  auto small = pool.allocate(300);
  pool.deallocate(small);
  auto big = pool.allocate(4096);
  EXPECT_NE(big.ptr, small.ptr);
  EXPECT_EQ(pool.backend().c->allocations.load(), 2);
  pool.deallocate(big);
}

TEST(SizeClassPool, FencedBlockIsNotReusedUntilItsFenceCompletes) {
  pool_t pool;
  auto counters = pool.backend().c;
  auto a = pool.allocate(4096);
  fake_fence f;
  pool.deallocate(a, f);
  EXPECT_EQ(pool.stats().bytes_fenced, a.bytes);

  auto b = pool.allocate(4096); // the copy is still in flight: a new block
  EXPECT_NE(b.ptr, a.ptr);
  EXPECT_EQ(counters->allocations.load(), 2);

  f.complete();
  auto c = pool.allocate(4096);
  EXPECT_EQ(c.ptr, a.ptr);
  EXPECT_EQ(counters->discards.load(), 1);
  EXPECT_EQ(pool.stats().bytes_fenced, 0u);
  pool.deallocate(b);
  pool.deallocate(c);
}

TEST(SizeClassPool, FenceChecksPerRequestStayBoundedWithManyPending) {
  pool_t pool;
  auto counters = pool.backend().c;
  std::vector<fake_fence> fences(1000);
  std::vector<pool_t::block> blocks;
  for (int i = 0; i < 1000; ++i) {
    blocks.push_back(pool.allocate(512));
  }
  for (int i = 0; i < 1000; ++i) {
    pool.deallocate(blocks[i], fences[i]);
  }
  counters->queries = 0;
  auto x = pool.allocate(512);
  EXPECT_EQ(counters->queries.load(), 4) << "a request must not scan every pending fence";
  pool.deallocate(x);
  counters->queries = 0;
  auto x2 = pool.allocate(512); // served from the ready list: no fence check at all
  EXPECT_EQ(x2.ptr, x.ptr);
  EXPECT_EQ(counters->queries.load(), 0);
  for (auto& f : fences) {
    f.complete();
  }
  auto y = pool.allocate(512);
  // Every completed fence is reaped once (1000 queries), then never queried again.
  EXPECT_EQ(counters->queries.load(), 1000);
  auto z = pool.allocate(512);
  EXPECT_EQ(counters->queries.load(), 1000);
  pool.deallocate(x2);
  pool.deallocate(y);
  pool.deallocate(z);
}

TEST(SizeClassPool, ASlowFenceDoesNotHideCompletedOnesBehindIt) {
  pool_t pool;
  auto counters = pool.backend().c;
  auto slow_block = pool.allocate(4096);
  auto fast_block = pool.allocate(4096);
  fake_fence slow;
  fake_fence fast;
  pool.deallocate(slow_block, slow); // oldest, its stream is still busy
  pool.deallocate(fast_block, fast);
  fast.complete();
  auto b = pool.allocate(4096);
  EXPECT_EQ(b.ptr, fast_block.ptr);
  EXPECT_EQ(counters->allocations.load(), 2);
  slow.complete();
  pool.deallocate(b);
}

TEST(SizeClassPool, TrimGivesReadyBlocksBackAndKeepsFencedOnes) {
  pool_t pool;
  auto counters = pool.backend().c;
  auto a = pool.allocate(1 << 20);
  auto b = pool.allocate(1 << 20);
  fake_fence f;
  pool.deallocate(a);
  pool.deallocate(b, f);
  EXPECT_EQ(pool.trim(), a.bytes);
  EXPECT_EQ(counters->deallocations.load(), 1);
  EXPECT_EQ(pool.stats().bytes_held, b.bytes);
  f.complete();
  EXPECT_EQ(pool.trim(), b.bytes);
  EXPECT_EQ(pool.stats().bytes_held, 0u);
  EXPECT_EQ(counters->live.size(), 0u);
}

TEST(SizeClassPool, CacheLimitSendsExcessBlocksBack) {
  pool_t pool(fake_backend{}, 8192);
  auto counters = pool.backend().c;
  auto a = pool.allocate(8192);
  auto b = pool.allocate(8192);
  pool.deallocate(a); // fits
  pool.deallocate(b); // would exceed: back to the backend
  EXPECT_EQ(counters->deallocations.load(), 1);
  EXPECT_EQ(pool.stats().bytes_cached, 8192u);
  EXPECT_EQ(pool.stats().bytes_held, 8192u);
}

TEST(SizeClassPool, HugeRequestsBypassTheCache) {
  pool_t pool;
  auto counters = pool.backend().c;
  // Not actually allocated: the fake backend refuses, which also shows the error path.
  counters->fail_above = cuawait::cuda::detail::size_class_max_bytes;
  EXPECT_THROW((void)pool.allocate(cuawait::cuda::detail::size_class_max_bytes + 1),
               std::bad_alloc);
  const auto s = pool.stats();
  EXPECT_EQ(s.bytes_held, 0u);
  EXPECT_EQ(s.bytes_in_use, 0u);
  // Still usable after the failure.
  auto a = pool.allocate(100);
  pool.deallocate(a);
  EXPECT_EQ(pool.stats().bytes_cached, 256u);
}

TEST(SizeClassPool, DestructorWaitsForFencesAndFreesEverything) {
  auto counters = std::make_shared<fake_backend::counters>();
  {
    pool_t pool(fake_backend{counters});
    auto a = pool.allocate(1000);
    auto b = pool.allocate(5000);
    pool.deallocate(a);
    pool.deallocate(b, fake_fence{});
  }
  EXPECT_EQ(counters->waits.load(), 1);
  EXPECT_EQ(counters->discards.load(), 1);
  EXPECT_EQ(counters->allocations.load(), counters->deallocations.load());
  EXPECT_TRUE(counters->live.empty());
}

TEST(SizeClassPool, ConcurrentUseNeverHandsOutOneBlockTwice) {
  pool_t pool;
  constexpr int threads = 4;
  constexpr int rounds = 5000;
  std::atomic<int> overlaps{0};
  std::mutex out_mutex;
  std::set<void*> out; // blocks handed out now
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      std::vector<fake_fence> mine;
      for (int i = 0; i < rounds; ++i) {
        auto b = pool.allocate(256 + static_cast<std::size_t>((i * 7 + t) % 3) * 1024);
        {
          const std::lock_guard lock(out_mutex);
          if (!out.insert(b.ptr).second) {
            ++overlaps; // handed out while another thread still holds it
          }
        }
        std::memset(b.ptr, t, 256); // ASan/TSan see a write to a block that is not ours
        {
          const std::lock_guard lock(out_mutex);
          out.erase(b.ptr);
        }
        if (i % 2 == 0) {
          pool.deallocate(b);
        } else {
          fake_fence f;
          pool.deallocate(b, f);
          mine.push_back(f);
          if (mine.size() > 8) {
            mine.front().complete();
            mine.erase(mine.begin());
          }
        }
      }
      for (auto& f : mine) {
        f.complete();
      }
    });
  }
  for (auto& w : workers) {
    w.join();
  }
  EXPECT_EQ(overlaps.load(), 0);
  const auto s = pool.stats();
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.bytes_held, s.bytes_cached);
  EXPECT_LT(pool.backend().c->allocations.load(), threads * rounds / 10);
}

// --- reserve ----------------------------------------------------------------------------

TEST(SizeClassPool, ReserveFillsTheCacheSoTheNextRequestsSkipTheBackend) {
  pool_t pool;
  EXPECT_EQ(pool.reserve(1000, 3), 3u);
  const std::size_t cls = size_class_for(1000).bytes;
  EXPECT_EQ(pool.stats().bytes_cached, 3 * cls);
  EXPECT_EQ(pool.stats().backend_allocations, 3u);
  std::vector<pool_t::block> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(pool.allocate(1000));
  }
  EXPECT_EQ(pool.stats().backend_allocations, 3u) << "served from the reserve";
  EXPECT_EQ(pool.stats().reuses, 3u);
  EXPECT_EQ(pool.stats().bytes_cached, 0u);
  EXPECT_EQ(pool.stats().misses, 0u) << "reserving is not a miss";
  held.push_back(pool.allocate(1000)); // the reserve is used up
  EXPECT_EQ(pool.stats().backend_allocations, 4u);
  EXPECT_EQ(pool.stats().misses, 1u) << "the backend was called in the request path";
  for (const auto& b : held) {
    pool.deallocate(b);
  }
}

TEST(SizeClassPool, ReserveCountsBlocksAlreadyCachedAndSkipsHugeRequests) {
  pool_t pool;
  pool.deallocate(pool.allocate(5000));
  EXPECT_EQ(pool.reserve(5000, 2), 1u) << "one ready block of that class was there already";
  EXPECT_EQ(pool.reserve(5000, 2), 0u);
  EXPECT_EQ(pool.reserve(cuawait::cuda::detail::size_class_max_bytes + 1, 1), 0u);
  EXPECT_EQ(pool.stats().backend_allocations, 2u);
}

TEST(SizeClassPool, ReserveStopsAtTheCacheLimit) {
  const std::size_t cls = size_class_for(4096).bytes;
  pool_t pool(fake_backend{}, 2 * cls);
  EXPECT_EQ(pool.reserve(4096, 5), 2u);
  EXPECT_EQ(pool.stats().bytes_cached, 2 * cls);
  EXPECT_LE(pool.stats().bytes_cached, 2 * cls);
}

TEST(SizeClassPool, AFailedReserveKeepsWhatItGotAndThePoolStaysUsable) {
  pool_t pool;
  pool.backend().c->fail_after = 2;
  EXPECT_THROW((void)pool.reserve(1000, 4), std::bad_alloc);
  EXPECT_EQ(pool.stats().backend_allocations, 2u);
  EXPECT_EQ(pool.stats().bytes_cached, 2 * size_class_for(1000).bytes);
  const auto a = pool.allocate(1000); // from the two reserved
  const auto b = pool.allocate(1000);
  EXPECT_THROW((void)pool.allocate(1000), std::bad_alloc);
  pool.backend().c->fail_after = -1;
  const auto c = pool.allocate(1000);
  pool.deallocate(a);
  pool.deallocate(b);
  pool.deallocate(c);
  EXPECT_EQ(pool.stats().bytes_in_use, 0u);
}

} // namespace
