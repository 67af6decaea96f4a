// SPDX-License-Identifier: Apache-2.0
#include <cuawait/inline_executor.hpp>
#include <cuawait/sync_wait.hpp>
#include <cuawait/task.hpp>

#include "common/job.hpp"
#include "common/manual_executor.hpp"

#include <gtest/gtest.h>

#include <exception>
#include <thread>
#include <vector>

namespace ca = cuawait;
using ca::priority;
using ca::test::job;

namespace {

TEST(InlineExecutor, PostResumesAtOnceOnTheCallerInsideItsScope) {
  ca::inline_executor ex;
  bool ran = false;
  ca::executor* seen = nullptr;
  priority seen_priority = priority::normal;
  std::thread::id seen_thread;
  auto body = [&]() -> job {
    ran = true;
    seen = ca::current_executor();
    seen_priority = ca::current_priority();
    seen_thread = std::this_thread::get_id();
    co_return;
  };
  ex.post(body().handle, priority::high);
  EXPECT_TRUE(ran);
  EXPECT_EQ(seen, &ex);
  EXPECT_EQ(seen_priority, priority::high);
  EXPECT_EQ(seen_thread, std::this_thread::get_id());
  // The scope ends with the post.
  EXPECT_EQ(ca::current_executor(), nullptr);
  EXPECT_EQ(ca::current_priority(), priority::normal);
}

TEST(InlineExecutor, RestoresTheOuterScopeOfANestedPost) {
  ca::test::manual_executor outer;
  ca::inline_executor& ex = ca::inline_executor::instance();
  std::vector<ca::executor*> seen;
  auto inner = [&]() -> job {
    seen.push_back(ca::current_executor());
    co_return;
  };
  auto body = [&]() -> job {
    seen.push_back(ca::current_executor());
    ex.post(inner().handle, priority::low);
    seen.push_back(ca::current_executor());
    co_return;
  };
  outer.post(body().handle, priority::normal);
  EXPECT_EQ(outer.run_all(), 1U);
  const std::vector<ca::executor*> expected{&outer, &ex, &outer};
  EXPECT_EQ(seen, expected);
}

TEST(InlineExecutor, ScheduleDoesNotSuspend) {
  ca::inline_executor ex;
  auto body = [&]() -> ca::task<std::thread::id> {
    co_await ex.schedule();
    co_return std::this_thread::get_id();
  };
  EXPECT_EQ(ca::sync_wait(body()), std::this_thread::get_id());
}

TEST(ManualExecutor, RunsInTheOrderTheTestChooses) {
  ca::test::manual_executor ex;
  std::vector<int> order;
  auto step = [&](int id) -> job {
    order.push_back(id);
    co_return;
  };
  for (int i = 0; i < 4; ++i) {
    ex.post(step(i).handle, priority::normal);
  }
  EXPECT_EQ(ex.size(), 4U);
  EXPECT_TRUE(ex.run_newest()); // 3
  EXPECT_TRUE(ex.run_at(1));    // 1
  EXPECT_EQ(ex.run_all(), 2U);  // 0, 2
  EXPECT_FALSE(ex.run_one());
  const std::vector<int> expected{3, 1, 0, 2};
  EXPECT_EQ(order, expected);
}

} // namespace
