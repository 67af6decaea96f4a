// SPDX-License-Identifier: Apache-2.0
// The runtime: coroutines resume on the executor and with the priority they suspended
// with, spawned work is joined, statistics count what happened, the doctor's report names
// work on the legacy default stream and on one stream.

#include "common/gpu.hpp"
#include "common/owned_coroutine.hpp"

#include <cuawait/cuda.hpp>
#include <cuawait/runtime.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace cu = cuawait::cuda;

__global__ void touch(int* p) { *p += 1; }

//! Runs for about `cycles` GPU clock cycles: long enough that awaiting it suspends.
__global__ void spin_for(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

//! `jobs` spawned coroutines, each awaiting 16 short kernels on `stream_of(job)`.
template <class StreamOf>
void spin_jobs(cuawait::runtime& rt, int jobs, StreamOf stream_of) {
  for (int j = 0; j < jobs; ++j) {
    rt.spawn([](cu::stream_ref st) -> cuawait::task<void> {
      for (int i = 0; i < 16; ++i) {
        co_await st.launch(spin_for, dim3(1), dim3(1), 200'000LL); // ~0.1 ms
      }
    }(stream_of(j)));
  }
  rt.join_spawned();
}

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

// Timers: sleeps on the pool and in `run` go to the runtime's polled service (no timer
// thread), end on the executor they started on, and the ones still pending when the
// runtime goes end with operation_cancelled before its pool stops. No GPU needed.
TEST(RuntimeTest, SleepsUseTheRuntimesPolledTimersOnThePoolAndInRun) {
  using namespace std::chrono_literals;
  cuawait::runtime rt(cuawait::runtime_options{.threads = 2, .device = cu::no_device});
  EXPECT_TRUE(rt.timers().is_polled());
  const bool in_run = rt.run([&]() -> cuawait::task<bool> {
    const auto deadline = std::chrono::steady_clock::now() + 2ms;
    const bool named = &cuawait::timer_service::current() == &rt.timers();
    co_await cuawait::sleep_until(deadline);
    co_return named&& cuawait::current_executor() == &rt.loop() &&
        std::chrono::steady_clock::now() >= deadline;
  }());
  EXPECT_TRUE(in_run);
  std::atomic<int> on_pool{0};
  for (int i = 0; i < 8; ++i) {
    // Parameters, not captures: the spawned coroutine outlives the lambda object.
    rt.spawn([](cuawait::runtime& r, std::atomic<int>& n) -> cuawait::task<void> {
      co_await cuawait::sleep_for(1ms);
      if (cuawait::current_executor() == &r.pool() &&
          &cuawait::timer_service::current() == &r.timers()) {
        n.fetch_add(1);
      }
    }(rt, on_pool));
  }
  rt.join_spawned();
  EXPECT_EQ(on_pool.load(), 8);
  EXPECT_EQ(rt.timers().pending(), 0u);
}

TEST(RuntimeTest, DestroyingTheRuntimeEndsSleepsNobodySpawnedOnItsPool) {
  using namespace std::chrono_literals;
  std::atomic<bool> suspended{false};
  std::atomic<bool> cancelled_on_pool{false};
  std::optional<cuawait::test::owned_coroutine> c;
  {
    cuawait::runtime rt(cuawait::runtime_options{.threads = 2, .device = cu::no_device});
    c.emplace([](cuawait::runtime& r, std::atomic<bool>& in,
                 std::atomic<bool>& out) -> cuawait::test::owned_coroutine {
      co_await r.pool().schedule();
      try {
        auto s = cuawait::sleep_for(1h);
        in = true;
        co_await std::move(s);
      } catch (const cuawait::operation_cancelled&) {
        out = cuawait::current_executor() == &r.pool();
      }
    }(rt, suspended, cancelled_on_pool));
    while (!suspended.load() || rt.timers().pending() == 0) {
      std::this_thread::yield();
    }
  } // the destructor ends the sleep; the coroutine runs on the pool before it stops
  EXPECT_TRUE(cancelled_on_pool.load());
  ASSERT_TRUE(c->done());
  c->handle.destroy();
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

TEST(RuntimeTest, ReportNamesTheLegacyDefaultStreamAndWorkOnOneStream) {
  CUAWAIT_REQUIRE_GPU();
  cuawait::runtime_options o;
  o.threads = 2;
  cuawait::runtime rt(o);
  spin_jobs(rt, 4, [](int) { return cu::stream_ref{cudaStream_t{}}; });
  const cuawait::doctor_report r = rt.report();
  EXPECT_NE(r.find(cuawait::doctor_rule::legacy_default_stream), nullptr) << r;
  EXPECT_NE(r.find(cuawait::doctor_rule::single_stream), nullptr) << r;
  EXPECT_NE(r.summary.find("strategy "), std::string::npos) << r;
}

TEST(RuntimeTest, ReportIsCleanWithAStreamPerJob) {
  CUAWAIT_REQUIRE_GPU();
  // The first launch of a kernel in the process loads its module (tens of ms): made inside
  // a coroutine, that load counts as the pool's busy time, and a pool of two workers that
  // were busy loading for most of a 35 ms run reads as CPU-bound (seen once on an H100).
  // Load it here, outside the pool's lifetime: the report is about the jobs.
  spin_for<<<1, 1>>>(0);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cuawait::runtime_options o;
  o.threads = 2;
  cuawait::runtime rt(o);
  std::vector<cu::stream> streams(4);
  spin_jobs(rt, 4, [&](int j) { return cu::stream_ref(streams[static_cast<std::size_t>(j)]); });
  const cuawait::doctor_report r = rt.report();
  EXPECT_TRUE(r.clean()) << r;
}

} // namespace
