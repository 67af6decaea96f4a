// SPDX-License-Identifier: Apache-2.0
#include <cuawait/async_event.hpp>
#include <cuawait/sync_wait.hpp>
#include <cuawait/task.hpp>

#include "common/race.hpp"
#include "common/thread_resumer.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

namespace ca = cuawait;
using ca::test::task_group;
using ca::test::thread_resumer;

namespace {

TEST(AsyncEvent, StartsClearUnlessAskedAndTracksSetReset) {
  ca::async_event e;
  EXPECT_FALSE(e.is_set());
  e.set();
  EXPECT_TRUE(e.is_set());
  e.set(); // idempotent
  EXPECT_TRUE(e.is_set());
  e.reset();
  EXPECT_FALSE(e.is_set());
  ca::async_event initially(true);
  EXPECT_TRUE(initially.is_set());
}

TEST(AsyncEvent, AwaitingASetEventCompletesAtOnce) {
  ca::async_event e(true);
  ca::sync_wait(e.wait());
  ca::sync_wait([&]() -> ca::task<void> { co_await e; }());
  EXPECT_TRUE(e.is_set());
}

TEST(AsyncEvent, SetResumesEveryWaiterInFifoOrder) {
  ca::async_event e;
  std::vector<int> order;
  task_group g;
  for (int i = 0; i < 5; ++i) {
    g.spawn_call([&e, &order, i]() -> ca::task<void> {
      co_await e;
      order.push_back(i);
    });
  }
  EXPECT_TRUE(order.empty());
  e.set();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4})); // inline, inside set()
  g.wait();
}

TEST(AsyncEvent, ResetMakesLaterWaitsSuspendAgain) {
  ca::async_event e(true);
  e.reset();
  bool resumed = false;
  task_group g;
  g.spawn_call([&]() -> ca::task<void> {
    co_await e.wait();
    resumed = true;
  });
  EXPECT_FALSE(resumed);
  e.set();
  EXPECT_TRUE(resumed);
  g.wait();
}

TEST(AsyncEvent, WaiterThatResetsDoesNotStrandLaterWaitersOfTheSameSet) {
  ca::async_event e;
  int resumed = 0;
  task_group g;
  g.spawn_call([&]() -> ca::task<void> {
    co_await e;
    ++resumed;
    e.reset(); // the set already reached every waiter queued before it
  });
  g.spawn_call([&]() -> ca::task<void> {
    co_await e;
    ++resumed;
  });
  e.set();
  g.wait();
  EXPECT_EQ(resumed, 2);
  EXPECT_FALSE(e.is_set());
}

enum class outcome { none, resumed, cancelled };

ca::task<void> wait_or_cancel(ca::async_event& e, std::stop_token token, outcome& out) {
  try {
    co_await e.wait(std::move(token));
    out = outcome::resumed;
  } catch (const ca::operation_cancelled& e) {
    EXPECT_EQ(std::string(e.what()), "cuawait::async_event::wait cancelled");
    out = outcome::cancelled;
  }
}

TEST(AsyncEvent, StopRequestWithdrawsOnlyThatWaiter) {
  ca::async_event e;
  std::stop_source stop;
  outcome first = outcome::none;
  outcome second = outcome::none;
  task_group g;
  g.spawn(wait_or_cancel(e, stop.get_token(), first));
  g.spawn(wait_or_cancel(e, {}, second));
  stop.request_stop();
  EXPECT_EQ(first, outcome::cancelled);
  EXPECT_EQ(second, outcome::none);
  e.set();
  g.wait();
  EXPECT_EQ(second, outcome::resumed);
}

TEST(AsyncEvent, StopRequestedBeforeWaitCancelsEvenWhenSet) {
  ca::async_event e(true);
  std::stop_source stop;
  stop.request_stop();
  EXPECT_THROW(ca::sync_wait(e.wait(stop.get_token())), ca::operation_cancelled);
  std::stop_source later;
  auto awaiter = e.wait(later.get_token());
  later.request_stop(); // after the awaiter was made, before it is awaited
  EXPECT_THROW(ca::sync_wait(awaiter), ca::operation_cancelled);
}

TEST(AsyncEvent, StopAfterTheWaitCompletedHasNoEffect) {
  ca::async_event e;
  std::stop_source stop;
  outcome out = outcome::none;
  task_group g;
  g.spawn(wait_or_cancel(e, stop.get_token(), out));
  e.set();
  stop.request_stop(); // the callback is gone: nothing to withdraw
  g.wait();
  EXPECT_EQ(out, outcome::resumed);
}

TEST(AsyncEvent, CancellationRacingSetResumesExactlyOnce) {
  for (int i = 0; i < 2000; ++i) {
    ca::async_event e;
    std::stop_source stop;
    outcome out = outcome::none;
    task_group g;
    g.spawn(wait_or_cancel(e, stop.get_token(), out));
    ca::test::race_stop_request(stop, [&] { e.set(); });
    g.wait(); // a double resumption would crash or trip the sanitizers
    ASSERT_NE(out, outcome::none) << "iteration " << i;
  }
}

// Waiters on 8 threads, a setter on another (racing them: some find the event set, some
// queue): every waiter resumes exactly once per round.
TEST(AsyncEvent, StressManyWaitersAcrossThreads) {
  constexpr int rounds = 50;
  constexpr int waiters = 64;
  std::atomic<int> resumed{0};
  for (int r = 0; r < rounds; ++r) {
    ca::async_event e;
    {
      thread_resumer threads(8);
      task_group g;
      for (int w = 0; w < waiters; ++w) {
        g.spawn_call([&]() -> ca::task<void> {
          co_await threads.schedule();
          co_await e;
          resumed.fetch_add(1);
        });
      }
      std::thread setter([&] { e.set(); });
      setter.join();
      g.wait();
    }
  }
  EXPECT_EQ(resumed.load(), rounds * waiters);
}

} // namespace
