// SPDX-License-Identifier: Apache-2.0
// Timers: sleeps end at (never before) their deadline, in deadline order, on the right
// executor; stop tokens (given or inherited, e.g. from when_any) cancel them at once; a
// destroyed service ends every pending sleep. No test bounds a duration from above.

#include <cuawait/async_event.hpp>
#include <cuawait/deadline.hpp>
#include <cuawait/run_loop.hpp>
#include <cuawait/sync_wait.hpp>
#include <cuawait/task.hpp>
#include <cuawait/thread_pool.hpp>
#include <cuawait/timer.hpp>
#include <cuawait/when_all.hpp>
#include <cuawait/when_any.hpp>

#include "common/owned_coroutine.hpp"
#include "common/thread_resumer.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
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

TEST(Timer, CloseEndsPendingSleepsAndRefusesNewOnes) {
  ca::timer_service timers;
  std::string first;
  std::string later;
  task_group g;
  g.spawn_call([&]() -> ca::task<void> {
    try {
      co_await timers.sleep_for(1h);
    } catch (const ca::operation_cancelled& e) {
      first = e.what();
    }
  });
  EXPECT_EQ(timers.pending(), 1u);
  timers.close(); // resumes the sleeper here
  g.wait();
  EXPECT_EQ(first, "cuawait::sleep cancelled: its timer_service was closed or destroyed");
  EXPECT_THROW(ca::sync_wait(timers.sleep_for(1h)), ca::operation_cancelled);
  EXPECT_EQ(timers.pending(), 0u);
  timers.close(); // idempotent
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
  EXPECT_EQ(what, "cuawait::sleep cancelled: its timer_service was closed or destroyed");
}

//! 2,000 short sleeps of coroutines on `pool`, a third of them cancelled while they may be
//! firing: each sleep ends exactly once, as fired or as cancelled, and nothing stays pending.
void expect_each_sleep_ends_once(ca::thread_pool& pool, ca::timer_service& timers) {
  constexpr int sleepers = 2000;
  std::vector<std::stop_source> stops(sleepers);
  std::atomic<int> fired{0};
  std::atomic<int> cancelled{0};
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
  EXPECT_EQ(fired.load() + cancelled.load(), sleepers);
  EXPECT_LE(cancelled.load(), (sleepers + 2) / 3);
  EXPECT_EQ(timers.pending(), 0u);
}

TEST(Timer, StressSleepsAndCancellationsRacingTheTimer) {
  ca::thread_pool pool(4);
  ca::timer_service timers; // after the pool: gone (its thread joined) before the pool
  expect_each_sleep_ends_once(pool, timers);
}

// --- the polled service: no thread; the idle threads of the executors polling it ----------

//! A pool whose idle workers poll `timers`, named as its timer service, and woken by it.
struct polled_pool {
  explicit polled_pool(ca::timer_service& timers, std::size_t threads = 2)
      : service(timers), pool(threads) {
    timers.set_idle_waker(&wake, &pool);
    pool.set_idle_source(&timers);
    pool.set_timer_service(&timers);
  }
  polled_pool(const polled_pool&) = delete;
  polled_pool& operator=(const polled_pool&) = delete;
  ~polled_pool() {
    pool.set_idle_source(nullptr);
    service.set_idle_waker(nullptr, nullptr);
  }
  static void wake(void* p) noexcept { static_cast<ca::thread_pool*>(p)->wake_parked_poller(); }
  ca::timer_service& service;
  ca::thread_pool pool;
};

//! A coroutine sleeping an hour on `timers` until `stop` is requested.
void spawn_hour_sleep(task_group& g, ca::timer_service& timers, std::stop_token stop) {
  g.spawn_call([&timers, stop]() -> ca::task<void> {
    try {
      co_await timers.sleep_for(1h, stop);
    } catch (const ca::operation_cancelled&) {
    }
  });
}

TEST(PolledTimer, AnIdleSourceOnlyWhilePendingAndSpinningOnlyNearADeadline) {
  ca::timer_service timers{ca::timer_service::polled};
  EXPECT_TRUE(timers.is_polled());
  EXPECT_FALSE(timers.idle_pending());
  EXPECT_FALSE(timers.idle_keep_spinning());
  EXPECT_EQ(timers.idle_spinners_wanted(), 0u);
  EXPECT_EQ(timers.poll_idle(), 0u);
  std::stop_source stop;
  task_group g;
  spawn_hour_sleep(g, timers, stop.get_token());
  EXPECT_TRUE(timers.idle_pending());
  EXPECT_FALSE(timers.idle_keep_spinning()); // an hour away: park, do not spin
  EXPECT_EQ(timers.idle_spinners_wanted(), 0u);
  EXPECT_GT(timers.idle_park_period(), 59min); // park until about the deadline
  EXPECT_LE(timers.idle_park_period(), 1h);
  EXPECT_EQ(timers.poll_idle(), 0u); // not due
  stop.request_stop();
  g.wait();
  EXPECT_FALSE(timers.idle_pending());
}

TEST(PolledTimer, AThreadedServiceGivesPollersNothing) {
  ca::timer_service timers; // its own thread completes its sleeps
  EXPECT_FALSE(timers.is_polled());
  std::stop_source stop;
  task_group g;
  spawn_hour_sleep(g, timers, stop.get_token());
  EXPECT_FALSE(timers.idle_pending()); // a pool polling it would never park for it
  EXPECT_EQ(timers.poll_idle(), 0u);
  stop.request_stop();
  g.wait();
}

TEST(PolledTimer, PoolWorkersEndSleepsInDeadlineOrderOnThePool) {
  ca::timer_service timers{ca::timer_service::polled};
  polled_pool p(timers);
  const auto t0 = clock_type::now() + 100ms;
  std::mutex m;
  std::vector<int> order;
  std::atomic<int> wrong{0};
  task_group g;
  for (const int k : {3, 1, 2}) {
    g.spawn_call([&, k]() -> ca::task<void> {
      co_await p.pool.schedule();
      // The free function picks the executor's service, not the process-wide one.
      if (&ca::timer_service::current() != &timers) {
        wrong.fetch_add(1);
      }
      co_await ca::sleep_until(t0 + k * 10ms);
      if (ca::current_executor() != &p.pool || clock_type::now() < t0 + k * 10ms) {
        wrong.fetch_add(1);
      }
      const std::lock_guard lock(m);
      order.push_back(k);
    });
  }
  g.wait();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(timers.pending(), 0u);
}

// No lost wake-up: with an hour-long sleep pending, the pool's poller parks for an hour; a
// short sleep started later must wake it (through the waker) and end. The bound only turns
// a hang into a failure.
TEST(PolledTimer, ANewEarlierSleepWakesAParkedPoller) {
  ca::timer_service timers{ca::timer_service::polled};
  polled_pool p(timers, 3);
  std::stop_source stop;
  task_group g;
  g.spawn_call([&]() -> ca::task<void> {
    co_await p.pool.schedule();
    try {
      co_await ca::sleep_for(1h, stop.get_token());
    } catch (const ca::operation_cancelled&) {
    }
  });
  for (int round = 0; round < 20; ++round) {
    std::promise<void> ended;
    std::future<void> f = ended.get_future();
    g.spawn_call([&]() -> ca::task<void> {
      co_await p.pool.schedule();
      co_await ca::sleep_for(2ms);
      ended.set_value();
    });
    ASSERT_EQ(f.wait_for(60s), std::future_status::ready) << "round " << round;
  }
  stop.request_stop();
  g.wait();
  EXPECT_EQ(timers.pending(), 0u);
}

// A deadline on a pool that never runs out of work: its workers poll the timers between
// two pieces of work, so the sleep ends while every worker stays busy (before, it ended
// only once they ran dry). The busy coroutines give up after 20 s, turning that hang into a
// failure.
TEST(PolledTimer, ASleepEndsOnAPoolThatNeverRunsOutOfWork) {
  ca::timer_service timers{ca::timer_service::polled};
  polled_pool p(timers);
  std::atomic<bool> woke{false};
  const auto busy = [&]() -> ca::task<bool> {
    co_await p.pool.schedule();
    const auto give_up = clock_type::now() + 20s;
    while (!woke.load()) {
      if (clock_type::now() > give_up) {
        co_return false;
      }
      co_await p.pool.schedule(); // queued again: the worker never runs out of work
    }
    co_return true;
  };
  const auto sleeper = [&]() -> ca::task<bool> {
    co_await p.pool.schedule();
    const auto start = clock_type::now();
    co_await ca::sleep_for(2ms);
    woke.store(true);
    co_return clock_type::now() - start >= 2ms && ca::current_executor() == &p.pool;
  };
  const auto [slept, b1, b2, b3, b4] =
      ca::sync_wait(ca::when_all(sleeper(), busy(), busy(), busy(), busy()));
  EXPECT_TRUE(slept);
  EXPECT_TRUE(b1 && b2 && b3 && b4) << "the sleep ended only once the pool ran dry";
  EXPECT_EQ(timers.pending(), 0u);
}

// The same from a thread outside the pool: the sleep's coroutine has no executor, so the
// worker that finds it due resumes it.
TEST(PolledTimer, ASleepFromAPlainThreadIsEndedByAPoolWorker) {
  ca::timer_service timers{ca::timer_service::polled};
  polled_pool p(timers);
  const auto main_thread = std::this_thread::get_id();
  const auto resumed_on = ca::sync_wait([&]() -> ca::task<std::thread::id> {
    co_await timers.sleep_for(2ms);
    co_return std::this_thread::get_id();
  }());
  EXPECT_NE(resumed_on, main_thread);
}

// A run loop that polls the service itself: nobody else polls it, and its sleeps (not
// counted as waits of the loop) still end. A watchdog closes the service if they do not,
// turning a hang into a failure.
TEST(PolledTimer, ARunLoopAloneEndsItsSleeps) {
  ca::timer_service timers{ca::timer_service::polled};
  ca::run_loop loop;
  loop.set_idle_source(&timers);
  loop.set_timer_service(&timers);
  std::promise<void> finished;
  std::thread watchdog([&, f = finished.get_future()] {
    if (f.wait_for(60s) != std::future_status::ready) {
      timers.close();
    }
  });
  int slept = 0;
  bool on_loop = true;
  try {
    loop.run([&]() -> ca::task<void> {
      for (int i = 0; i < 3; ++i) {
        const auto deadline = clock_type::now() + 3ms;
        co_await ca::sleep_until(deadline);
        on_loop = on_loop && ca::current_executor() == &loop && clock_type::now() >= deadline;
        ++slept;
      }
    }());
  } catch (const ca::operation_cancelled&) {
  }
  finished.set_value();
  watchdog.join();
  loop.set_idle_source(nullptr);
  EXPECT_EQ(slept, 3);
  EXPECT_TRUE(on_loop);
}

TEST(PolledTimer, WithTimeoutOnThePoolUsesItsService) {
  ca::timer_service timers{ca::timer_service::polled};
  polled_pool p(timers);
  const bool timed_out = ca::sync_wait([&]() -> ca::task<bool> {
    co_await p.pool.schedule();
    try {
      co_await ca::with_timeout(ca::sleep_for(1h), 5ms); // both on the pool's service
    } catch (const ca::operation_timed_out&) {
      co_return true;
    }
    co_return false;
  }());
  EXPECT_TRUE(timed_out);
  EXPECT_EQ(timers.pending(), 0u);
}

TEST(PolledTimer, ClosingEndsSleepsOnTheirPool) {
  ca::timer_service timers{ca::timer_service::polled};
  polled_pool p(timers);
  std::atomic<int> cancelled_on_pool{0};
  std::atomic<int> started{0};
  task_group g;
  for (int i = 0; i < 4; ++i) {
    g.spawn_call([&]() -> ca::task<void> {
      co_await p.pool.schedule();
      auto s = ca::sleep_for(1h);
      started.fetch_add(1);
      try {
        co_await std::move(s);
      } catch (const ca::operation_cancelled&) {
        if (ca::current_executor() == &p.pool) {
          cancelled_on_pool.fetch_add(1);
        }
      }
    });
  }
  while (timers.pending() != 4) {
    std::this_thread::yield();
  }
  timers.close();
  g.wait();
  EXPECT_EQ(cancelled_on_pool.load(), 4);
}

// The same with the pool's idle workers as the timer (run under TSan in CI).
TEST(PolledTimer, StressSleepsAndCancellationsRacingThePollers) {
  ca::timer_service timers{ca::timer_service::polled};
  polled_pool p(timers, 4);
  expect_each_sleep_ends_once(p.pool, timers);
}

} // namespace
