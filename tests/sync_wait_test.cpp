// SPDX-License-Identifier: Apache-2.0
#include <cuawait/sync_wait.hpp>
#include <cuawait/task.hpp>

#include "common/copy_only.hpp"
#include "common/counted.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <coroutine>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace ca = cuawait;
using ca::test::copy_only;
using ca::test::counted;

namespace {

// A plain awaiter (not a task) that completes on another thread with a value.
struct completes_on_thread {
  std::thread* th;
  int value;
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> h) {
    *th = std::thread([h] { h.resume(); });
  }
  int await_resume() const noexcept { return value; }
};

TEST(SyncWait, AcceptsAPlainAwaiter) {
  std::thread th;
  EXPECT_EQ(ca::sync_wait(completes_on_thread{&th, 17}), 17);
  th.join();
}

TEST(SyncWait, AcceptsAReadyAwaitable) {
  ca::sync_wait(std::suspend_never{});
  SUCCEED();
}

TEST(SyncWait, ReturnsLvalueReferenceForReferenceResult) {
  std::string s = "kept";
  auto t = [&]() -> ca::task<std::string&> { co_return s; };
  std::string& r = ca::sync_wait(t());
  EXPECT_EQ(&r, &s);
}

// Regression: sync_wait moved an rvalue result three times (into its own promise, then out);
// cppcoro and libcoro move it twice.
TEST(SyncWait, MovesATasksResultOnlyOutOfTheTask) {
  counted::reset();
  {
    auto make = []() -> ca::task<counted> { co_return counted{3}; };
    const counted c = ca::sync_wait(make());
    EXPECT_EQ(c.id, 3);
    EXPECT_EQ(counted::copies, 0);
    EXPECT_EQ(counted::moves, 2); // into the task's promise, out into sync_wait's result
  }
  EXPECT_EQ(counted::alive(), 0);
}

// A plain awaiter that yields its result by value.
struct yields_counted {
  int id;
  bool await_ready() const noexcept { return true; }
  void await_suspend(std::coroutine_handle<>) const noexcept {}
  counted await_resume() const { return counted{id}; }
};

TEST(SyncWait, MovesAPrvalueResultOnce) {
  counted::reset();
  {
    const counted c = ca::sync_wait(yields_counted{8});
    EXPECT_EQ(c.id, 8);
    EXPECT_EQ(counted::copies, 0);
    EXPECT_EQ(counted::moves, 1);
  }
  EXPECT_EQ(counted::alive(), 0);
}

struct yields_copy_only {
  int value;
  bool await_ready() const noexcept { return true; }
  void await_suspend(std::coroutine_handle<>) const noexcept {}
  copy_only await_resume() const { return copy_only{value}; }
};

// Regression: a result whose move constructor is deleted is copied out instead of rejected.
TEST(SyncWait, CopyOnlyResult) {
  EXPECT_EQ(ca::sync_wait(yields_copy_only{6}).value, 6);
  auto make = []() -> ca::task<copy_only> { co_return copy_only{7}; };
  EXPECT_EQ(ca::sync_wait(make()).value, 7);
}

TEST(SyncWait, RethrowsTheAwaitablesException) {
  auto t = []() -> ca::task<int> {
    throw std::out_of_range("range");
    co_return 0;
  };
  try {
    ca::sync_wait(t());
    FAIL() << "expected an exception";
  } catch (const std::out_of_range& e) {
    EXPECT_STREQ(e.what(), "range");
  }
}

TEST(SyncWait, ManyConcurrentCallersFromThreads) {
  std::vector<std::thread> threads;
  std::atomic<long> sum{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&sum, t] {
      for (int i = 0; i < 2000; ++i) {
        std::thread inner;
        sum += ca::sync_wait(completes_on_thread{&inner, t});
        inner.join();
      }
    });
  }
  for (auto& th : threads) {
    th.join();
  }
  EXPECT_EQ(sum.load(), 2000L * (0 + 1 + 2 + 3 + 4 + 5 + 6 + 7));
}

} // namespace
