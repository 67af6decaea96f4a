// SPDX-License-Identifier: Apache-2.0
#include <cuawait/async_latch.hpp>
#include <cuawait/sync_wait.hpp>
#include <cuawait/task.hpp>

#include "common/race.hpp"
#include "common/thread_resumer.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

namespace ca = cuawait;
using ca::test::task_group;
using ca::test::thread_resumer;

namespace {

TEST(AsyncLatch, ZeroCountIsOpenFromTheStart) {
  ca::async_latch l(0);
  EXPECT_TRUE(l.try_wait());
  ca::sync_wait(l.wait());
  ca::sync_wait([&]() -> ca::task<void> { co_await l; }());
}

TEST(AsyncLatch, OpensWhenCountReachesZeroAndStaysOpen) {
  ca::async_latch l(3);
  std::vector<int> order;
  task_group g;
  for (int i = 0; i < 3; ++i) {
    g.spawn_call([&l, &order, i]() -> ca::task<void> {
      co_await l;
      order.push_back(i);
    });
  }
  l.count_down();
  EXPECT_FALSE(l.try_wait());
  l.count_down(2);
  EXPECT_TRUE(l.try_wait());
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2})); // inside the last count_down, FIFO
  g.wait();
  ca::sync_wait(l.wait()); // open for good
}

TEST(AsyncLatch, InvalidCountsThrowAndLeaveTheCount) {
  EXPECT_THROW(ca::async_latch(-1), std::invalid_argument);
  ca::async_latch l(2);
  EXPECT_THROW(l.count_down(-1), std::invalid_argument);
  EXPECT_THROW(l.count_down(3), std::logic_error);
  l.count_down(0);
  EXPECT_FALSE(l.try_wait());
  l.count_down(2);
  EXPECT_TRUE(l.try_wait());
  EXPECT_THROW(l.count_down(), std::logic_error);
}

enum class outcome { none, resumed, cancelled };

ca::task<void> wait_or_cancel(ca::async_latch& l, std::stop_token token, outcome& out) {
  try {
    co_await l.wait(std::move(token));
    out = outcome::resumed;
  } catch (const ca::operation_cancelled& e) {
    EXPECT_EQ(std::string(e.what()), "cuawait::async_latch::wait cancelled");
    out = outcome::cancelled;
  }
}

TEST(AsyncLatch, CancelledWaitDoesNotCountDownOrDisturbOthers) {
  ca::async_latch l(1);
  std::stop_source stop;
  outcome first = outcome::none;
  outcome second = outcome::none;
  task_group g;
  g.spawn(wait_or_cancel(l, stop.get_token(), first));
  g.spawn(wait_or_cancel(l, {}, second));
  stop.request_stop();
  EXPECT_EQ(first, outcome::cancelled);
  EXPECT_FALSE(l.try_wait());
  EXPECT_EQ(second, outcome::none);
  l.count_down();
  g.wait();
  EXPECT_EQ(second, outcome::resumed);
}

TEST(AsyncLatch, StopRequestedBeforeWaitCancelsEvenWhenOpen) {
  ca::async_latch l(0);
  std::stop_source stop;
  stop.request_stop();
  EXPECT_THROW(ca::sync_wait(l.wait(stop.get_token())), ca::operation_cancelled);
}

TEST(AsyncLatch, CancellationRacingLastCountDownResumesExactlyOnce) {
  for (int i = 0; i < 2000; ++i) {
    ca::async_latch l(1);
    std::stop_source stop;
    outcome out = outcome::none;
    task_group g;
    g.spawn(wait_or_cancel(l, stop.get_token(), out));
    ca::test::race_stop_request(stop, [&] { l.count_down(); });
    g.wait();
    ASSERT_NE(out, outcome::none) << "iteration " << i;
    ASSERT_TRUE(l.try_wait());
  }
}

// 8 threads count down 1,000 times each while coroutines on other threads wait.
TEST(AsyncLatch, StressCountDownFromManyThreads) {
  constexpr int threads_n = 8;
  constexpr int per_thread = 1000;
  ca::async_latch l(threads_n * per_thread);
  std::atomic<int> resumed{0};
  {
    thread_resumer waiters(4);
    task_group g;
    for (int w = 0; w < 32; ++w) {
      g.spawn_call([&]() -> ca::task<void> {
        co_await waiters.schedule();
        co_await l;
        EXPECT_TRUE(l.try_wait());
        resumed.fetch_add(1);
      });
    }
    std::vector<std::thread> counters;
    for (int t = 0; t < threads_n; ++t) {
      counters.emplace_back([&] {
        for (int i = 0; i < per_thread; ++i) {
          l.count_down();
        }
      });
    }
    for (std::thread& t : counters) {
      t.join();
    }
    g.wait();
  }
  EXPECT_EQ(resumed.load(), 32);
  EXPECT_THROW(l.count_down(), std::logic_error);
}

} // namespace
