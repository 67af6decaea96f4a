// SPDX-License-Identifier: Apache-2.0
#include <cuawait/async_mutex.hpp>
#include <cuawait/sync_wait.hpp>
#include <cuawait/task.hpp>
#include <cuawait/thread_pool.hpp>
#include <cuawait/when_any.hpp>

#include "common/copy_only.hpp"
#include "common/counted.hpp"
#include "common/gate.hpp"
#include "common/thread_resumer.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>
#include <type_traits>
#include <variant>
#include <vector>

namespace ca = cuawait;
using ca::test::counted;
using ca::test::gate;
using ca::test::thread_resumer;

namespace {

ca::task<int> value_of(int v) { co_return v; }

// A loser: hops onto the pool until asked to stop, then finishes normally.
ca::task<int> until_stopped(thread_resumer& pool, std::atomic<int>& finished, int v) {
  const std::stop_token token = co_await ca::get_stop_token();
  while (!token.stop_requested()) {
    co_await pool.schedule();
  }
  ++finished;
  co_return v;
}

// A winner: finishes after one hop onto the pool.
ca::task<int> after_hop(thread_resumer& pool, int v) {
  co_await pool.schedule();
  co_return v;
}

TEST(WhenAny, VariadicYieldsIndexAndVariantAndWaitsForLosers) {
  gate g0;
  gate g1;
  auto int_child = [](gate& g) -> ca::task<int> {
    co_await g;
    co_return 1;
  };
  auto str_child = [](gate& g) -> ca::task<std::string> {
    co_await g;
    co_return "second";
  };
  using variant_t = std::variant<int, std::string>;
  std::optional<ca::when_any_result<variant_t>> result;
  auto body_fn = [&]() -> ca::task<void> {
    result.emplace(co_await ca::when_any(int_child(g0), str_child(g1)));
  };
  auto body = body_fn();
  ca::detail::resume(body.handle());
  g1.open();
  EXPECT_FALSE(result) << "when_any must not complete before every child has finished";
  g0.open(); // this child ignores stop requests: it finishes on its own
  ASSERT_TRUE(result);
  EXPECT_EQ(result->index, 1U);
  ASSERT_EQ(result->value.index(), 1U);
  EXPECT_EQ(std::get<1>(result->value), "second");
}

TEST(WhenAny, VoidAndReferenceAlternativesAndPlainAwaitables) {
  int x = 0;
  auto ref = [&]() -> ca::task<int&> { co_return x; };
  auto r = ca::sync_wait(ca::when_any(ref(), std::suspend_never{}));
  static_assert(
      std::is_same_v<decltype(r.value), std::variant<std::reference_wrapper<int>, ca::void_value>>);
  EXPECT_EQ(r.index, 0U); // the first to finish: children start in argument order
  EXPECT_EQ(&std::get<0>(r.value).get(), &x);

  auto [index, value] = ca::sync_wait(ca::when_any(std::suspend_never{}, value_of(3)));
  EXPECT_EQ(index, 0U);
  EXPECT_TRUE(std::holds_alternative<ca::void_value>(value));
}

TEST(WhenAny, WinnerStopsLosersThroughTheirStopToken) {
  thread_resumer pool(2);
  std::atomic<int> finished{0};
  std::vector<ca::task<int>> tasks;
  for (int i = 0; i < 4; ++i) {
    tasks.push_back(i == 2 ? after_hop(pool, 20) : until_stopped(pool, finished, i));
  }
  const auto result = ca::sync_wait(ca::when_any(std::move(tasks)));
  static_assert(std::is_same_v<decltype(result), const ca::when_any_result<int>>);
  EXPECT_EQ(result.index, 2U);
  EXPECT_EQ(result.value, 20);
  EXPECT_EQ(finished.load(), 3) << "every loser ran to completion before when_any resumed";
}

TEST(WhenAny, ChildrenStartedAfterTheWinnerStartStopped) {
  thread_resumer pool(1);
  std::atomic<int> finished{0};
  // value_of finishes at once, so the loser starts with its stop already requested.
  auto r = ca::sync_wait(ca::when_any(value_of(5), until_stopped(pool, finished, 6)));
  EXPECT_EQ(r.index, 0U);
  EXPECT_EQ(std::get<0>(r.value), 5);
  EXPECT_EQ(finished.load(), 1);
}

TEST(WhenAny, RangeOfVoidYieldsOnlyTheIndex) {
  thread_resumer pool(2);
  std::atomic<int> finished{0};
  auto void_loser = [&]() -> ca::task<void> { co_await until_stopped(pool, finished, 0); };
  std::vector<ca::task<void>> tasks;
  tasks.push_back(void_loser());
  tasks.push_back([](thread_resumer& p) -> ca::task<void> { co_await p.schedule(); }(pool));
  const ca::when_any_result<void> r = ca::sync_wait(ca::when_any(std::move(tasks)));
  EXPECT_EQ(r.index, 1U);
  EXPECT_EQ(finished.load(), 1);
}

TEST(WhenAny, EmptyRangeThrowsAtOnce) {
  EXPECT_THROW((void)ca::when_any(std::vector<ca::task<int>>{}), std::invalid_argument);
}

TEST(WhenAny, RethrowsTheWinnersExceptionAndIgnoresLosers) {
  thread_resumer pool(2);
  std::atomic<int> finished{0};
  auto failing_winner = [](thread_resumer& p) -> ca::task<int> {
    co_await p.schedule();
    throw std::runtime_error("winner");
  };
  EXPECT_THROW(ca::sync_wait(ca::when_any(until_stopped(pool, finished, 0), failing_winner(pool))),
               std::runtime_error);
  EXPECT_EQ(finished.load(), 1);

  auto failing_loser = [](thread_resumer& p, std::atomic<int>& n) -> ca::task<int> {
    co_await until_stopped(p, n, 0);
    throw std::logic_error("loser");
  };
  auto r = ca::sync_wait(ca::when_any(failing_loser(pool, finished), after_hop(pool, 9)));
  EXPECT_EQ(r.index, 1U);
  EXPECT_EQ(std::get<1>(r.value), 9);
  EXPECT_EQ(finished.load(), 2);
}

TEST(WhenAny, ForwardsAStopRequestOfTheAwaitingCoroutine) {
  thread_resumer pool(2);
  std::atomic<int> finished{0};
  std::stop_source source;
  auto body = [&]() -> ca::task<std::size_t> {
    auto r =
        co_await ca::when_any(until_stopped(pool, finished, 0), until_stopped(pool, finished, 1));
    co_return r.index;
  };
  std::size_t index = 99;
  std::thread waiter([&] { index = ca::sync_wait(body().with_stop_token(source.get_token())); });
  source.request_stop(); // before, during or after the children started: all must end
  waiter.join();
  EXPECT_LT(index, 2U);
  EXPECT_EQ(finished.load(), 2);
}

TEST(WhenAny, ResultsAreMovedNeverCopiedAndNothingLeaks) {
  counted::reset();
  {
    thread_resumer pool(1);
    std::atomic<int> finished{0};
    auto make = [](int i) -> ca::task<counted> { co_return counted{i}; };
    auto loser = [](thread_resumer& p, std::atomic<int>& n, counted c) -> ca::task<counted> {
      co_await until_stopped(p, n, 0);
      co_return c;
    };
    auto r = ca::sync_wait(ca::when_any(make(1), loser(pool, finished, counted{2})));
    EXPECT_EQ(std::get<0>(r.value).id, 1);
    std::vector<ca::task<counted>> tasks;
    tasks.push_back(loser(pool, finished, counted{3}));
    tasks.push_back(make(4));
    auto v = ca::sync_wait(ca::when_any(std::move(tasks)));
    EXPECT_EQ(v.value.id, 4);
    EXPECT_EQ(counted::alive(), 2) << "only the two results are left";
  }
  EXPECT_EQ(counted::copies.load(), 0);
  EXPECT_EQ(counted::alive(), 0);
}

// Regression: a winner's result whose move constructor is deleted is copied into the result.
TEST(WhenAny, CopyOnlyResults) {
  auto make = [](int v) -> ca::task<ca::test::copy_only> { co_return {v}; };
  auto r = ca::sync_wait(ca::when_any(make(1), make(2)));
  EXPECT_EQ(r.index, 0U);
  EXPECT_EQ(std::get<0>(r.value).value, 1);
  std::vector<ca::task<ca::test::copy_only>> tasks;
  tasks.push_back(make(3));
  tasks.push_back(make(4));
  auto v = ca::sync_wait(ca::when_any(std::move(tasks)));
  EXPECT_EQ(v.index, 0U);
  EXPECT_EQ(v.value.value, 3);
}

// Regression, as for when_all: the concept refuses a non-movable rvalue child.
static_assert(!ca::concepts::combinator_child<ca::async_mutex::scoped_lock_awaiter>);

TEST(WhenAnyStress, ChildrenRacingOnSeveralThreads) {
  thread_resumer pool(4);
  for (int round = 0; round < 2000; ++round) {
    std::atomic<int> ran{0};
    auto racer = [](thread_resumer& p, std::atomic<int>& n, int i) -> ca::task<int> {
      co_await p.schedule();
      ++n;
      if (i == 3) {
        throw std::runtime_error("racer 3");
      }
      co_return i;
    };
    std::vector<ca::task<int>> tasks;
    for (int i = 0; i < 4; ++i) {
      tasks.push_back(racer(pool, ran, i));
    }
    try {
      const auto r = ca::sync_wait(ca::when_any(std::move(tasks)));
      ASSERT_LT(r.index, 3U);
      ASSERT_EQ(r.value, static_cast<int>(r.index));
    } catch (const std::runtime_error&) { // racer 3 won this round
    }
    ASSERT_EQ(ran.load(), 4) << "round " << round;
  }
}

TEST(WhenAnyStress, WinnersRacingStopRequestsOfTheAwaitingCoroutine) {
  thread_resumer pool(4);
  for (int round = 0; round < 500; ++round) {
    std::atomic<int> finished{0};
    std::stop_source source;
    auto body = [&]() -> ca::task<std::size_t> {
      auto r = co_await ca::when_any(until_stopped(pool, finished, 0), after_hop(pool, 1),
                                     until_stopped(pool, finished, 2));
      co_return r.index;
    };
    std::thread stopper([&] { source.request_stop(); });
    const std::size_t index = ca::sync_wait(body().with_stop_token(source.get_token()));
    stopper.join();
    ASSERT_LT(index, 3U);
    ASSERT_EQ(finished.load(), 2) << "round " << round;
  }
}

// Racers and stop-aware losers on the project's work-stealing pool.
TEST(WhenAnyStress, RacesOnTheProjectThreadPool) {
  ca::thread_pool pool{4};
  for (int round = 0; round < 1000; ++round) {
    std::atomic<int> stopped{0};
    auto racer = [](ca::thread_pool& p, int i) -> ca::task<int> {
      co_await p.schedule();
      co_return i;
    };
    auto loser = [](ca::thread_pool& p, std::atomic<int>& n) -> ca::task<int> {
      const std::stop_token token = co_await ca::get_stop_token();
      while (!token.stop_requested()) {
        co_await p.schedule();
      }
      ++n;
      co_return -1;
    };
    const auto r =
        ca::sync_wait(ca::when_any(racer(pool, 0), loser(pool, stopped), racer(pool, 2)));
    ASSERT_TRUE(r.index == 0 || r.index == 2) << "round " << round;
    ASSERT_EQ(r.value.index(), r.index); // duplicate alternatives: picked by index
    ASSERT_EQ(std::visit([](int v) { return v; }, r.value), static_cast<int>(r.index));
    ASSERT_EQ(stopped.load(), 1) << "round " << round;
  }
}

} // namespace
