// SPDX-License-Identifier: Apache-2.0
// Device contexts: each runtime owns one and its threads await through it; several runtimes
// live side by side; nothing starts by itself (a thread without a context gets a clear
// error); a context used on one thread keeps working on the thread its reactor resumes on.

#include "common/gpu.hpp"
#include "common/spin_kernel.cuh"

#include <cuawait/cuda.hpp>
#include <cuawait/runtime.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>

namespace {

namespace cu = cuawait::cuda;

__global__ void add_one(int* p) { *p += 1; }

//! Removes the test binary's default context for the guard's lifetime.
class without_default_context {
public:
  without_default_context() : m_saved(cu::current_context_or_null()) {
    cu::detail::remove_default_context(m_saved);
  }
  without_default_context(const without_default_context&) = delete;
  without_default_context& operator=(const without_default_context&) = delete;
  ~without_default_context() { (void)cu::detail::install_default_context_if_none(m_saved); }

private:
  cu::device_context* m_saved;
};

cuawait::task<int> add_twice(cu::stream_ref s, int* d) {
  co_await s.memset(d, 0, 1);
  co_await s.launch(add_one, dim3(1), dim3(1), d);
  co_await s.launch(add_one, dim3(1), dim3(1), d);
  int host = 0;
  co_await s.copy(&host, d, 1);
  co_return host;
}

TEST(DeviceContextTest, TwoRuntimesAwaitThroughTheirOwnReactors) {
  CUAWAIT_REQUIRE_GPU();
  cuawait::runtime a(cuawait::runtime_options{.threads = 2});
  cuawait::runtime b(cuawait::runtime_options{.threads = 2});
  ASSERT_NE(&a.context(), &b.context());
  cu::stream sa, sb;
  int* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 2 * sizeof(int)), cudaSuccess);
  const auto before_a = a.stats().queries;
  const auto before_b = b.stats().queries;
  // Run on each runtime's pool: the awaits there go to that runtime's reactor.
  auto on_pool = [](cuawait::runtime& rt, cu::stream_ref s, int* p) -> cuawait::task<int> {
    co_await rt.pool().schedule();
    EXPECT_EQ(&cu::current_context(), &rt.context());
    co_return co_await add_twice(s, p);
  };
  EXPECT_EQ(a.run(on_pool(a, sa, d)), 2);
  const auto after_a = a.stats().queries;
  EXPECT_GT(after_a, before_a);
  EXPECT_EQ(b.stats().queries, before_b);
  EXPECT_EQ(b.run(on_pool(b, sb, d + 1)), 2);
  EXPECT_GT(b.stats().queries, before_b);
  EXPECT_EQ(a.stats().queries, after_a);
  (void)cudaFree(d);
}

TEST(DeviceContextTest, RunLoopAndPoolUseTheRuntimesPools) {
  CUAWAIT_REQUIRE_GPU();
  cuawait::runtime rt(cuawait::runtime_options{.threads = 1});
  cu::stream s;
  const auto in_use = rt.run([&]() -> cuawait::task<std::size_t> {
    EXPECT_EQ(&cu::pinned_pool::current(), &rt.context().pinned());
    EXPECT_EQ(&cu::device_memory_pool::current(), &rt.context().memory());
    cu::pinned_buffer<int> host(1000, s);
    cu::device_buffer<int> dev(1000, s);
    co_await s;
    co_return rt.context().pinned().stats().bytes_in_use;
  }());
  EXPECT_GE(in_use, 1000 * sizeof(int));
}

TEST(DeviceContextTest, AThreadWithoutAContextGetsAClearError) {
  CUAWAIT_REQUIRE_GPU();
  const without_default_context none;
  ASSERT_EQ(cu::current_context_or_null(), nullptr);
  cu::stream s;
  try {
    (void)cuawait::sync_wait([&]() -> cuawait::task<void> { co_await s; }());
    FAIL() << "awaiting GPU work without a context must throw";
  } catch (const cu::no_device_context& e) {
    EXPECT_NE(std::string(e.what()).find("context_scope"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)cu::pinned_pool::current(), cu::no_device_context);
}

TEST(DeviceContextTest, AScopedContextFollowsTheCoroutineOntoItsReactorThread) {
  CUAWAIT_REQUIRE_GPU();
  const without_default_context none;
  cu::device_context ctx; // its own reactor thread: waits resume there, inline
  int result = 0;
  {
    const cu::context_scope here(ctx);
    EXPECT_EQ(&cu::current_context(), &ctx);
    cu::stream s;
    int* d = nullptr;
    ASSERT_EQ(cudaMalloc(&d, sizeof(int)), cudaSuccess);
    // The second await runs on the reactor's thread, which has `ctx` too.
    result = cuawait::sync_wait(add_twice(s, d));
    (void)cudaFree(d);
  }
  EXPECT_EQ(result, 2);
  EXPECT_EQ(cu::current_context_or_null(), nullptr); // the scope restored "none"
  EXPECT_GE(ctx.reactor().stats().completions, 1U);
}

TEST(DeviceContextTest, StreamsKnowTheirDevice) {
  CUAWAIT_REQUIRE_GPU();
  cu::stream s;
  EXPECT_EQ(s.device(), cu::device::current_id());
  cu::device_context ctx(cu::device_context_options{.device = cu::device::current_id()});
  EXPECT_EQ(ctx.device(), cu::device::current_id());
}

TEST(DeviceContextTest, PerThreadDefaultStreamsOfTwoThreadsNeverResolveEachOther) {
  CUAWAIT_REQUIRE_GPU();
  // Every strategy; the timeline one once kept one counter per stream handle, and the
  // per-thread default stream is one handle naming a different stream on each thread.
  for (const cu::strategy st : {cu::strategy::timeline, cu::strategy::event_poll,
                                cu::strategy::stream_poll, cu::strategy::host_callback}) {
    SCOPED_TRACE(cu::to_string(st));
    cu::device_context ctx(cu::device_context_options{.completion = st});
    cuawait::test::spin_control ctl;
    ASSERT_NE(ctl.device, nullptr);
    int* scratch = nullptr;
    ASSERT_EQ(cudaMalloc(&scratch, sizeof(int)), cudaSuccess);
    // Load the fast thread's kernel first: with lazy module loading (CUDA's default),
    // loading it while the spin kernel runs waits for that kernel.
    add_one<<<1, 1>>>(scratch);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::atomic<bool> slow_resumed{false};
    std::atomic<bool> slow_pending{false};
    std::thread slow([&] {
      const cu::context_scope here(ctx);
      cuawait::sync_wait([&]() -> cuawait::task<void> {
        const cu::stream_ref mine(cudaStreamPerThread);
        mine.launch(cuawait::test::spin_until_released, dim3(1), dim3(1), ctl.device,
                    ctl.device + 1);
        slow_pending.store(true);
        co_await mine;
        slow_resumed.store(true);
      }());
    });
    while (!slow_pending.load()) {
      std::this_thread::yield();
    }
    // Another thread's per-thread stream finishes many times while the first is busy.
    std::thread fast([&] {
      const cu::context_scope here(ctx);
      cuawait::sync_wait([&]() -> cuawait::task<void> {
        const cu::stream_ref mine(cudaStreamPerThread);
        for (int i = 0; i < 20; ++i) {
          co_await mine.launch(add_one, dim3(1), dim3(1), scratch);
        }
      }());
    });
    fast.join();
    EXPECT_FALSE(slow_resumed.load()) << "resumed before its kernel was released";
    ctl.release();
    slow.join();
    EXPECT_TRUE(slow_resumed.load());
    EXPECT_EQ(ctl.outcome(), 1) << "the spin kernel timed out";
    (void)cudaFree(scratch);
  }
}

TEST(DeviceContextTest, CreatingAwaitingAndDestroyingStreamsLeavesNoLanesBehind) {
  CUAWAIT_REQUIRE_GPU();
  for (const cu::strategy st : {cu::strategy::timeline, cu::strategy::event_poll}) {
    SCOPED_TRACE(cu::to_string(st));
    cu::device_context ctx(cu::device_context_options{.completion = st});
    const cu::context_scope here(ctx);
    int* d = nullptr;
    ASSERT_EQ(cudaMalloc(&d, sizeof(int)), cudaSuccess);
    cuawait::sync_wait([](int* p) -> cuawait::task<void> {
      for (int i = 0; i < 20'000; ++i) {
        cu::stream s;
        cu::event e;
        co_await s.memset(p, 0, 1);
        s.record(e);
        co_await e;
      }
    }(d));
    (void)cudaFree(d);
    EXPECT_LE(ctx.reactor().reactor().lane_count(), 4U);
    EXPECT_LE(ctx.reactor().source().stream_state_count(), 4U);
  }
}

} // namespace
