// SPDX-License-Identifier: Apache-2.0
#include <cuawait/run_loop.hpp>
#include <cuawait/task.hpp>
#include <cuawait/thread_pool.hpp>

#include "common/copy_only.hpp"
#include "common/counted.hpp"
#include "common/detached.hpp"
#include "common/job.hpp"

#include <gtest/gtest.h>

#include <exception>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace ca = cuawait;
using ca::priority;
using ca::test::counted;
using ca::test::detached;
using ca::test::job;

namespace {

TEST(RunLoop, RunsPostsFromOtherThreadsOnTheDrivingThread) {
  constexpr int threads = 4;
  constexpr int per_thread = 2500;
  ca::run_loop loop;
  int count = 0; // touched only on the loop thread: TSan checks that
  int off_thread = 0;
  const auto main_id = std::this_thread::get_id();
  auto work = [&]() -> detached {
    co_await loop.schedule();
    off_thread += std::this_thread::get_id() != main_id ? 1 : 0;
    off_thread += ca::current_executor() != &loop ? 1 : 0;
    if (++count == threads * per_thread) {
      loop.finish();
    }
  };
  std::vector<std::thread> posters;
  for (int t = 0; t < threads; ++t) {
    posters.emplace_back([&] {
      for (int i = 0; i < per_thread; ++i) {
        work();
      }
    });
  }
  loop.run();
  for (std::thread& t : posters) {
    t.join();
  }
  EXPECT_EQ(count, threads * per_thread);
  EXPECT_EQ(off_thread, 0);
  EXPECT_EQ(loop.pending(), 0U);
}

TEST(RunLoop, HigherPriorityRunsFirstFifoWithin) {
  ca::run_loop loop;
  std::vector<std::string> order;
  auto step = [&](std::string label) -> job {
    order.push_back(label);
    co_return;
  };
  loop.post(step("low1").handle, priority::low);
  loop.post(step("normal1").handle, priority::normal);
  loop.post(step("high1").handle, priority::high);
  loop.post(step("low2").handle, priority::low);
  loop.post(step("high2").handle, priority::high);
  EXPECT_EQ(loop.pending(), 5U);
  EXPECT_EQ(loop.poll(), 5U);
  const std::vector<std::string> expected{"high1", "high2", "normal1", "low1", "low2"};
  EXPECT_EQ(order, expected);
}

TEST(RunLoop, RunAwaitableReturnsValueAndReference) {
  ca::run_loop loop;
  auto value = [&]() -> ca::task<int> {
    co_await loop.schedule();
    co_return ca::current_executor() == &loop ? 7 : -1;
  };
  EXPECT_EQ(loop.run(value()), 7);
  int x = 3;
  auto ref = [&]() -> ca::task<int&> { co_return x; };
  int& r = loop.run(ref());
  EXPECT_EQ(&r, &x);
}

// Regression (as for sync_wait): the result is moved only out of the task, and a copy-only result
// is copied instead of rejected.
TEST(RunLoop, RunAwaitableMovesTheResultOnlyOutOfTheTask) {
  counted::reset();
  {
    ca::run_loop loop;
    auto make = []() -> ca::task<counted> { co_return counted{5}; };
    const counted c = loop.run(make());
    EXPECT_EQ(c.id, 5);
    EXPECT_EQ(counted::copies, 0);
    EXPECT_EQ(counted::moves, 2); // into the task's promise, out into run's result
    auto copy = []() -> ca::task<ca::test::copy_only> { co_return {6}; };
    EXPECT_EQ(loop.run(copy()).value, 6);
  }
  EXPECT_EQ(counted::alive(), 0);
}

TEST(RunLoop, RunAwaitableRethrows) {
  ca::run_loop loop;
  auto body = [&]() -> ca::task<void> {
    co_await loop.schedule(priority::high);
    throw std::runtime_error("loop");
  };
  EXPECT_THROW(loop.run(body()), std::runtime_error);
}

TEST(RunLoop, RunAwaitableCompletedOnAnotherThreadAndBack) {
  ca::thread_pool pool(2);
  ca::run_loop loop;
  const auto main_id = std::this_thread::get_id();
  auto away = [&]() -> ca::task<bool> {
    co_await pool.schedule();
    co_return std::this_thread::get_id() != main_id; // completes on a worker
  };
  EXPECT_TRUE(loop.run(away()));
  auto round_trip = [&]() -> ca::task<bool> {
    int hops = 0;
    for (int i = 0; i < 100; ++i) {
      co_await pool.schedule();
      co_await loop.schedule();
      hops += std::this_thread::get_id() == main_id ? 1 : 0;
    }
    co_return hops == 100;
  };
  EXPECT_TRUE(loop.run(round_trip()));
}

TEST(RunLoop, FinishEndsOneRun) {
  ca::run_loop loop;
  loop.finish(); // before run: the next run returns at once
  loop.run();
  std::thread t([&] { loop.finish(); });
  loop.run(); // returns once the other thread's finish lands
  t.join();
  int ran = 0;
  auto step = [&]() -> job {
    ++ran;
    co_return;
  };
  loop.post(step().handle, priority::normal);
  EXPECT_TRUE(loop.run_one());
  EXPECT_EQ(ran, 1);
}

TEST(RunLoop, WakeIsNotLostAndMakesRunOneReturnFalse) {
  ca::run_loop loop;
  loop.wake();
  EXPECT_FALSE(loop.run_one()); // the earlier wake is consumed
  std::thread t([&] { loop.wake(); });
  EXPECT_FALSE(loop.run_one()); // whichever comes first
  t.join();
}

TEST(RunLoop, DestructorRunsQueuedWork) {
  counted::reset();
  int ran = 0;
  {
    ca::run_loop loop;
    auto step = [&]() -> job {
      const counted c(1);
      ++ran;
      co_await loop.schedule(); // posted while the destructor drains: still runs
      ++ran;
    };
    for (int i = 0; i < 10; ++i) {
      loop.post(step().handle, priority::normal);
    }
  }
  EXPECT_EQ(ran, 20);
  EXPECT_EQ(counted::alive(), 0);
}

} // namespace
