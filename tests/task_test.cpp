// SPDX-License-Identifier: Apache-2.0
#include <cuawait/sync_wait.hpp>
#include <cuawait/task.hpp>

#include "common/copy_only.hpp"
#include "common/counted.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace ca = cuawait;
using ca::test::copy_only;
using ca::test::counted;

namespace {

ca::task<int> forty_two() { co_return 42; }
ca::task<void> nothing() { co_return; }
ca::task<int> throws_runtime() {
  throw std::runtime_error("boom");
  co_return 0;
}

TEST(Task, IsLazyUntilAwaited) {
  bool started = false;
  auto body = [&]() -> ca::task<int> {
    started = true;
    co_return 1;
  };
  auto t = body();
  EXPECT_FALSE(started);
  EXPECT_FALSE(t.is_ready());
  EXPECT_EQ(ca::sync_wait(std::move(t)), 1);
  EXPECT_TRUE(started);
}

TEST(Task, ReturnsValueVoidAndReference) {
  EXPECT_EQ(ca::sync_wait(forty_two()), 42);
  ca::sync_wait(nothing());
  int x = 5;
  auto ref = [&]() -> ca::task<int&> { co_return x; };
  int& r = ca::sync_wait(ref());
  EXPECT_EQ(&r, &x);
}

TEST(Task, NestedAwaitsComposeResults) {
  auto outer = []() -> ca::task<int> {
    int a = co_await forty_two();
    int b = co_await forty_two();
    co_await nothing();
    co_return a + b;
  };
  EXPECT_EQ(ca::sync_wait(outer()), 84);
}

TEST(Task, ExceptionPropagatesToAwaiter) {
  auto outer = []() -> ca::task<std::string> {
    try {
      co_await throws_runtime();
    } catch (const std::runtime_error& e) {
      co_return std::string("caught ") + e.what();
    }
    co_return "not caught";
  };
  EXPECT_EQ(ca::sync_wait(outer()), "caught boom");
  EXPECT_THROW(ca::sync_wait(throws_runtime()), std::runtime_error);
  auto void_throw = []() -> ca::task<void> {
    throw std::logic_error("void boom");
    co_return;
  };
  EXPECT_THROW(ca::sync_wait(void_throw()), std::logic_error);
}

TEST(Task, DestroyingAnUnstartedTaskFreesItsFrameAndArguments) {
  counted::reset();
  {
    auto body = [](counted c) -> ca::task<int> { co_return c.id; };
    auto t = body(counted{7});
    EXPECT_GE(counted::alive(), 1); // the argument lives in the frame
  }
  EXPECT_EQ(counted::alive(), 0);
}

TEST(Task, ResultIsMovedNotCopied) {
  counted::reset();
  {
    auto make = []() -> ca::task<counted> { co_return counted{3}; };
    counted c = ca::sync_wait(make());
    EXPECT_EQ(c.id, 3);
    EXPECT_EQ(counted::copies, 0);
  }
  EXPECT_EQ(counted::alive(), 0);
}

TEST(Task, MoveOnlyResult) {
  auto make = []() -> ca::task<std::unique_ptr<int>> { co_return std::make_unique<int>(9); };
  auto outer = [&]() -> ca::task<int> {
    auto p = co_await make();
    co_return *p;
  };
  EXPECT_EQ(ca::sync_wait(outer()), 9);
}

// Regression: return_value had no default template argument, so a braced list could not deduce.
TEST(Task, CoReturnOfABracedInitList) {
  auto pair = []() -> ca::task<std::pair<int, int>> { co_return {1, 2}; };
  EXPECT_EQ(ca::sync_wait(pair()), std::make_pair(1, 2));
  auto list = []() -> ca::task<std::vector<int>> { co_return {1, 2, 3}; };
  EXPECT_EQ(ca::sync_wait(list()), (std::vector<int>{1, 2, 3}));
  int x = 0;
  auto ref = [&]() -> ca::task<int&> { co_return {x}; };
  EXPECT_EQ(&ca::sync_wait(ref()), &x);
}

// Regression: a result whose move constructor is deleted is copied where it would be moved.
TEST(Task, CopyOnlyResultIsCopied) {
  auto make = []() -> ca::task<copy_only> { co_return copy_only{4}; };
  auto named = []() -> ca::task<copy_only> {
    const copy_only c{5};
    co_return c;
  };
  auto braced = []() -> ca::task<copy_only> { co_return {6}; };
  auto outer = [&]() -> ca::task<int> {
    const copy_only a = co_await make(); // rvalue await: a copy
    auto t = named();
    const copy_only& b = co_await t; // lvalue await: the stored result
    const copy_only& again = co_await t;
    EXPECT_EQ(&b, &again);
    co_return a.value + b.value + (co_await braced()).value;
  };
  EXPECT_EQ(ca::sync_wait(outer()), 15);
  EXPECT_EQ(ca::sync_wait(make()).value, 4);
}

TEST(Task, LvalueAwaitYieldsReferenceToStoredResult) {
  auto outer = []() -> ca::task<int> {
    auto t = forty_two();
    int& a = co_await t;
    int& b = co_await t; // a completed task can be awaited again for its result
    EXPECT_EQ(&a, &b);
    co_return a;
  };
  EXPECT_EQ(ca::sync_wait(outer()), 42);
}

TEST(Task, MoveAssignmentDestroysPreviousFrame) {
  counted::reset();
  {
    auto body = [](counted c) -> ca::task<int> { co_return c.id; };
    auto t = body(counted{1});
    t = body(counted{2});
    EXPECT_EQ(ca::sync_wait(std::move(t)), 2);
  }
  EXPECT_EQ(counted::alive(), 0);
}

TEST(Task, AwaitingAnEmptyTaskThrowsLogicError) {
  auto outer = []() -> ca::task<void> {
    ca::task<int> empty;
    co_await std::move(empty);
  };
  EXPECT_THROW(ca::sync_wait(outer()), std::logic_error);
}

// The bounded-stack guarantee: a million synchronously completing awaits in a loop must
// not overflow the stack, at -O0 and under the sanitizers as well as in release builds.
TEST(Task, MillionSynchronousAwaitsRunInBoundedStack) {
  auto loop = []() -> ca::task<long> {
    long sum = 0;
    for (int i = 0; i < 1'000'000; ++i) {
      sum += co_await forty_two();
    }
    co_return sum;
  };
  EXPECT_EQ(ca::sync_wait(loop()), 42L * 1'000'000);
}

// The same on a thread with a small stack: any growth per await would overflow 256 KiB.
TEST(Task, SynchronousAwaitChainFitsASmallThreadStack) {
  long result = 0;
  auto loop = []() -> ca::task<long> {
    long sum = 0;
    for (int i = 0; i < 200'000; ++i) {
      sum += co_await forty_two();
    }
    co_return sum;
  };
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 512 * 1024);
  struct ctx {
    long* out;
    decltype(loop)* fn;
  } c{&result, &loop};
  pthread_t th;
  ASSERT_EQ(pthread_create(
                &th, &attr,
                [](void* p) -> void* {
                  auto* cc = static_cast<ctx*>(p);
                  *cc->out = ca::sync_wait((*cc->fn)());
                  return nullptr;
                },
                &c),
            0);
  pthread_join(th, nullptr);
  pthread_attr_destroy(&attr);
  EXPECT_EQ(result, 42L * 200'000);
}

// Deep recursion through nested tasks (each level awaits the next) is bounded only by the
// frames it keeps alive, not by the stack used to reach them.
ca::task<int> depth(int n) {
  if (n == 0) {
    co_return 0;
  }
  co_return 1 + co_await depth(n - 1);
}

TEST(Task, DeepNestedRecursionCompletes) { EXPECT_EQ(ca::sync_wait(depth(100'000)), 100'000); }

TEST(Task, ResumedOnAnotherThreadContinuesThere) {
  // A hand-written awaitable that resumes the coroutine on a new thread.
  struct on_new_thread {
    std::thread* th;
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h) {
      *th = std::thread([h] { h.resume(); });
    }
    void await_resume() const noexcept {}
  };
  std::thread th;
  auto body = [&]() -> ca::task<std::thread::id> {
    co_await on_new_thread{&th};
    int x = co_await forty_two(); // synchronous chain with no library trampoline below it
    EXPECT_EQ(x, 42);
    co_return std::this_thread::get_id();
  };
  auto id = ca::sync_wait(body());
  th.join();
  EXPECT_NE(id, std::this_thread::get_id());
}

TEST(Task, StopTokenIsInheritedFromAwaiter) {
  std::stop_source src;
  auto inner = []() -> ca::task<bool> {
    auto token = co_await ca::get_stop_token();
    co_return token.stop_requested();
  };
  auto outer = [&]() -> ca::task<bool> { co_return co_await inner(); };
  EXPECT_FALSE(ca::sync_wait(outer()));
  src.request_stop();
  EXPECT_TRUE(ca::sync_wait(outer().with_stop_token(src.get_token())));
}

TEST(Task, WithoutStopTokenStopIsNotPossible) {
  auto body = []() -> ca::task<bool> { co_return (co_await ca::get_stop_token()).stop_possible(); };
  EXPECT_FALSE(ca::sync_wait(body()));
}

} // namespace
