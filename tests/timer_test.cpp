// SPDX-License-Identifier: Apache-2.0
// Timers: sleeps end at (never before) their deadline, in deadline order, on the right
// executor; stop tokens (given or inherited, e.g. from when_any) cancel them at once; a
// destroyed service ends every pending sleep. No test bounds a duration from above.

#include <cuawait/async_event.hpp>
#include <cuawait/sync_wait.hpp>
#include <cuawait/task.hpp>
#include <cuawait/thread_pool.hpp>
#include <cuawait/timer.hpp>
#include <cuawait/when_any.hpp>

#include "common/owned_coroutine.hpp"
#include "common/thread_resumer.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

namespace ca = cuawait;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
using ca::test::task_group;

namespace {

TEST(Timer, SleepForLastsAtLeastItsDuration) {
  const auto start = clock_type::now();
  ca::sync_wait([]() -> ca::task<void> { co_await ca::sleep_for(20ms); }());
  EXPECT_GE(clock_type::now() - start, 20ms); // a lower bound only
}

TEST(Timer, ADeadlineInThePastCompletesWithoutSuspending) {
  ca::timer_service timers;
  const auto here = std::this_thread::get_id();
  std::thread::id resumed_on;
  ca::sync_wait([&]() -> ca::task<void> {
    co_await timers.sleep_until(clock_type::now() - 1s);
    co_await timers.sleep_for(0ms);
    resumed_on = std::this_thread::get_id();
  }());
  EXPECT_EQ(resumed_on, here);
  EXPECT_EQ(timers.pending(), 0u);
}

TEST(Timer, SleepsEndInDeadlineOrderWhateverOrderTheyStarted) {
  ca::timer_service timers;
  // Far enough ahead that even a badly preempted test thread starts all three first.
  const auto t0 = clock_type::now() + 250ms;
  std::mutex m;
  std::vector<int> order;
  task_group g;
  for (const int k : {3, 1, 2}) {
    g.spawn_call([&, k]() -> ca::task<void> {
      co_await timers.sleep_until(t0 + k * 20ms);
      const std::lock_guard lock(m);
      order.push_back(k);
    });
  }
  EXPECT_EQ(timers.pending(), 3u);
  g.wait();
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(timers.pending(), 0u);
}

TEST(Timer, ResumesOnTheExecutorItSuspendedOn) {
  ca::thread_pool pool(2);
  ca::timer_service timers;
  const bool on_pool = ca::sync_wait([&]() -> ca::task<bool> {
    co_await pool.schedule();
    co_await timers.sleep_for(1ms);
    co_return ca::current_executor() == &pool;
  }());
  EXPECT_TRUE(on_pool);
}

TEST(Timer, AStopRequestCancelsASleepAtOnceAndLeavesNothingPending) {
  ca::timer_service timers;
  std::stop_source stop;
  std::atomic<bool> cancelled{false};
  std::string what;
  task_group g;
  g.spawn_call([&]() -> ca::task<void> {
    try {
      co_await timers.sleep_for(1h, stop.get_token());
    } catch (const ca::operation_cancelled& e) {
      what = e.what();
      cancelled = true;
    }
  });
  EXPECT_EQ(timers.pending(), 1u);
  stop.request_stop(); // resumes the sleeper inside this call, on this thread
  EXPECT_TRUE(cancelled);
  g.wait();
  EXPECT_EQ(what, "cuawait::sleep cancelled");
  EXPECT_EQ(timers.pending(), 0u);
}

// Regression: the timer thread waited with `wait_until(lock, first->m_deadline)`, a
// reference into the sleeping coroutine's frame that libstdc++ reads again after waking. A
// cancelled sleep whose frame was freed made the next wake-up read freed memory (ASan
// reported it every time). The short pause only gives the timer thread time to start its
// timed wait on the long sleep's deadline; no result depends on it.
TEST(Timer, RegressionTimerThreadNeverReadsAFreedSleepAfterWaking) {
  ca::timer_service timers;
  for (int round = 0; round < 3; ++round) {
    std::stop_source stop;
    bool cancelled = false;
    auto sleeper = [&]() -> ca::test::owned_coroutine {
      try {
        co_await timers.sleep_for(10s, stop.get_token());
      } catch (const ca::operation_cancelled&) {
        cancelled = true;
      }
    };
    ca::test::owned_coroutine c = sleeper();
    std::this_thread::sleep_for(30ms);
    stop.request_stop(); // resumes the sleeper here; it runs to its end
    ASSERT_TRUE(cancelled);
    ASSERT_TRUE(c.done());
    c.handle.destroy(); // frees the frame that held the deadline
    ca::sync_wait([&]() -> ca::task<void> { co_await timers.sleep_for(1ms); }());
  }
  EXPECT_EQ(timers.pending(), 0u);
}

TEST(Timer, StopRequestedBeforehandThrowsWithoutSleeping) {
  ca::timer_service timers;
  std::stop_source stop;
  stop.request_stop();
  EXPECT_THROW(
      ca::sync_wait([&]() -> ca::task<void> { co_await timers.sleep_for(1h, stop.get_token()); }()),
      ca::operation_cancelled);
  EXPECT_EQ(timers.pending(), 0u);
}

TEST(Timer, ASleepInheritsTheStopTokenOfTheTaskAwaitingIt) {
  ca::timer_service timers;
  std::stop_source stop;
  std::atomic<bool> cancelled{false};
  task_group g;
  g.spawn(
      [](ca::timer_service& t, std::atomic<bool>& out) -> ca::task<void> {
        try {
          co_await t.sleep_for(1h); // no token given: the task's own applies
        } catch (const ca::operation_cancelled&) {
          out = true;
        }
      }(timers, cancelled)
                                                              .with_stop_token(stop.get_token()));
  stop.request_stop();
  g.wait();
  EXPECT_TRUE(cancelled);
}

// The use it is for: a deadline on work that would otherwise wait for ever.
TEST(Timer, WhenAnyWithASleepTimesOutWorkThatNeverFinishes) {
  ca::timer_service timers;
  ca::async_event never;
  const auto r = ca::sync_wait(ca::when_any(
      [&]() -> ca::task<int> {
        const std::stop_token token = co_await ca::get_stop_token();
        try {
          co_await never.wait(token);
        } catch (const ca::operation_cancelled&) {
          co_return -1; // asked to stop: the timeout won
        }
        co_return 1;
      }(),
      timers.sleep_for(10ms)));
  EXPECT_EQ(r.index, 1u) << "the sleep finished first";
  EXPECT_EQ(timers.pending(), 0u);
}

// And the other way round: finished work ends the losing sleep at once, so a when_any with
// a one-hour timeout does not take an hour.
TEST(Timer, WhenAnyEndsTheLosingSleepAtOnce) {
  ca::timer_service timers;
  const auto r =
      ca::sync_wait(ca::when_any([]() -> ca::task<int> { co_return 7; }(), timers.sleep_for(1h)));
  ASSERT_EQ(r.index, 0u);
  EXPECT_EQ(std::get<0>(r.value), 7);
  EXPECT_EQ(timers.pending(), 0u);
}

TEST(Timer, DestroyingTheServiceEndsPendingSleepsWithAnError) {
  std::atomic<int> ended{0};
  std::string what;
  task_group g;
  {
    ca::timer_service timers;
    for (int i = 0; i < 3; ++i) {
      g.spawn_call([&]() -> ca::task<void> {
        try {
          co_await timers.sleep_for(1h);
        } catch (const ca::operation_cancelled& e) {
          if (ended.fetch_add(1) == 0) {
            what = e.what();
          }
        }
      });
    }
    EXPECT_EQ(timers.pending(), 3u);
  } // resumes the three sleepers here, with the error
  g.wait();
  EXPECT_EQ(ended.load(), 3);
  EXPECT_EQ(what, "cuawait::sleep cancelled: its timer_service was destroyed");
}

// Many short sleeps from several threads, a third of them cancelled while they may be
// firing: each sleep ends exactly once, as fired or as cancelled, and nothing stays pending.
TEST(Timer, StressSleepsAndCancellationsRacingTheTimer) {
  constexpr int sleepers = 2000;
  std::vector<std::stop_source> stops(sleepers);
  std::atomic<int> fired{0};
  std::atomic<int> cancelled{0};
  std::size_t left = 0;
  {
    ca::thread_pool pool(4);
    ca::timer_service timers; // after the pool: gone (its thread joined) before the pool
    task_group g;
    for (int i = 0; i < sleepers; ++i) {
      g.spawn_call([&, i]() -> ca::task<void> {
        co_await pool.schedule();
        try {
          co_await timers.sleep_for(std::chrono::microseconds(50 * (i % 40)), stops[i].get_token());
          fired.fetch_add(1);
        } catch (const ca::operation_cancelled&) {
          cancelled.fetch_add(1);
        }
      });
    }
    for (int i = 0; i < sleepers; i += 3) {
      stops[i].request_stop();
    }
    g.wait();
    left = timers.pending();
  }
  EXPECT_EQ(fired.load() + cancelled.load(), sleepers);
  EXPECT_LE(cancelled.load(), (sleepers + 2) / 3);
  EXPECT_EQ(left, 0u);
}

} // namespace
