// SPDX-License-Identifier: Apache-2.0
// The runtime: coroutines resume on the executor and with the priority they suspended
// with, spawned work is joined, statistics count what happened.

#include "common/gpu.hpp"

#include <cuawait/cuda.hpp>
#include <cuawait/runtime.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace {

namespace cu = cuawait::cuda;

__global__ void touch(int* p) { *p += 1; }

TEST(RuntimeTest, RunResumesOnTheCallingThreadAndSpawnOnThePool) {
  CUAWAIT_REQUIRE_GPU();
  cuawait::runtime_options o;
  o.threads = 2;
  cuawait::runtime rt(o);
  cu::stream s;
  int* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, sizeof(int)), cudaSuccess);
  const auto main_thread = std::this_thread::get_id();
  const bool same = rt.run([&]() -> cuawait::task<bool> {
    co_await s.memset(d, 0, 1);
    co_await s.launch(touch, dim3(1), dim3(1), d);
    co_return std::this_thread::get_id() == main_thread&& cuawait::current_executor() == &rt.loop();
  }());
  EXPECT_TRUE(same);
  std::atomic<int> on_pool{0};
  std::atomic<int> high{0};
  for (int i = 0; i < 8; ++i) {
    rt.spawn([](cuawait::runtime& r, cu::stream_ref st, int* p, std::atomic<int>& ok,
                std::atomic<int>& hi) -> cuawait::task<void> {
      co_await r.pool().schedule(cuawait::priority::high);
      co_await st.launch(touch, dim3(1), dim3(1), p);
      if (cuawait::current_executor() == &r.pool()) {
        ok.fetch_add(1);
      }
      if (cuawait::current_priority() == cuawait::priority::high) {
        hi.fetch_add(1);
      }
    }(rt, s, d, on_pool, high));
  }
  rt.join_spawned();
  EXPECT_EQ(on_pool.load(), 8);
  EXPECT_EQ(high.load(), 8);
  int host = 0;
  ASSERT_EQ(cudaMemcpy(&host, d, sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(host, 9);
  const auto st = rt.stats();
  EXPECT_GE(st.completions + (st.submitted == 0 ? 0 : 0), 1U);
  EXPECT_EQ(st.pending, 0U);
  (void)cudaFree(d);
}

TEST(RuntimeTest, SpawnedExceptionIsRethrownByJoin) {
  CUAWAIT_REQUIRE_GPU();
  cuawait::runtime rt;
  rt.spawn([]() -> cuawait::task<void> {
    throw std::runtime_error("boom");
    co_return;
  }());
  EXPECT_THROW(rt.join_spawned(), std::runtime_error);
}

} // namespace
