// SPDX-License-Identifier: Apache-2.0
// Device contexts: each runtime owns one and its threads await through it; several runtimes
// live side by side; nothing starts by itself (a thread without a context gets a clear
// error); a context used on one thread keeps working on the thread its reactor resumes on.

#include "common/gpu.hpp"
#include "common/spin_kernel.cuh"

#include <cuawait/cancellation.hpp>
#include <cuawait/cuda.hpp>
#include <cuawait/runtime.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

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

TEST(DeviceContextTest, TheDefaultStreamsNeverShareATimelineCounter) {
  CUAWAIT_REQUIRE_GPU();
  // The per-thread default stream is one handle naming a different stream on each thread,
  // the legacy one a stream per device: a counter keyed by the handle would be shared by
  // several streams, and a later ticket written by one could resolve an earlier wait of
  // another. The timeline strategy marks them with events instead (no counter kept).
  cu::device_context ctx(cu::device_context_options{.completion = cu::strategy::timeline});
  const cu::context_scope here(ctx);
  cuawait::sync_wait([]() -> cuawait::task<void> {
    co_await cu::stream_ref(cudaStreamPerThread);
    co_await cu::stream_ref(cudaStreamLegacy);
  }());
  EXPECT_EQ(ctx.reactor().source().stream_state_count(), 0U);
  cu::stream own;
  cuawait::sync_wait([](cu::stream_ref s) -> cuawait::task<void> { co_await s; }(own));
  EXPECT_EQ(ctx.reactor().source().stream_state_count(), 1U); // an ordinary stream has one
}

TEST(DeviceContextTest, PerThreadDefaultStreamsOfSeveralThreadsEachGetTheirOwnResults) {
  CUAWAIT_REQUIRE_GPU();
  for (const cu::strategy st : {cu::strategy::timeline, cu::strategy::event_poll,
                                cu::strategy::stream_poll, cu::strategy::host_callback}) {
    SCOPED_TRACE(cu::to_string(st));
    cu::device_context ctx(cu::device_context_options{.completion = st});
    constexpr int threads = 4, rounds = 200;
    std::atomic<int> wrong{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t) {
      ts.emplace_back([&] {
        const cu::context_scope here(ctx);
        int* d = nullptr;
        if (cudaMalloc(&d, sizeof(int)) != cudaSuccess) {
          wrong.fetch_add(rounds);
          return;
        }
        cuawait::sync_wait([&]() -> cuawait::task<void> {
          for (int r = 0; r < rounds; ++r) {
            // The awaits resume on the context's reactor thread, whose own per-thread
            // stream is another stream again: each round names the stream it uses.
            const cu::stream_ref mine(cudaStreamPerThread);
            co_await mine.memset(d, 0, 1);
            co_await mine.launch(add_one, dim3(1), dim3(1), d);
            int host = -1;
            co_await mine.copy(&host, d, 1);
            if (host != 1) {
              wrong.fetch_add(1);
            }
          }
        }());
        (void)cudaFree(d);
      });
    }
    for (auto& t : ts) {
      t.join();
    }
    EXPECT_EQ(wrong.load(), 0);
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

TEST(DeviceContextTest, RuntimeStopEndsTenThousandPendingWaitsWithOperationCancelled) {
  CUAWAIT_REQUIRE_GPU();
  cuawait::runtime rt(cuawait::runtime_options{.threads = 4});
  cuawait::test::spin_control ctl;
  ASSERT_NE(ctl.device, nullptr);
  cu::stream held;
  {
    // Loaded before it is held: a kernel loaded lazily while another spins can wait for it.
    cuawait::test::spin_control warm;
    ASSERT_NE(warm.device, nullptr);
    warm.release();
    cuawait::test::spin_until_released<<<1, 1, 0, held.get()>>>(warm.device, warm.device + 1);
    held.sync();
  }
  held.launch(cuawait::test::spin_until_released, dim3(1), dim3(1), ctl.device, ctl.device + 1);
  // Every wait awaits one event recorded behind the held kernel. Ten thousand awaits of the
  // stream itself would each enqueue a marker, and a stream's queue holds about a thousand
  // entries behind a kernel that does not end: the enqueue itself would block.
  cu::event behind;
  held.record(behind);
  constexpr int waits = 10'000;
  std::atomic<int> cancelled{0};
  std::atomic<int> other{0};
  for (int i = 0; i < waits; ++i) {
    rt.spawn([](cu::event_ref e, std::atomic<int>& c, std::atomic<int>& o) -> cuawait::task<void> {
      try {
        co_await e;
        o.fetch_add(1);
      } catch (const cuawait::operation_cancelled&) {
        c.fetch_add(1);
      } catch (...) {
        o.fetch_add(1);
      }
    }(behind, cancelled, other));
  }
  while (rt.reactor().reactor().pending() < static_cast<std::size_t>(waits)) {
    std::this_thread::yield();
  }
  const auto t0 = std::chrono::steady_clock::now();
  const std::size_t ended = rt.stop();
  rt.join_spawned();
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("runtime::stop: %zu pending waits ended, all resumed in %.2f ms\n", ended, ms);
  EXPECT_EQ(ended, static_cast<std::size_t>(waits));
  EXPECT_EQ(cancelled.load(), waits);
  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(ctl.outcome(), 0) << "the kernel ended first: nothing was stopped early";
  ctl.release();
  held.sync(); // the held kernel runs on to its end, in stream order
  EXPECT_EQ(ctl.outcome(), 1);
}

} // namespace
