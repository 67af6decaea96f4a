// SPDX-License-Identifier: Apache-2.0
#include <cuawait/async_semaphore.hpp>
#include <cuawait/sync_wait.hpp>
#include <cuawait/task.hpp>

#include "common/race.hpp"
#include "common/thread_resumer.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <type_traits>
#include <vector>

namespace ca = cuawait;
using ca::test::task_group;
using ca::test::thread_resumer;

namespace {

static_assert(!std::is_copy_constructible_v<ca::async_semaphore_permit>);
static_assert(std::is_nothrow_move_constructible_v<ca::async_semaphore_permit>);

TEST(AsyncSemaphore, TryAcquireCountsPermits) {
  ca::async_semaphore s(2);
  EXPECT_EQ(s.available(), 2);
  EXPECT_TRUE(s.try_acquire());
  EXPECT_TRUE(s.try_acquire());
  EXPECT_FALSE(s.try_acquire());
  EXPECT_EQ(s.available(), 0);
  s.release(2);
  EXPECT_EQ(s.available(), 2);
}

TEST(AsyncSemaphore, InvalidCountsThrowAndChangeNothing) {
  EXPECT_THROW(ca::async_semaphore(-1), std::invalid_argument);
  ca::async_semaphore s(1);
  EXPECT_THROW(s.release(-1), std::invalid_argument);
  EXPECT_EQ(s.available(), 1);
  s.release(0);
  EXPECT_EQ(s.available(), 1);
}

TEST(AsyncSemaphore, AcquireWithPermitAvailableDoesNotSuspend) {
  ca::async_semaphore s(1);
  ca::sync_wait(s.acquire());
  EXPECT_EQ(s.available(), 0);
}

TEST(AsyncSemaphore, ReleaseHandsPermitsToWaitersInFifoOrder) {
  ca::async_semaphore s(0);
  std::vector<int> order;
  task_group g;
  for (int i = 0; i < 4; ++i) {
    g.spawn_call([&s, &order, i]() -> ca::task<void> {
      co_await s.acquire();
      order.push_back(i);
    });
  }
  EXPECT_TRUE(order.empty());
  s.release(2);
  EXPECT_EQ(order, (std::vector<int>{0, 1}));
  EXPECT_EQ(s.available(), 0); // handed over, not made available
  EXPECT_FALSE(s.try_acquire());
  s.release(3);
  g.wait();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(s.available(), 1);
}

TEST(AsyncSemaphore, PermitReleasesOnScopeExitAndMoves) {
  ca::async_semaphore s(2);
  ca::sync_wait([&]() -> ca::task<void> {
    {
      ca::async_semaphore_permit p = co_await s.acquire_permit();
      EXPECT_TRUE(p);
      EXPECT_EQ(s.available(), 1);
      ca::async_semaphore_permit q = std::move(p);
      EXPECT_FALSE(p); // NOLINT(bugprone-use-after-move): checks the move
      EXPECT_EQ(s.available(), 1);
      auto r = co_await s.acquire_permit();
      EXPECT_EQ(s.available(), 0);
      r.release();
      EXPECT_EQ(s.available(), 1);
    }
    EXPECT_EQ(s.available(), 2);
  }());
}

TEST(AsyncSemaphore, PermitIsReturnedWhenTheBodyThrows) {
  ca::async_semaphore s(1);
  auto body = [&]() -> ca::task<void> {
    auto permit = co_await s.acquire_permit();
    throw std::runtime_error("inside");
  };
  EXPECT_THROW(ca::sync_wait(body()), std::runtime_error);
  EXPECT_EQ(s.available(), 1);
}

enum class outcome { none, acquired, cancelled };

ca::task<void> acquire_or_cancel(ca::async_semaphore& s, std::stop_token token, outcome& out) {
  try {
    co_await s.acquire(std::move(token));
    out = outcome::acquired; // keeps the permit
  } catch (const ca::operation_cancelled& e) {
    EXPECT_EQ(std::string(e.what()), "cuawait::async_semaphore::acquire cancelled");
    out = outcome::cancelled;
  }
}

TEST(AsyncSemaphore, CancelledWaiterConsumesNoPermit) {
  ca::async_semaphore s(0);
  std::stop_source stop;
  outcome first = outcome::none;
  outcome second = outcome::none;
  task_group g;
  g.spawn(acquire_or_cancel(s, stop.get_token(), first));
  g.spawn(acquire_or_cancel(s, {}, second));
  stop.request_stop();
  EXPECT_EQ(first, outcome::cancelled);
  s.release(2);
  g.wait();
  EXPECT_EQ(second, outcome::acquired);
  EXPECT_EQ(s.available(), 1);
}

TEST(AsyncSemaphore, StopRequestedBeforeAcquireCancelsEvenWithPermits) {
  ca::async_semaphore s(3);
  std::stop_source stop;
  stop.request_stop();
  EXPECT_THROW(ca::sync_wait(s.acquire(stop.get_token())), ca::operation_cancelled);
  EXPECT_THROW(ca::sync_wait(s.acquire_permit(stop.get_token())), ca::operation_cancelled);
  EXPECT_EQ(s.available(), 3);
}

TEST(AsyncSemaphore, CancellationRacingReleaseKeepsPermitCountExact) {
  constexpr int rounds = 2000;
  for (int i = 0; i < rounds; ++i) {
    ca::async_semaphore s(0);
    std::stop_source stop;
    outcome out = outcome::none;
    task_group g;
    g.spawn(acquire_or_cancel(s, stop.get_token(), out));
    ca::test::race_stop_request(stop, [&] { s.release(1); });
    g.wait();
    ASSERT_NE(out, outcome::none);
    // The one permit went to the waiter or is still available: never both, never neither.
    ASSERT_EQ(s.available(), out == outcome::acquired ? 0 : 1) << "iteration " << i;
  }
}

// 64 coroutines on 8 threads share 4 permits: never more than 4 in flight, all returned.
TEST(AsyncSemaphore, StressBoundsWorkInFlight) {
  constexpr int limit = 4;
  constexpr int coroutines = 64;
  constexpr int iterations = 300;
  ca::async_semaphore s(limit);
  std::atomic<int> in_flight{0};
  std::atomic<int> peak{0};
  std::atomic<int> done{0};
  {
    thread_resumer threads(8);
    task_group g;
    for (int c = 0; c < coroutines; ++c) {
      g.spawn_call([&]() -> ca::task<void> {
        co_await threads.schedule();
        for (int i = 0; i < iterations; ++i) {
          auto permit = co_await s.acquire_permit();
          const int now = in_flight.fetch_add(1) + 1;
          int seen = peak.load();
          while (now > seen && !peak.compare_exchange_weak(seen, now)) {
          }
          if (i % 8 == 0) {
            co_await threads.schedule(); // hold the permit across a thread hop
          }
          in_flight.fetch_sub(1);
          done.fetch_add(1);
        }
      });
    }
    g.wait();
  }
  EXPECT_LE(peak.load(), limit);
  EXPECT_GE(peak.load(), 1);
  EXPECT_EQ(done.load(), coroutines * iterations);
  EXPECT_EQ(s.available(), limit);
}

} // namespace
