// SPDX-License-Identifier: Apache-2.0
#include <cuawait/sync_wait.hpp>
#include <cuawait/task.hpp>

#include <gtest/gtest.h>

#include <coroutine>
#include <stdexcept>
#include <string>
#include <thread>

namespace ca = cuawait;

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
