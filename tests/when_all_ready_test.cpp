// SPDX-License-Identifier: Apache-2.0
#include <cuawait/sync_wait.hpp>
#include <cuawait/task.hpp>
#include <cuawait/thread_pool.hpp>
#include <cuawait/when_all_ready.hpp>

#include "common/counted.hpp"
#include "common/detached.hpp"
#include "common/gate.hpp"

#include <gtest/gtest.h>

#include <coroutine>
#include <exception>
#include <functional>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace ca = cuawait;
using ca::test::counted;
using ca::test::detached;
using ca::test::gate;

namespace {

ca::task<int> value_of(int v) { co_return v; }
ca::task<int> fails_with(std::string what) {
  throw std::runtime_error(what);
  co_return 0;
}

std::string message_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    return ex.what();
  }
}

TEST(WhenAllReady, TupleHoldsEveryOutcomeInArgumentOrder) {
  int x = 3;
  auto ref = [&]() -> ca::task<int&> { co_return x; };
  auto nothing = []() -> ca::task<void> { co_return; };
  auto [a, b, c, d] =
      ca::sync_wait(ca::when_all_ready(value_of(1), fails_with("b"), ref(), nothing()));
  static_assert(std::is_same_v<decltype(a), ca::result<int, std::exception_ptr>>);
  static_assert(std::is_same_v<decltype(c), ca::result<std::reference_wrapper<int>>>);
  static_assert(std::is_same_v<decltype(d), ca::result<void>>);
  static_assert(std::is_same_v<decltype(b), ca::ready_result_t<int>>);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(*a, 1);
  ASSERT_FALSE(b.has_value());
  EXPECT_EQ(message_of(b.error()), "b");
  EXPECT_THROW(b.value(), std::runtime_error); // value() rethrows the child's exception
  EXPECT_EQ(&c.value().get(), &x);
  EXPECT_TRUE(d.has_value());
}

ca::task<int> slow(gate& g, bool& finished) {
  co_await g;
  finished = true;
  co_return 2;
}

TEST(WhenAllReady, EveryChildFinishesAndNothingIsRethrown) {
  gate g;
  bool slow_finished = false;
  bool resumed = false;
  using outcomes = std::tuple<ca::ready_result_t<int>, ca::ready_result_t<int>>;
  outcomes out;
  [](gate& g, bool& slow_finished, outcomes& out, bool& resumed) -> detached {
    out = co_await ca::when_all_ready(fails_with("first"), slow(g, slow_finished));
    resumed = true;
  }(g, slow_finished, out, resumed);
  EXPECT_FALSE(resumed); // the failed child does not end the wait
  g.open();
  EXPECT_TRUE(resumed);
  EXPECT_TRUE(slow_finished);
  EXPECT_FALSE(std::get<0>(out).has_value());
  EXPECT_EQ(std::get<1>(out).value(), 2);
}

TEST(WhenAllReady, RangeKeepsInputOrderAndEachOutcome) {
  std::vector<ca::task<int>> tasks;
  for (int i = 0; i < 6; ++i) {
    tasks.push_back(i % 3 == 1 ? fails_with(std::to_string(i)) : value_of(i * 10));
  }
  auto out = ca::sync_wait(ca::when_all_ready(std::move(tasks)));
  static_assert(std::is_same_v<decltype(out), std::vector<ca::ready_result_t<int>>>);
  ASSERT_EQ(out.size(), 6U);
  for (int i = 0; i < 6; ++i) {
    if (i % 3 == 1) {
      ASSERT_FALSE(out[i].has_value());
      EXPECT_EQ(message_of(out[i].error()), std::to_string(i));
    } else {
      EXPECT_EQ(out[i].value(), i * 10);
    }
  }
}

TEST(WhenAllReady, VoidRangeYieldsOneOutcomePerElement) {
  auto ok = []() -> ca::task<void> { co_return; };
  auto bad = []() -> ca::task<void> {
    throw std::logic_error("x");
    co_return;
  };
  std::vector<ca::task<void>> tasks;
  tasks.push_back(ok());
  tasks.push_back(bad());
  auto out = ca::sync_wait(ca::when_all_ready(std::move(tasks)));
  static_assert(std::is_same_v<decltype(out), std::vector<ca::result<void>>>);
  ASSERT_EQ(out.size(), 2U);
  EXPECT_TRUE(out[0].has_value());
  EXPECT_THROW(out[1].value(), std::logic_error);
}

TEST(WhenAllReady, EmptyArgumentsAndEmptyRangeCompleteAtOnce) {
  static_assert(std::is_same_v<decltype(ca::sync_wait(ca::when_all_ready())), std::tuple<>>);
  ca::sync_wait(ca::when_all_ready());
  EXPECT_TRUE(ca::sync_wait(ca::when_all_ready(std::vector<ca::task<int>>{})).empty());
}

TEST(WhenAllReady, LvalueChildrenAreAwaitedInPlace) {
  auto t = value_of(7);
  std::vector<ca::task<int>> range;
  range.push_back(value_of(8));
  auto [a] = ca::sync_wait(ca::when_all_ready(t));
  EXPECT_EQ(a.value(), 7);
  EXPECT_TRUE(t.is_ready()); // the lvalue task itself ran
  auto out = ca::sync_wait(ca::when_all_ready(range));
  EXPECT_EQ(out[0].value(), 8);
  EXPECT_TRUE(range[0].is_ready());
}

TEST(WhenAllReady, ResultsAreMovedNotCopied) {
  counted::reset();
  auto make = [](int id) -> ca::task<counted> { co_return counted{id}; };
  {
    auto [a, b] = ca::sync_wait(ca::when_all_ready(make(1), make(2)));
    EXPECT_EQ(a.value().id + b.value().id, 3);
    std::vector<ca::task<counted>> tasks;
    tasks.push_back(make(3));
    auto v = ca::sync_wait(ca::when_all_ready(std::move(tasks)));
    EXPECT_EQ(v[0].value().id, 3);
  }
  EXPECT_EQ(counted::copies, 0);
  EXPECT_EQ(counted::alive(), 0);
}

TEST(WhenAllReady, ChildrenInheritTheAwaitingCoroutinesStopToken) {
  std::stop_source source;
  auto probe = []() -> ca::task<bool> {
    const std::stop_token t = co_await ca::get_stop_token();
    co_return t.stop_possible();
  };
  auto body = [&]() -> ca::task<bool> {
    auto [a, b] = co_await ca::when_all_ready(probe(), probe());
    co_return a.value() && b.value();
  };
  EXPECT_TRUE(ca::sync_wait(body().with_stop_token(source.get_token())));
}

TEST(WhenAllReady, ChildrenFinishingOnPoolThreadsAreAllCollected) {
  ca::thread_pool pool(4);
  auto child = [](ca::thread_pool& pool, int i) -> ca::task<int> {
    co_await pool.schedule();
    if (i % 7 == 0) {
      throw std::runtime_error("multiple of seven");
    }
    co_return i;
  };
  std::vector<ca::task<int>> tasks;
  constexpr int n = 1000;
  for (int i = 0; i < n; ++i) {
    tasks.push_back(child(pool, i));
  }
  auto out = ca::sync_wait(ca::when_all_ready(std::move(tasks)));
  ASSERT_EQ(out.size(), static_cast<std::size_t>(n));
  int failures = 0;
  long long sum = 0;
  for (int i = 0; i < n; ++i) {
    if (out[i].has_value()) {
      sum += out[i].value();
      EXPECT_NE(i % 7, 0);
    } else {
      ++failures;
      EXPECT_EQ(i % 7, 0);
    }
  }
  EXPECT_EQ(failures, (n + 6) / 7);
  long long expected = 0;
  for (int i = 0; i < n; ++i) {
    expected += i % 7 == 0 ? 0 : i;
  }
  EXPECT_EQ(sum, expected);
}

} // namespace
