// SPDX-License-Identifier: Apache-2.0
// Stop requests on GPU awaits, under every completion strategy: a wait on a kernel the host
// holds resumes at once with operation_cancelled while the kernel runs on; when_any and
// with_timeout return at the winner; stream-ordered frees after a cancellation are safe
// (run under compute-sanitizer memcheck); stop/complete races never hang.

#include "common/gpu.hpp"
#include "common/race.hpp"
#include "common/spin_kernel.cuh"

#include <cuawait/cancellation.hpp>
#include <cuawait/cuda.hpp>
#include <cuawait/deadline.hpp>
#include <cuawait/sync_wait.hpp>
#include <cuawait/timer.hpp>
#include <cuawait/when_any.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>

namespace {

namespace ca = cuawait;
namespace cu = cuawait::cuda;
using ca::task;
using namespace std::chrono_literals;

__global__ void add_one(int* p, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    p[i] += 1;
  }
}

class CancelTest : public ::testing::TestWithParam<cu::strategy> {
protected:
  void SetUp() override {
    CUAWAIT_REQUIRE_GPU();
    m_context =
        std::make_unique<cu::device_context>(cu::device_context_options{.completion = GetParam()});
    m_scope.emplace(*m_context);
    m_reactor = &m_context->reactor();
  }
  void TearDown() override {
    if (m_context) {
      (void)cudaDeviceSynchronize();
      m_reactor->reactor().drain();
      m_scope.reset();
    }
  }
  //! Requests a stop once a wait is pending in the reactor (or at once if already asked).
  void stop_when_pending(std::stop_source& stop) {
    while (!stop.stop_requested() && m_reactor->reactor().pending() == 0) {
      std::this_thread::yield();
    }
    stop.request_stop();
  }

  std::unique_ptr<cu::device_context> m_context;
  std::optional<cu::context_scope> m_scope; // a context scope is per thread: awaits on this one
  cu::gpu_reactor* m_reactor = nullptr;
};

TEST_P(CancelTest, AStopResumesAWaitOnAHeldKernelAtOnce) {
  ca::test::spin_control ctl;
  ASSERT_NE(ctl.device, nullptr);
  cu::stream s;
  std::stop_source stop;
  bool cancelled = false;
  const auto body = [&]() -> task<void> {
    try {
      co_await s.launch(ca::test::spin_until_released, dim3(1), dim3(1), ctl.device,
                        ctl.device + 1);
    } catch (const ca::operation_cancelled&) {
      cancelled = true;
    }
  };
  std::thread stopper([&] { stop_when_pending(stop); });
  ca::sync_wait(body().with_stop_token(stop.get_token()));
  stopper.join();
  EXPECT_TRUE(cancelled);
  EXPECT_EQ(ctl.outcome(), 0) << "the kernel finished: the stop did not end the wait early";
  EXPECT_EQ(m_reactor->reactor().pending(), 0U);
  EXPECT_EQ(m_reactor->stats().stopped, 1U);
  ctl.release();
  s.sync(); // the kernel runs on to its end, in stream order
  EXPECT_EQ(ctl.outcome(), 1);
}

// The issue's first example: a held kernel against a 10 ms sleep. The sleep wins, the GPU
// wait is stopped, and when_any returns while the kernel still runs.
TEST_P(CancelTest, WhenAnyOfAHeldKernelAndASleepReturnsAtTheSleep) {
  ca::test::spin_control ctl;
  ASSERT_NE(ctl.device, nullptr);
  cu::stream s;
  const auto r = ca::sync_wait(ca::when_any(
      s.launch(ca::test::spin_until_released, dim3(1), dim3(1), ctl.device, ctl.device + 1),
      ca::sleep_for(10ms)));
  EXPECT_EQ(r.index, 1U);
  EXPECT_EQ(ctl.outcome(), 0);
  ctl.release();
  s.sync();
  EXPECT_EQ(ctl.outcome(), 1);
}

TEST_P(CancelTest, WithTimeoutOnAHeldKernelThrowsOperationTimedOut) {
  ca::test::spin_control ctl;
  ASSERT_NE(ctl.device, nullptr);
  cu::stream s;
  EXPECT_THROW(ca::sync_wait(ca::with_timeout(s.launch(ca::test::spin_until_released, dim3(1),
                                                       dim3(1), ctl.device, ctl.device + 1),
                                              5ms)),
               ca::operation_timed_out);
  ctl.release();
  s.sync();
  EXPECT_EQ(ctl.outcome(), 1);
}

// The memory rule after a cancellation: what the abandoned work touches is freed in stream
// order (cudaFreeAsync on the same stream), so the free waits for the work without the host
// waiting. Run under compute-sanitizer memcheck: no access to freed memory.
TEST_P(CancelTest, BuffersFreedInStreamOrderAfterACancellationAreSafe) {
  ca::test::spin_control ctl;
  ASSERT_NE(ctl.device, nullptr);
  cu::stream s;
  constexpr int n = 1 << 16;
  for (int round = 0; round < 3; ++round) {
    ctl.host[0] = 0;
    int* d = nullptr;
    ASSERT_EQ(cudaMallocAsync(reinterpret_cast<void**>(&d), n * sizeof(int), s.get()), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(d, 0, n * sizeof(int), s.get()), cudaSuccess);
    std::stop_source stop;
    if (round == 0) {
      stop.request_stop(); // already stopped: the await gives up without even a marker
    }
    const auto body = [&]() -> task<void> {
      s.launch(ca::test::spin_until_released, dim3(1), dim3(1), ctl.device, ctl.device + 1);
      co_await s.launch(add_one, dim3(n / 256), dim3(256), d, n).with_stop_token(stop.get_token());
    };
    std::thread stopper([&] { stop_when_pending(stop); });
    EXPECT_THROW(ca::sync_wait(body()), ca::operation_cancelled);
    stopper.join();
    // Abandoned: free and reuse at once, in stream order behind the queued kernels.
    ASSERT_EQ(cudaFreeAsync(d, s.get()), cudaSuccess);
    int* again = nullptr;
    ASSERT_EQ(cudaMallocAsync(reinterpret_cast<void**>(&again), n * sizeof(int), s.get()),
              cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(again, 0xff, n * sizeof(int), s.get()), cudaSuccess);
    ctl.release();
    ASSERT_EQ(cudaFreeAsync(again, s.get()), cudaSuccess);
    s.sync();
  }
}

// Stop requests racing kernels that finish on their own: each wait resumes exactly once,
// with the value or operation_cancelled, and nothing hangs.
TEST_P(CancelTest, TwoHundredRacesOfStopAgainstCompletion) {
  cu::stream s;
  int* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, sizeof(int)), cudaSuccess);
  int done = 0, cancelled = 0;
  for (int i = 0; i < 200; ++i) {
    std::stop_source stop;
    int resumptions = 0;
    bool was_cancelled = false;
    const auto body = [&]() -> task<void> {
      try {
        co_await s.launch(add_one, dim3(1), dim3(1), d, 1);
      } catch (const ca::operation_cancelled&) {
        was_cancelled = true;
      }
      ++resumptions;
    };
    ca::test::race_stop_request(stop,
                                [&] { ca::sync_wait(body().with_stop_token(stop.get_token())); });
    ASSERT_EQ(resumptions, 1) << "race " << i;
    (was_cancelled ? cancelled : done) += 1;
  }
  s.sync();
  (void)cudaFree(d);
  EXPECT_EQ(done + cancelled, 200);
  EXPECT_EQ(m_reactor->reactor().pending(), 0U);
}

// Cleanup after a cancellation: drain() waits for the abandoned work although the
// coroutine's token is stopped.
TEST_P(CancelTest, DrainWaitsForTheStreamDespiteAStop) {
  ca::test::spin_control ctl;
  ASSERT_NE(ctl.device, nullptr);
  cu::stream s;
  std::stop_source stop;
  stop.request_stop();
  std::atomic<bool> drained{false};
  bool cancelled = false;
  const auto body = [&]() -> task<void> {
    try {
      co_await s.launch(ca::test::spin_until_released, dim3(1), dim3(1), ctl.device,
                        ctl.device + 1);
    } catch (const ca::operation_cancelled&) {
      cancelled = true;
    }
    co_await s.drain();
    drained.store(true);
  };
  std::thread waiter([&] {
    const cu::context_scope here(*m_context);
    ca::sync_wait(body().with_stop_token(stop.get_token()));
  });
  while (m_reactor->reactor().pending() == 0) {
    std::this_thread::yield(); // until drain() waits
  }
  EXPECT_FALSE(drained.load());
  EXPECT_EQ(ctl.outcome(), 0);
  ctl.release();
  waiter.join();
  EXPECT_TRUE(cancelled);
  EXPECT_TRUE(drained.load());
  EXPECT_EQ(ctl.outcome(), 1); // drained means the kernel had finished
}

// Acquisition: a stream lease waited for gives up at a stop, leasing nothing.
TEST_P(CancelTest, AStreamLeaseWaitGivesUpAtAStop) {
  cu::stream_pool pool(1);
  auto held = pool.try_acquire();
  ASSERT_TRUE(held.has_value());
  EXPECT_THROW(ca::sync_wait(ca::with_timeout(pool.acquire(), 2ms)), ca::operation_timed_out);
  EXPECT_EQ(pool.waiting(), 0U);
  held->reset();
  EXPECT_EQ(pool.available(), 1U);
}

INSTANTIATE_TEST_SUITE_P(AllStrategies, CancelTest,
                         ::testing::Values(cu::strategy::event_poll, cu::strategy::host_callback,
                                           cu::strategy::blocking_sync, cu::strategy::timeline,
                                           cu::strategy::stream_poll),
                         [](const auto& info) { return std::string(cu::to_string(info.param)); });

} // namespace
