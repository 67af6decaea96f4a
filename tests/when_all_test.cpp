// SPDX-License-Identifier: Apache-2.0
#include <cuawait/async_event.hpp>
#include <cuawait/async_latch.hpp>
#include <cuawait/async_mutex.hpp>
#include <cuawait/async_semaphore.hpp>
#include <cuawait/channel.hpp>
#include <cuawait/sync_wait.hpp>
#include <cuawait/task.hpp>
#include <cuawait/thread_pool.hpp>
#include <cuawait/when_all.hpp>

#include "common/copy_only.hpp"
#include "common/counted.hpp"
#include "common/gate.hpp"
#include "common/thread_resumer.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <coroutine>
#include <functional>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace ca = cuawait;
using ca::test::copy_only;
using ca::test::counted;
using ca::test::gate;
using ca::test::thread_resumer;

namespace {

// A plain awaiter (not a task) that is ready at once with a value.
struct ready_int {
  int value;
  [[nodiscard]] bool await_ready() const noexcept { return true; }
  void await_suspend(std::coroutine_handle<>) const noexcept {}
  int await_resume() const noexcept { return value; }
};

ca::task<int> value_of(int v) { co_return v; }
ca::task<void> nothing() { co_return; }

TEST(WhenAll, TupleKeepsArgumentOrderAndMapsVoidAndReferences) {
  int x = 3;
  auto ref = [&]() -> ca::task<int&> { co_return x; };
  auto str = []() -> ca::task<std::string> { co_return "s"; };
  auto result = ca::sync_wait(ca::when_all(value_of(1), nothing(), ref(), str()));
  static_assert(
      std::is_same_v<decltype(result), std::tuple<int, ca::void_value, int&, std::string>>);
  EXPECT_EQ(std::get<0>(result), 1);
  EXPECT_EQ(&std::get<2>(result), &x);
  EXPECT_EQ(std::get<3>(result), "s");
}

TEST(WhenAll, AcceptsAnyAwaitableAndLvalueChildren) {
  auto t = value_of(7);
  auto body = [&]() -> ca::task<int> {
    auto [a, b, c] = co_await ca::when_all(ready_int{5}, std::suspend_never{}, t);
    static_assert(std::is_same_v<decltype(b), ca::void_value>);
    static_assert(std::is_same_v<decltype(c), int&>);
    co_return a + c;
  };
  EXPECT_EQ(ca::sync_wait(body()), 12);
  EXPECT_TRUE(t.is_ready()); // the lvalue task itself ran, not a copy
}

TEST(WhenAll, EmptyArgumentsAndEmptyRangeCompleteAtOnce) {
  static_assert(std::is_same_v<decltype(ca::sync_wait(ca::when_all())), std::tuple<>>);
  ca::sync_wait(ca::when_all());
  EXPECT_TRUE(ca::sync_wait(ca::when_all(std::vector<ca::task<int>>{})).empty());
  ca::sync_wait(ca::when_all(std::vector<ca::task<void>>{}));
}

TEST(WhenAll, StartsEveryChildBeforeAnyFinishesAndResultsKeepInputOrder) {
  std::vector<gate> gates(5);
  std::vector<int> started;
  std::vector<ca::task<int>> tasks;
  for (int i = 0; i < 5; ++i) {
    tasks.push_back([](gate& g, std::vector<int>& log, int i) -> ca::task<int> {
      log.push_back(i);
      co_await g;
      co_return i * 10;
    }(gates[static_cast<std::size_t>(i)], started, i));
  }
  std::vector<int> result;
  bool done = false;
  auto body_fn = [&]() -> ca::task<void> {
    result = co_await ca::when_all(std::move(tasks));
    done = true;
  };
  auto body = body_fn();
  ca::detail::resume(body.handle());
  EXPECT_EQ(started, (std::vector<int>{0, 1, 2, 3, 4}));
  for (int i = 4; i >= 0; --i) { // finish in reverse order
    EXPECT_FALSE(done);
    gates[static_cast<std::size_t>(i)].open();
  }
  EXPECT_TRUE(done);
  EXPECT_EQ(result, (std::vector<int>{0, 10, 20, 30, 40}));
}

TEST(WhenAll, RangeOfVoidAndLvalueRangeOfReferences) {
  int ran = 0;
  std::vector<ca::task<void>> voids;
  for (int i = 0; i < 3; ++i) {
    voids.push_back([](int& n) -> ca::task<void> {
      ++n;
      co_return;
    }(ran));
  }
  static_assert(std::is_void_v<decltype(ca::sync_wait(ca::when_all(std::move(voids))))>);
  ca::sync_wait(ca::when_all(std::move(voids)));
  EXPECT_EQ(ran, 3);

  std::vector<ca::task<int>> tasks;
  tasks.push_back(value_of(1));
  tasks.push_back(value_of(2));
  auto refs = ca::sync_wait(ca::when_all(tasks)); // lvalue range: results refer into it
  static_assert(std::is_same_v<decltype(refs), std::vector<std::reference_wrapper<int>>>);
  ASSERT_EQ(refs.size(), 2U);
  EXPECT_EQ(refs[1].get(), 2);
  EXPECT_TRUE(tasks[0].is_ready());
}

TEST(WhenAll, RethrowsFirstExceptionByCompletionOrderAfterAllFinished) {
  std::vector<gate> gates(3);
  std::atomic<int> finished{0};
  auto child = [&](int i, bool fail) -> ca::task<int> {
    gate& g = gates[static_cast<std::size_t>(i)]; // g++ 12 copies `co_await gates[i]`
    co_await g;
    ++finished;
    if (fail) {
      throw std::runtime_error("child " + std::to_string(i));
    }
    co_return i;
  };
  std::string caught;
  bool done = false;
  auto body_fn = [&]() -> ca::task<void> {
    try {
      co_await ca::when_all(child(0, true), child(1, false), child(2, true));
    } catch (const std::runtime_error& e) {
      caught = e.what();
    }
    done = true;
  };
  auto body = body_fn();
  ca::detail::resume(body.handle());
  gates[2].open(); // child 2 fails first
  EXPECT_FALSE(done);
  gates[0].open(); // child 0 fails second
  EXPECT_FALSE(done) << "when_all must wait for every child, even after a failure";
  gates[1].open();
  EXPECT_TRUE(done);
  EXPECT_EQ(finished.load(), 3);
  EXPECT_EQ(caught, "child 2");
}

TEST(WhenAll, RangeRethrowsAndFreesEverything) {
  counted::reset();
  {
    std::vector<ca::task<int>> tasks;
    for (int i = 0; i < 4; ++i) {
      tasks.push_back([](counted c) -> ca::task<int> {
        if (c.id == 2) {
          throw std::logic_error("two");
        }
        co_return c.id;
      }(counted{i}));
    }
    EXPECT_THROW(ca::sync_wait(ca::when_all(std::move(tasks))), std::logic_error);
  }
  EXPECT_EQ(counted::alive(), 0);
  EXPECT_EQ(counted::copies.load(), 0);
}

TEST(WhenAll, ResultsAreMovedNeverCopied) {
  counted::reset();
  {
    auto make = [](int i) -> ca::task<counted> { co_return counted{i}; };
    auto [a, b] = ca::sync_wait(ca::when_all(make(1), make(2)));
    EXPECT_EQ(a.id + b.id, 3);
    std::vector<ca::task<counted>> tasks;
    tasks.push_back(make(3));
    tasks.push_back(make(4));
    auto v = ca::sync_wait(ca::when_all(std::move(tasks)));
    EXPECT_EQ(v[0].id + v[1].id, 7);
  }
  EXPECT_EQ(counted::copies.load(), 0);
  EXPECT_EQ(counted::alive(), 0);
}

// Regression: an rvalue child is moved into the combinator, so the concept refuses the
// primitives' awaiters, which cannot move (tests/compile_fail checks the diagnostic). An
// lvalue child is referenced and stays accepted.
static_assert(!ca::concepts::combinator_child<ca::async_mutex::scoped_lock_awaiter>);
static_assert(!ca::concepts::combinator_child<ca::async_mutex::lock_awaiter>);
static_assert(!ca::concepts::combinator_child<ca::async_semaphore::acquire_awaiter>);
static_assert(!ca::concepts::combinator_child<ca::async_event::wait_awaiter>);
static_assert(!ca::concepts::combinator_child<ca::async_latch::wait_awaiter>);
static_assert(!ca::concepts::combinator_child<ca::channel<int>::send_awaiter>);
static_assert(!ca::concepts::combinator_child<ca::channel<int>::receive_awaiter>);
static_assert(!ca::concepts::combinator_child_range<std::vector<ca::async_event::wait_awaiter>>);
static_assert(ca::concepts::combinator_child<ca::async_mutex::scoped_lock_awaiter&>);
static_assert(ca::concepts::combinator_child<ca::task<int>>);

TEST(WhenAll, NonMovableAwaitableAsAnLvalueChild) {
  ca::async_mutex mutex;
  auto body = [&]() -> ca::task<bool> {
    auto lock = mutex.scoped_lock();
    auto [guard, v] = co_await ca::when_all(lock, value_of(1));
    co_return !mutex.try_lock() && v == 1;
  };
  EXPECT_TRUE(ca::sync_wait(body()));
  EXPECT_TRUE(mutex.try_lock()); // the guard released it
  mutex.unlock();
}

// Regression: a child result whose move constructor is deleted is copied into the result.
// (Awaited in a task: libstdc++'s std::tuple of such a type cannot be moved, which
// sync_wait would do.)
TEST(WhenAll, CopyOnlyResults) {
  auto make = [](int v) -> ca::task<copy_only> { co_return {v}; };
  auto pair = [&]() -> ca::task<int> {
    auto [a, b] = co_await ca::when_all(make(1), make(2));
    co_return a.value + b.value;
  };
  EXPECT_EQ(ca::sync_wait(pair()), 3);
  std::vector<ca::task<copy_only>> tasks;
  tasks.push_back(make(3));
  tasks.push_back(make(4));
  auto v = ca::sync_wait(ca::when_all(std::move(tasks)));
  ASSERT_EQ(v.size(), 2U);
  EXPECT_EQ(v[0].value + v[1].value, 7);
}

TEST(WhenAll, UnawaitedWhenAllFreesItsChildren) {
  counted::reset();
  {
    auto child = [](counted c) -> ca::task<int> { co_return c.id; };
    auto w = ca::when_all(child(counted{1}), child(counted{2}));
    auto moved = std::move(w); // movable until awaited
    EXPECT_GT(counted::alive(), 0);
  }
  EXPECT_EQ(counted::alive(), 0);
}

TEST(WhenAll, ChildrenInheritTheAwaitingCoroutinesStopToken) {
  std::stop_source source;
  auto child = []() -> ca::task<bool> {
    const std::stop_token token = co_await ca::get_stop_token();
    co_return token.stop_requested();
  };
  source.request_stop();
  auto body = [&]() -> ca::task<bool> {
    auto [a, b] = co_await ca::when_all(child(), child());
    co_return a&& b;
  };
  EXPECT_TRUE(ca::sync_wait(body().with_stop_token(source.get_token())));
}

TEST(WhenAll, NestsInsideWhenAll) {
  auto inner = []() -> ca::task<int> {
    auto [a, b] = co_await ca::when_all(value_of(1), value_of(2));
    co_return a + b;
  };
  auto [x, y] = ca::sync_wait(ca::when_all(inner(), ca::when_all(value_of(4), nothing())));
  EXPECT_EQ(x, 3);
  EXPECT_EQ(std::get<0>(y), 4);
}

TEST(WhenAll, ChildrenFinishingOnManyThreads) {
  thread_resumer pool(4);
  std::atomic<int> ran{0};
  std::vector<ca::task<int>> tasks;
  for (int i = 0; i < 1000; ++i) {
    tasks.push_back([](thread_resumer& p, std::atomic<int>& n, int i) -> ca::task<int> {
      co_await p.schedule();
      ++n;
      if (i % 100 == 99) {
        throw std::runtime_error("hundredth");
      }
      co_return i;
    }(pool, ran, i));
  }
  EXPECT_THROW(ca::sync_wait(ca::when_all(std::move(tasks))), std::runtime_error);
  EXPECT_EQ(ran.load(), 1000);
}

TEST(WhenAllStress, HundredThousandTasks) {
  constexpr int n = 100'000;
  std::vector<ca::task<int>> tasks;
  tasks.reserve(n);
  for (int i = 0; i < n; ++i) {
    tasks.push_back(value_of(i));
  }
  const auto results = ca::sync_wait(ca::when_all(std::move(tasks)));
  ASSERT_EQ(results.size(), static_cast<std::size_t>(n));
  long long sum = 0;
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(results[static_cast<std::size_t>(i)], i);
    sum += results[static_cast<std::size_t>(i)];
  }
  EXPECT_EQ(sum, static_cast<long long>(n) * (n - 1) / 2);
}

// when_all over `n` tasks that each hop onto `pool` and return their index: every result
// arrives, in argument order, whichever thread finishes each child.
template <class Pool>
void expect_in_order_after_hops(Pool& pool, int n) {
  std::vector<ca::task<int>> tasks;
  tasks.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    tasks.push_back([](Pool& p, int i) -> ca::task<int> {
      co_await p.schedule();
      co_return i;
    }(pool, i));
  }
  const auto results = ca::sync_wait(ca::when_all(std::move(tasks)));
  ASSERT_EQ(results.size(), static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(results[static_cast<std::size_t>(i)], i);
  }
}

TEST(WhenAllStress, HundredThousandTasksCompletingOnAPool) {
  thread_resumer pool(4);
  expect_in_order_after_hops(pool, 100'000);
}

// The same with the project's work-stealing pool (not the test-local one).
TEST(WhenAllStress, TenThousandTasksOnTheProjectThreadPool) {
  ca::thread_pool pool{4};
  expect_in_order_after_hops(pool, 10'000);
}

} // namespace
