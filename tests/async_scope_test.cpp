// SPDX-License-Identifier: Apache-2.0
#include <cuawait/async_scope.hpp>
#include <cuawait/sync_wait.hpp>
#include <cuawait/task.hpp>
#include <cuawait/thread_pool.hpp>

#include "common/counted.hpp"
#include "common/gate.hpp"
#include "common/thread_resumer.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

namespace ca = cuawait;
using ca::test::counted;
using ca::test::gate;
using ca::test::thread_resumer;

namespace {

ca::task<void> wait_on(gate& g, std::atomic<int>& finished) {
  co_await g;
  ++finished;
}

ca::task<void> hop_and_count(thread_resumer& pool, std::atomic<int>& finished) {
  co_await pool.schedule();
  ++finished;
}

TEST(AsyncScope, SpawnRunsEagerlyOnTheCallingThreadUntilItSuspends) {
  ca::async_scope scope;
  gate g;
  std::thread::id ran_on;
  bool after_suspend = false;
  auto work = [](gate& g, std::thread::id& id, bool& after) -> ca::task<void> {
    id = std::this_thread::get_id();
    co_await g;
    after = true;
  };
  scope.spawn(work(g, ran_on, after_suspend));
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_FALSE(after_suspend);
  g.open();
  EXPECT_TRUE(after_suspend);
  ca::sync_wait(scope.join());
}

TEST(AsyncScope, JoinCompletesOnlyWhenAllSpawnedWorkHasFinished) {
  ca::async_scope scope;
  std::vector<gate> gates(3);
  std::atomic<int> finished{0};
  for (auto& g : gates) {
    scope.spawn(wait_on(g, finished));
  }
  bool joined = false;
  auto joiner_fn = [&]() -> ca::task<void> {
    co_await scope.join();
    joined = true;
  };
  auto joiner = joiner_fn();
  ca::detail::resume(joiner.handle());
  gates[1].open();
  gates[0].open();
  EXPECT_FALSE(joined);
  gates[2].open();
  EXPECT_TRUE(joined);
  EXPECT_EQ(finished.load(), 3);
}

TEST(AsyncScope, JoinWithNothingSpawnedCompletesAtOnce) {
  ca::async_scope scope;
  ca::sync_wait(scope.join());
  ca::sync_wait(scope.join());
}

TEST(AsyncScope, AcceptsAnyAwaitableWithAVoidResult) {
  ca::async_scope scope;
  scope.spawn(std::suspend_never{});
  thread_resumer pool(1);
  scope.spawn(pool.schedule());
  ca::sync_wait(scope.join());
}

TEST(AsyncScope, JoinRethrowsTheFirstExceptionOnceAndSpawnNeverThrowsIt) {
  ca::async_scope scope;
  std::vector<gate> gates(2);
  auto failing = [](gate& g, std::string what) -> ca::task<void> {
    co_await g;
    throw std::runtime_error(what);
  };
  auto failing_at_once = []() -> ca::task<void> {
    throw std::logic_error("eager");
    co_return;
  };
  scope.spawn(failing(gates[0], "first"));
  scope.spawn(failing(gates[1], "second"));
  gates[1].open(); // fails first
  gates[0].open();
  try {
    ca::sync_wait(scope.join());
    ADD_FAILURE() << "join did not rethrow";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "second");
  }
  ca::sync_wait(scope.join()); // collected: not rethrown again

  EXPECT_NO_THROW(scope.spawn(failing_at_once()));
  EXPECT_THROW(ca::sync_wait(scope.join()), std::logic_error);
}

TEST(AsyncScope, SpawningAfterAJoinCompletedAndJoiningAgain) {
  ca::async_scope scope;
  std::atomic<int> finished{0};
  gate a;
  scope.spawn(wait_on(a, finished));
  a.open();
  ca::sync_wait(scope.join());
  gate b;
  scope.spawn(wait_on(b, finished));
  b.open();
  ca::sync_wait(scope.join());
  EXPECT_EQ(finished.load(), 2);
}

TEST(AsyncScope, SpawnedFramesAreFreedWhenTheyFinishNotAtJoin) {
  counted::reset();
  ca::async_scope scope;
  gate g;
  auto work = [](gate& g, counted c) -> ca::task<void> {
    co_await g;
    EXPECT_EQ(c.id, 7);
  };
  scope.spawn(work(g, counted{7}));
  EXPECT_EQ(counted::alive(), 1); // the argument, in the suspended frame
  g.open();
  EXPECT_EQ(counted::alive(), 0);
  EXPECT_EQ(counted::copies.load(), 0);
  ca::sync_wait(scope.join());
}

TEST(AsyncScope, SpawnedTasksInheritTheScopesStopToken) {
  ca::async_scope scope;
  thread_resumer pool(2);
  std::atomic<int> finished{0};
  auto loop = [](thread_resumer& p, std::atomic<int>& n) -> ca::task<void> {
    const std::stop_token token = co_await ca::get_stop_token();
    while (!token.stop_requested()) {
      co_await p.schedule();
    }
    ++n;
  };
  for (int i = 0; i < 4; ++i) {
    scope.spawn(loop(pool, finished));
  }
  EXPECT_FALSE(scope.get_stop_token().stop_requested());
  scope.request_stop();
  EXPECT_TRUE(scope.get_stop_token().stop_requested());
  ca::sync_wait(scope.join());
  EXPECT_EQ(finished.load(), 4);
}

TEST(AsyncScopeDeathTest, DestroyingAScopeWithLiveWorkTerminates) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        gate g;
        std::atomic<int> finished{0};
        ca::async_scope scope;
        scope.spawn(wait_on(g, finished));
      },
      "cuawait::async_scope destroyed while 1 spawned task");
}

TEST(AsyncScopeStress, SpawnFromManyThreadsWhileAJoinIsPending) {
  constexpr int spawners = 4;
  constexpr int per_spawner = 25'000;
  ca::async_scope scope;
  thread_resumer pool(4);
  std::atomic<int> finished{0};
  gate guard; // keeps the join pending until every spawner is done
  std::atomic<int> guard_done{0};
  scope.spawn(wait_on(guard, guard_done));
  std::thread joiner([&] { ca::sync_wait(scope.join()); });
  std::vector<std::thread> threads;
  for (int t = 0; t < spawners; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < per_spawner; ++i) {
        scope.spawn(hop_and_count(pool, finished));
      }
    });
  }
  for (auto& t : threads) {
    t.join();
  }
  guard.open();
  joiner.join();
  EXPECT_EQ(finished.load(), spawners * per_spawner);
  EXPECT_EQ(guard_done.load(), 1);
}

TEST(AsyncScopeStress, RepeatedSpawnJoinRoundsWithFailuresOnPoolThreads) {
  ca::async_scope scope;
  thread_resumer pool(4);
  std::atomic<int> finished{0};
  auto maybe_fail = [](thread_resumer& p, std::atomic<int>& n, int i) -> ca::task<void> {
    co_await p.schedule();
    ++n;
    if (i % 3 == 0) {
      throw std::runtime_error("fail");
    }
  };
  for (int round = 0; round < 2000; ++round) {
    for (int i = 0; i < 4; ++i) {
      scope.spawn(maybe_fail(pool, finished, i));
    }
    EXPECT_THROW(ca::sync_wait(scope.join()), std::runtime_error);
    ASSERT_EQ(finished.load(), 4 * (round + 1));
  }
}

// Spawning from the project's pool workers themselves (nested spawns) while joined.
TEST(AsyncScopeStress, NestedSpawnsOnTheProjectThreadPool) {
  ca::thread_pool pool{4};
  ca::async_scope scope;
  std::atomic<int> finished{0};
  struct leaf {
    static ca::task<void> run(ca::thread_pool& p, std::atomic<int>& n) {
      co_await p.schedule();
      ++n;
    }
  };
  auto parent = [](ca::thread_pool& p, ca::async_scope& s, std::atomic<int>& n) -> ca::task<void> {
    co_await p.schedule();
    for (int i = 0; i < 10; ++i) {
      s.spawn(leaf::run(p, n));
    }
    ++n;
  };
  for (int i = 0; i < 2000; ++i) {
    scope.spawn(parent(pool, scope, finished));
  }
  ca::sync_wait(scope.join());
  EXPECT_EQ(finished.load(), 2000 * 11);
}

} // namespace
