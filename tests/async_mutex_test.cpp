// SPDX-License-Identifier: Apache-2.0
#include <cuawait/async_mutex.hpp>
#include <cuawait/sync_wait.hpp>
#include <cuawait/task.hpp>

#include "common/race.hpp"
#include "common/thread_resumer.hpp"

#include <gtest/gtest.h>

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

static_assert(!std::is_copy_constructible_v<ca::async_mutex_lock>);
static_assert(std::is_nothrow_move_constructible_v<ca::async_mutex_lock>);

TEST(AsyncMutex, TryLockFailsWhileHeld) {
  ca::async_mutex m;
  EXPECT_TRUE(m.try_lock());
  EXPECT_FALSE(m.try_lock());
  m.unlock();
  EXPECT_TRUE(m.try_lock());
  m.unlock();
}

TEST(AsyncMutex, UncontendedLockCompletesAndHolds) {
  ca::async_mutex m;
  ca::sync_wait(m.lock());
  EXPECT_FALSE(m.try_lock());
  m.unlock();
  EXPECT_TRUE(m.try_lock());
  m.unlock();
}

TEST(AsyncMutex, WaiterSuspendsUntilUnlockHandsItTheLock) {
  ca::async_mutex m;
  ASSERT_TRUE(m.try_lock());
  bool acquired = false;
  task_group g;
  g.spawn_call([&]() -> ca::task<void> {
    co_await m.lock();
    acquired = true; // keeps the lock
  });
  EXPECT_FALSE(acquired);
  m.unlock();
  EXPECT_TRUE(acquired);      // resumed inline by unlock()
  EXPECT_FALSE(m.try_lock()); // handed over, never free in between
  m.unlock();
  g.wait();
  EXPECT_TRUE(m.try_lock());
  m.unlock();
}

TEST(AsyncMutex, WaitersAcquireInFifoOrder) {
  ca::async_mutex m;
  ASSERT_TRUE(m.try_lock());
  std::vector<int> order;
  task_group g;
  for (int i = 0; i < 5; ++i) {
    g.spawn_call([&, i]() -> ca::task<void> {
      co_await m.lock();
      order.push_back(i);
      m.unlock();
    });
  }
  EXPECT_TRUE(order.empty());
  m.unlock();
  g.wait();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_TRUE(m.try_lock());
  m.unlock();
}

TEST(AsyncMutex, TryLockDoesNotOvertakeQueuedWaiter) {
  ca::async_mutex m;
  ASSERT_TRUE(m.try_lock());
  task_group g;
  bool acquired = false;
  g.spawn_call([&]() -> ca::task<void> {
    auto guard = co_await m.scoped_lock();
    acquired = true;
    co_return; // guard unlocks here
  });
  m.unlock();
  EXPECT_TRUE(acquired);
  g.wait();
  EXPECT_TRUE(m.try_lock());
  m.unlock();
}

TEST(AsyncMutex, ScopedLockGuardUnlocksOnScopeExitAndMoves) {
  ca::async_mutex m;
  ca::sync_wait([&]() -> ca::task<void> {
    {
      ca::async_mutex_lock guard = co_await m.scoped_lock();
      EXPECT_TRUE(guard.owns_lock());
      EXPECT_EQ(guard.mutex(), &m);
      EXPECT_FALSE(m.try_lock());
      ca::async_mutex_lock moved = std::move(guard);
      EXPECT_FALSE(guard.owns_lock()); // NOLINT(bugprone-use-after-move): checks the move
      EXPECT_TRUE(moved.owns_lock());
      EXPECT_FALSE(m.try_lock());
    }
    EXPECT_TRUE(m.try_lock());
    m.unlock();
    auto guard = co_await m.scoped_lock();
    guard.unlock();
    EXPECT_FALSE(guard.owns_lock());
    EXPECT_TRUE(m.try_lock()); // an explicit unlock released it once, the destructor not again
    m.unlock();
  }());
}

TEST(AsyncMutex, ExceptionInCriticalSectionStillUnlocks) {
  ca::async_mutex m;
  auto body = [&]() -> ca::task<void> {
    auto guard = co_await m.scoped_lock();
    throw std::runtime_error("inside");
  };
  EXPECT_THROW(ca::sync_wait(body()), std::runtime_error);
  EXPECT_TRUE(m.try_lock());
  m.unlock();
}

enum class outcome { none, acquired, cancelled };

ca::task<void> lock_or_cancel(ca::async_mutex& m, std::stop_token token, outcome& out) {
  try {
    co_await m.lock(std::move(token));
    out = outcome::acquired;
    m.unlock();
  } catch (const ca::operation_cancelled& e) {
    EXPECT_EQ(std::string(e.what()), "cuawait::async_mutex::lock cancelled");
    out = outcome::cancelled;
  }
}

TEST(AsyncMutex, StopRequestWithdrawsWaiterWithoutTakingTheLock) {
  ca::async_mutex m;
  ASSERT_TRUE(m.try_lock());
  std::stop_source stop;
  outcome first = outcome::none;
  outcome second = outcome::none;
  task_group g;
  g.spawn(lock_or_cancel(m, stop.get_token(), first));
  g.spawn(lock_or_cancel(m, {}, second));
  stop.request_stop();
  EXPECT_EQ(first, outcome::cancelled); // resumed inside request_stop()
  EXPECT_EQ(second, outcome::none);
  m.unlock(); // goes to the remaining waiter, not the cancelled one
  g.wait();
  EXPECT_EQ(second, outcome::acquired);
  EXPECT_TRUE(m.try_lock());
  m.unlock();
}

TEST(AsyncMutex, StopRequestedBeforeLockCancelsEvenWhenFree) {
  ca::async_mutex m;
  std::stop_source stop;
  stop.request_stop();
  EXPECT_THROW(ca::sync_wait(m.lock(stop.get_token())), ca::operation_cancelled);
  EXPECT_THROW(ca::sync_wait(m.scoped_lock(stop.get_token())), ca::operation_cancelled);
  EXPECT_TRUE(m.try_lock()); // not taken
  m.unlock();
}

TEST(AsyncMutex, UnrequestedTokenBehavesLikePlainLock) {
  ca::async_mutex m;
  std::stop_source stop;
  ca::sync_wait([&]() -> ca::task<void> {
    auto guard = co_await m.scoped_lock(stop.get_token());
    EXPECT_TRUE(guard.owns_lock());
  }());
  EXPECT_TRUE(m.try_lock());
  m.unlock();
}

// Stop requested on one thread while another unlocks: exactly one wins, and the lock is
// neither lost nor duplicated.
TEST(AsyncMutex, CancellationRacingUnlockKeepsLockCountExact) {
  int acquired = 0;
  int cancelled = 0;
  for (int i = 0; i < 2000; ++i) {
    ca::async_mutex m;
    ASSERT_TRUE(m.try_lock());
    std::stop_source stop;
    outcome out = outcome::none;
    task_group g;
    g.spawn(lock_or_cancel(m, stop.get_token(), out));
    ca::test::race_stop_request(stop, [&] { m.unlock(); });
    g.wait();
    ASSERT_NE(out, outcome::none);
    (out == outcome::acquired ? acquired : cancelled) += 1;
    ASSERT_TRUE(m.try_lock()) << "lock leaked in iteration " << i;
    m.unlock();
  }
  EXPECT_EQ(acquired + cancelled, 2000);
}

// Coroutines hopping between 8 threads increment a plain int under the mutex; TSan checks
// the exclusion, the total checks that no increment was lost.
TEST(AsyncMutex, StressProtectsNonAtomicCounterAcrossThreads) {
  constexpr int coroutines = 64;
  constexpr int iterations = 1000;
  ca::async_mutex m;
  long counter = 0;
  {
    thread_resumer threads(8);
    task_group g;
    for (int c = 0; c < coroutines; ++c) {
      g.spawn_call([&]() -> ca::task<void> {
        co_await threads.schedule();
        for (int i = 0; i < iterations; ++i) {
          if (i % 2 == 0) {
            auto guard = co_await m.scoped_lock();
            ++counter;
          } else {
            co_await m.lock();
            ++counter;
            m.unlock();
          }
          if (i % 16 == 0) {
            co_await threads.schedule();
          }
        }
      });
    }
    g.wait();
  }
  EXPECT_EQ(counter, long{coroutines} * iterations);
  EXPECT_TRUE(m.try_lock());
  m.unlock();
}

// Every waiter queued at once: hand-over chains must not nest on the stack.
TEST(AsyncMutex, LongQueueOfWaitersDoesNotGrowTheStack) {
  constexpr int waiters = 100000;
  ca::async_mutex m;
  ASSERT_TRUE(m.try_lock());
  int counter = 0;
  task_group g;
  for (int i = 0; i < waiters; ++i) {
    g.spawn_call([&]() -> ca::task<void> {
      co_await m.lock();
      ++counter;
      m.unlock();
    });
  }
  m.unlock();
  g.wait();
  EXPECT_EQ(counter, waiters);
}

} // namespace
