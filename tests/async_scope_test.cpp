// SPDX-License-Identifier: Apache-2.0
#include <cuawait/async_scope.hpp>
#include <cuawait/sync_wait.hpp>
#include <cuawait/task.hpp>
#include <cuawait/thread_pool.hpp>

#include "common/counted.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <coroutine>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

namespace ca = cuawait;
using ca::test::counted;

namespace {

// A one-shot event for one waiter on one thread: lets a test choose the order in which
// children finish.
class gate {
public:
  gate() = default;
  gate(const gate&) = delete;
  gate& operator=(const gate&) = delete;
  [[nodiscard]] bool await_ready() const noexcept { return m_open; }
  void await_suspend(std::coroutine_handle<> h) noexcept { m_waiter = h; }
  void await_resume() const noexcept {}
  void open() {
    m_open = true;
    if (auto h = std::exchange(m_waiter, {})) {
      ca::detail::resume(h);
    }
  }

private:
  bool m_open = false;
  std::coroutine_handle<> m_waiter;
};

// A few worker threads resuming whatever is scheduled on them (test-local stand-in for
// the project's thread_pool). The destructor runs everything queued, then joins.
class test_pool {
public:
  explicit test_pool(int threads) {
    for (int i = 0; i < threads; ++i) {
      m_threads.emplace_back([this] { run(); });
    }
  }
  test_pool(const test_pool&) = delete;
  test_pool& operator=(const test_pool&) = delete;
  ~test_pool() {
    {
      const std::lock_guard lock(m_mutex);
      m_stopping = true;
    }
    m_cv.notify_all();
    for (auto& t : m_threads) {
      t.join();
    }
  }
  auto schedule() noexcept {
    struct awaiter {
      test_pool* pool;
      [[nodiscard]] bool await_ready() const noexcept { return false; }
      void await_suspend(std::coroutine_handle<> h) { pool->post(h); }
      void await_resume() const noexcept {}
    };
    return awaiter{this};
  }

private:
  void post(std::coroutine_handle<> h) {
    {
      const std::lock_guard lock(m_mutex);
      m_queue.push_back(h);
    }
    m_cv.notify_one();
  }
  void run() {
    for (;;) {
      std::coroutine_handle<> h;
      {
        std::unique_lock lock(m_mutex);
        m_cv.wait(lock, [this] { return m_stopping || !m_queue.empty(); });
        if (m_queue.empty()) {
          return;
        }
        h = m_queue.front();
        m_queue.pop_front();
      }
      ca::detail::resume(h);
    }
  }

  std::mutex m_mutex;
  std::condition_variable m_cv;
  std::deque<std::coroutine_handle<>> m_queue;
  bool m_stopping = false;
  std::vector<std::thread> m_threads;
};

ca::task<void> wait_on(gate& g, std::atomic<int>& finished) {
  co_await g;
  ++finished;
}

ca::task<void> hop_and_count(test_pool& pool, std::atomic<int>& finished) {
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
  test_pool pool(1);
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
  test_pool pool(2);
  std::atomic<int> finished{0};
  auto loop = [](test_pool& p, std::atomic<int>& n) -> ca::task<void> {
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
  test_pool pool(4);
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
  test_pool pool(4);
  std::atomic<int> finished{0};
  auto maybe_fail = [](test_pool& p, std::atomic<int>& n, int i) -> ca::task<void> {
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
