// SPDX-License-Identifier: Apache-2.0
#include <cuawait/shared_task.hpp>
#include <cuawait/sync_wait.hpp>
#include <cuawait/task.hpp>
#include <cuawait/thread_pool.hpp>
#include <cuawait/when_all.hpp>

#include "common/counted.hpp"
#include "common/detached.hpp"
#include "common/gate.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace ca = cuawait;
using ca::test::counted;
using ca::test::detached;
using ca::test::gate;

namespace {

ca::shared_task<int> counting(int& runs, int value) {
  ++runs;
  co_return value;
}

TEST(SharedTask, IsLazyAndRunsOnceForEveryAwaiter) {
  int runs = 0;
  auto shared = counting(runs, 42);
  EXPECT_EQ(runs, 0);
  EXPECT_FALSE(shared.is_ready());
  auto body = [&]() -> ca::task<bool> {
    const int& a = co_await shared;
    const int& b = co_await shared;
    static_assert(std::is_same_v<decltype(co_await shared), const int&>);
    co_return &a == &b&& a == 42;
  };
  EXPECT_TRUE(ca::sync_wait(body()));
  EXPECT_TRUE(shared.is_ready());
  EXPECT_EQ(runs, 1);
}

TEST(SharedTask, CopiesAreHandlesToOneResult) {
  int runs = 0;
  auto a = counting(runs, 5);
  auto b = a;
  ca::shared_task<int> c;
  c = b;
  EXPECT_TRUE(a == b && b == c);
  EXPECT_FALSE(a == counting(runs, 5));
  auto body = [&]() -> ca::task<bool> {
    const int& x = co_await a;
    const int& y = co_await c;
    co_return &x == &y;
  };
  EXPECT_TRUE(ca::sync_wait(body()));
  EXPECT_EQ(runs, 1);
}

TEST(SharedTask, AwaitersArrivingWhileItRunsResumeInArrivalOrderWhenItFinishes) {
  gate g;
  int runs = 0;
  auto shared = [](gate& g, int& runs) -> ca::shared_task<int> {
    ++runs;
    co_await g;
    co_return 9;
  }(g, runs);
  std::vector<int> order;
  auto awaiter = [](ca::shared_task<int> s, std::vector<int>& order, int id) -> detached {
    const int& v = co_await s;
    order.push_back(id * 100 + v);
  };
  for (int id = 0; id < 4; ++id) {
    awaiter(shared, order, id);
  }
  EXPECT_EQ(runs, 1); // the first awaiter started it, the others queued
  EXPECT_TRUE(order.empty());
  g.open(); // the body finishes on this thread and resumes every waiter here
  EXPECT_EQ(order, (std::vector<int>{9, 109, 209, 309}));
}

TEST(SharedTask, AnAwaiterAfterCompletionContinuesWithoutSuspending) {
  int runs = 0;
  auto shared = counting(runs, 3);
  EXPECT_EQ(ca::sync_wait(shared), 3);
  bool done = false;
  [](ca::shared_task<int> s, bool& done) -> detached {
    EXPECT_EQ(co_await s, 3);
    done = true;
  }(shared, done);
  EXPECT_TRUE(done); // no one else could have resumed it
}

TEST(SharedTask, ExceptionIsRethrownToEveryAwaiter) {
  int runs = 0;
  auto shared = [](int& runs) -> ca::shared_task<int> {
    ++runs;
    throw std::runtime_error("load failed");
    co_return 0;
  }(runs);
  auto body = [](ca::shared_task<int> s) -> ca::task<int> {
    int caught = 0;
    for (int i = 0; i < 3; ++i) {
      try {
        co_await s;
      } catch (const std::runtime_error& e) {
        caught += std::string(e.what()) == "load failed" ? 1 : 0;
      }
    }
    co_return caught;
  };
  EXPECT_EQ(ca::sync_wait(body(shared)), 3);
  EXPECT_THROW(ca::sync_wait(shared), std::runtime_error);
  EXPECT_EQ(runs, 1);
}

TEST(SharedTask, VoidSharedTaskRunsOnceAndRethrows) {
  int runs = 0;
  auto ok = [](int& runs) -> ca::shared_task<> {
    ++runs;
    co_return;
  }(runs);
  auto body = [](ca::shared_task<> s) -> ca::task<void> {
    co_await s;
    co_await s;
    co_await std::move(s);
  };
  ca::sync_wait(body(ok));
  EXPECT_EQ(runs, 1);
  auto bad = []() -> ca::shared_task<> {
    throw std::logic_error("bad");
    co_return;
  }();
  EXPECT_THROW(ca::sync_wait(bad), std::logic_error);
  EXPECT_THROW(ca::sync_wait(bad), std::logic_error);
}

TEST(SharedTask, LvalueAwaitsMakeNoCopies) {
  counted::reset();
  auto shared = []() -> ca::shared_task<counted> { co_return counted{4}; }();
  auto body = [](ca::shared_task<counted>& s) -> ca::task<int> {
    const counted& a = co_await s;
    const counted& b = co_await s;
    co_return a.id + b.id;
  };
  EXPECT_EQ(ca::sync_wait(body(shared)), 8);
  EXPECT_EQ(counted::copies, 0);
  EXPECT_EQ(counted::moves, 1); // co_return's temporary into the frame
}

TEST(SharedTask, RvalueAwaitMovesOutWhenSoleOwnerAndCopiesOtherwise) {
  counted::reset();
  auto make = []() -> ca::shared_task<counted> { co_return counted{1}; };
  auto sole = [&]() -> ca::task<int> {
    counted c = co_await make(); // the temporary is the only handle
    co_return c.id;
  };
  EXPECT_EQ(ca::sync_wait(sole()), 1);
  EXPECT_EQ(counted::copies, 0);
  EXPECT_EQ(counted::moves, 2); // into the frame, out of it
  EXPECT_EQ(counted::alive(), 0);

  counted::reset();
  auto kept = make();
  auto shared = [&]() -> ca::task<int> {
    auto other = kept;
    counted c = co_await std::move(other);  // `kept` still refers to the result
    EXPECT_FALSE(static_cast<bool>(other)); // consumed
    co_return c.id + (co_await kept).id;
  };
  EXPECT_EQ(ca::sync_wait(shared()), 2);
  EXPECT_EQ(counted::copies, 1);
}

TEST(SharedTask, TheLastHandleDestroysTheFrame) {
  counted::reset();
  bool started = false;
  {
    auto s = [](counted, bool& started) -> ca::shared_task<int> {
      started = true;
      co_return 1;
    }(counted{1}, started);
    auto copy = s;
    EXPECT_GE(counted::alive(), 1); // the parameter lives in the frame
  }
  EXPECT_FALSE(started);
  EXPECT_EQ(counted::alive(), 0);

  {
    auto s = []() -> ca::shared_task<counted> { co_return counted{2}; }();
    EXPECT_EQ(ca::sync_wait(s).id, 2);
    EXPECT_EQ(counted::alive(), 1); // the result, in the frame
  }
  EXPECT_EQ(counted::alive(), 0);
}

TEST(SharedTask, MakeSharedTaskSharesAnyAwaitable) {
  int runs = 0;
  auto work = [](int& runs) -> ca::task<std::string> {
    ++runs;
    co_return "weights";
  };
  auto shared = ca::make_shared_task(work(runs));
  static_assert(std::is_same_v<decltype(shared), ca::shared_task<std::string>>);
  auto body = [](ca::shared_task<std::string> s) -> ca::task<std::size_t> {
    const std::string& a = co_await s;
    std::string b = co_await std::move(s);
    co_return a.size() + b.size();
  };
  EXPECT_EQ(ca::sync_wait(body(shared)), 14U);
  EXPECT_EQ(runs, 1);

  auto nothing = ca::make_shared_task([]() -> ca::task<void> { co_return; }());
  static_assert(std::is_same_v<decltype(nothing), ca::shared_task<void>>);
  ca::sync_wait(nothing);
}

TEST(SharedTask, BodyDoesNotInheritAnAwaitersStopTokenButSeesItsOwn) {
  auto probe = []() -> ca::shared_task<bool> {
    const std::stop_token t = co_await ca::get_stop_token();
    co_return t.stop_possible();
  };
  std::stop_source awaiters;
  auto inherits = [&]() -> ca::task<bool> { co_return co_await probe(); };
  EXPECT_FALSE(ca::sync_wait(inherits().with_stop_token(awaiters.get_token())));

  std::stop_source own;
  own.request_stop();
  auto inner = []() -> ca::task<bool> {
    const std::stop_token t = co_await ca::get_stop_token();
    co_return t.stop_requested();
  };
  // A task awaited by the body inherits the body's token.
  auto shared = ca::make_shared_task(inner()).with_stop_token(own.get_token());
  EXPECT_TRUE(ca::sync_wait(shared));
}

TEST(SharedTask, AwaitingAnEmptyHandleThrowsLogicError) {
  ca::shared_task<int> empty;
  EXPECT_FALSE(static_cast<bool>(empty));
  EXPECT_THROW(ca::sync_wait(empty), std::logic_error);
}

TEST(SharedTask, HundredThousandSynchronousSharedTasksUseBoundedStack) {
  constexpr int n = 100'000;
  auto value = [](int v) -> ca::shared_task<int> { co_return v; };
  auto body = [&]() -> ca::task<long long> {
    long long sum = 0;
    for (int i = 0; i < n; ++i) {
      sum += co_await value(1); // starts and completes synchronously
      auto s = value(2);
      sum += co_await s; // same, through an lvalue
      sum += co_await s; // already complete
    }
    co_return sum;
  };
  EXPECT_EQ(ca::sync_wait(body()), 5LL * n);
}

// Many awaiters hop onto different pool threads and await copies of one shared task at
// about the same time, racing to start it, to join its waiter list and to complete.
TEST(SharedTask, ManyAwaitersOnPoolThreadsShareOneRun) {
  ca::thread_pool pool(4);
  for (int round = 0; round < 100; ++round) {
    std::atomic<int> runs{0};
    auto shared = [](ca::thread_pool& pool,
                     std::atomic<int>& runs) -> ca::shared_task<std::vector<int>> {
      runs.fetch_add(1);
      co_await pool.schedule();
      co_return std::vector<int>(64, 3);
    }(pool, runs);
    std::vector<ca::task<int>> awaiters;
    for (int i = 0; i < 32; ++i) {
      awaiters.push_back([](ca::thread_pool& pool, ca::shared_task<std::vector<int>> s,
                            bool by_value) -> ca::task<int> {
        co_await pool.schedule();
        if (by_value) {
          const std::vector<int> v = co_await std::move(s);
          co_return std::accumulate(v.begin(), v.end(), 0);
        }
        const std::vector<int>& v = co_await s;
        co_return std::accumulate(v.begin(), v.end(), 0);
      }(pool, shared, i % 2 == 0));
    }
    shared = {}; // from now on only the awaiters keep it alive
    const std::vector<int> sums = ca::sync_wait(ca::when_all(std::move(awaiters)));
    EXPECT_EQ(sums, std::vector<int>(32, 192));
    EXPECT_EQ(runs.load(), 1);
  }
}

} // namespace
