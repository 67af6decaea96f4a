// SPDX-License-Identifier: Apache-2.0
#include <cuawait/async_generator.hpp>
#include <cuawait/cancellation.hpp>
#include <cuawait/sync_wait.hpp>
#include <cuawait/task.hpp>
#include <cuawait/thread_pool.hpp>

#include "common/counted.hpp"
#include "common/detached.hpp"
#include "common/gate.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <memory>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace ca = cuawait;
using ca::test::counted;
using ca::test::detached;
using ca::test::gate;

namespace {

ca::async_generator<int> count_to(int n) {
  for (int i = 1; i <= n; ++i) {
    co_yield i;
  }
}

ca::task<std::vector<int>> drain(ca::async_generator<int> gen) {
  std::vector<int> out;
  while (int* x = co_await gen.next()) {
    out.push_back(*x);
  }
  co_return out;
}

TEST(AsyncGenerator, NextYieldsEveryElementThenNull) {
  static_assert(std::is_same_v<ca::async_generator<int>::pointer, int*>);
  EXPECT_EQ(ca::sync_wait(drain(count_to(4))), (std::vector<int>{1, 2, 3, 4}));
  EXPECT_TRUE(ca::sync_wait(drain(count_to(0))).empty());
}

TEST(AsyncGenerator, NextAfterTheEndKeepsYieldingNull) {
  auto body = []() -> ca::task<int> {
    auto gen = count_to(1);
    int nulls = 0;
    EXPECT_NE(co_await gen.next(), nullptr);
    for (int i = 0; i < 3; ++i) {
      nulls += (co_await gen.next() == nullptr) ? 1 : 0;
    }
    EXPECT_TRUE(gen.is_done());
    co_return nulls;
  };
  EXPECT_EQ(ca::sync_wait(body()), 3);
}

TEST(AsyncGenerator, IsLazyUntilFirstNext) {
  bool started = false;
  auto make = [&]() -> ca::async_generator<int> {
    started = true;
    co_yield 1;
  };
  auto gen = make();
  EXPECT_FALSE(started);
  auto body = [&]() -> ca::task<int> { co_return *co_await gen.next(); };
  EXPECT_EQ(ca::sync_wait(body()), 1);
  EXPECT_TRUE(started);
}

TEST(AsyncGenerator, AwaitedIterationVisitsEveryElement) {
  auto body = []() -> ca::task<std::vector<int>> {
    std::vector<int> out;
    auto gen = count_to(3);
    for (auto it = co_await gen.begin(); it != gen.end(); co_await ++it) {
      out.push_back(*it);
    }
    co_return out;
  };
  EXPECT_EQ(ca::sync_wait(body()), (std::vector<int>{1, 2, 3}));
}

TEST(AsyncGenerator, BeginOfAnEmptyGeneratorIsEnd) {
  auto body = []() -> ca::task<bool> {
    auto gen = count_to(0);
    co_return co_await gen.begin() == gen.end();
  };
  EXPECT_TRUE(ca::sync_wait(body()));
}

TEST(AsyncGenerator, RvaluesAreYieldedInPlaceAndMovedOutByTheConsumer) {
  counted::reset();
  auto make = []() -> ca::async_generator<counted> {
    for (int i = 0; i < 5; ++i) {
      co_yield counted{i};
    }
  };
  auto body = [&]() -> ca::task<int> {
    auto gen = make();
    int sum = 0;
    while (counted* c = co_await gen.next()) {
      counted mine = std::move(*c); // the element is the consumer's to move out
      sum += mine.id;
    }
    co_return sum;
  };
  EXPECT_EQ(ca::sync_wait(body()), 10);
  EXPECT_EQ(counted::copies, 0);
  EXPECT_EQ(counted::moves, 5); // exactly the consumer's own moves
  EXPECT_EQ(counted::alive(), 0);
}

TEST(AsyncGenerator, AnLvalueYieldedIntoAValueGeneratorIsCopiedOnceAndKeptIntact) {
  counted::reset();
  auto make = []() -> ca::async_generator<counted> {
    counted local{7};
    co_yield local;
    EXPECT_EQ(local.id, 7); // the consumer moved from the copy, not from `local`
    local.id = 8;
    co_yield local;
  };
  auto body = [&]() -> ca::task<int> {
    auto gen = make();
    int sum = 0;
    while (counted* c = co_await gen.next()) {
      counted taken = std::move(*c);
      taken.id *= 10;
      sum += taken.id;
    }
    co_return sum;
  };
  EXPECT_EQ(ca::sync_wait(body()), 150);
  EXPECT_EQ(counted::copies, 2);
  EXPECT_EQ(counted::alive(), 0);
}

TEST(AsyncGenerator, ReferenceGeneratorYieldsTheObjectsThemselves) {
  counted::reset();
  std::vector<counted> source(3);
  const int constructed = counted::default_constructions;
  auto make = [](std::vector<counted>& v) -> ca::async_generator<counted&> {
    for (counted& c : v) {
      co_yield c;
    }
  };
  auto body = [&]() -> ca::task<std::vector<counted*>> {
    std::vector<counted*> seen;
    auto gen = make(source);
    for (auto it = co_await gen.begin(); it != gen.end(); co_await ++it) {
      static_assert(std::is_same_v<decltype(*it), counted&>);
      seen.push_back(&*it);
    }
    co_return seen;
  };
  EXPECT_EQ(ca::sync_wait(body()), (std::vector<counted*>{&source[0], &source[1], &source[2]}));
  EXPECT_EQ(counted::copies, 0);
  EXPECT_EQ(counted::moves, 0);
  EXPECT_EQ(counted::default_constructions, constructed);
}

TEST(AsyncGenerator, ConstReferenceGeneratorYieldsTemporariesWithoutCopies) {
  counted::reset();
  auto make = []() -> ca::async_generator<const counted&> {
    co_yield counted{1}; // lives until the generator resumes
    co_yield counted{2};
  };
  auto body = [&]() -> ca::task<int> {
    auto gen = make();
    int sum = 0;
    while (const counted* c = co_await gen.next()) {
      sum += c->id;
    }
    co_return sum;
  };
  EXPECT_EQ(ca::sync_wait(body()), 3);
  EXPECT_EQ(counted::copies, 0);
  EXPECT_EQ(counted::moves, 0);
}

TEST(AsyncGenerator, ExceptionIsRethrownAtTheNextThatRanIntoIt) {
  auto make = []() -> ca::async_generator<int> {
    co_yield 1;
    throw std::runtime_error("batch 2 failed");
  };
  auto body = [&]() -> ca::task<std::string> {
    auto gen = make();
    EXPECT_EQ(*co_await gen.next(), 1);
    std::string what;
    try {
      co_await gen.next();
    } catch (const std::runtime_error& e) {
      what = e.what();
    }
    EXPECT_EQ(co_await gen.next(), nullptr); // the sequence has ended, nothing rethrown again
    co_return what;
  };
  EXPECT_EQ(ca::sync_wait(body()), "batch 2 failed");
}

TEST(AsyncGenerator, ExceptionBeforeTheFirstYieldReachesBegin) {
  auto make = []() -> ca::async_generator<int> {
    throw std::invalid_argument("no input");
    co_yield 0;
  };
  auto body = [&]() -> ca::task<void> {
    auto gen = make();
    (void)co_await gen.begin();
  };
  EXPECT_THROW(ca::sync_wait(body()), std::invalid_argument);
}

TEST(AsyncGenerator, AdvancingAnEmptyGeneratorThrowsLogicError) {
  auto body = []() -> ca::task<void> {
    ca::async_generator<int> empty;
    co_await empty.next();
  };
  EXPECT_THROW(ca::sync_wait(body()), std::logic_error);
}

TEST(AsyncGenerator, DestroyingItMidStreamDestroysTheBodysLocals) {
  counted::reset();
  bool ran_past_last_read = false;
  auto make = [&]() -> ca::async_generator<int> {
    counted guard{1};
    auto owned = std::make_unique<counted>(2);
    for (int i = 0;; ++i) {
      co_yield i;
      if (i == 1) {
        ran_past_last_read = true;
      }
    }
  };
  auto body = [&]() -> ca::task<int> {
    auto gen = make();
    co_await gen.next();
    co_await gen.next(); // element 1; the generator is now suspended at its co_yield
    EXPECT_EQ(counted::alive(), 2);
    co_return 0;
  }; // gen destroyed here, mid-stream
  ca::sync_wait(body());
  EXPECT_FALSE(ran_past_last_read);
  EXPECT_EQ(counted::alive(), 0);
  EXPECT_EQ(counted::destructions, 2);
}

TEST(AsyncGenerator, DestroyingAnUnstartedGeneratorRunsNothing) {
  counted::reset();
  bool started = false;
  {
    auto gen = [&](counted) -> ca::async_generator<int> {
      started = true;
      co_yield 1;
    }(counted{3});
  }
  EXPECT_FALSE(started);
  EXPECT_EQ(counted::alive(), 0);
}

TEST(AsyncGenerator, BodySeesTheConsumersStopTokenAndTasksItAwaitsInheritIt) {
  std::stop_source source;
  std::vector<bool> inner_saw_possible;
  auto probe = []() -> ca::task<bool> {
    const std::stop_token t = co_await ca::get_stop_token();
    co_return t.stop_possible();
  };
  auto make = [&]() -> ca::async_generator<int> {
    const std::stop_token token = co_await ca::get_stop_token();
    for (int i = 0; !token.stop_requested(); ++i) {
      inner_saw_possible.push_back(co_await probe());
      co_yield i;
    }
  };
  auto consumer = [&]() -> ca::task<int> {
    auto gen = make();
    int n = 0;
    while (co_await gen.next() != nullptr) {
      if (++n == 3) {
        source.request_stop();
      }
    }
    co_return n;
  };
  EXPECT_EQ(ca::sync_wait(consumer().with_stop_token(source.get_token())), 3);
  EXPECT_EQ(inner_saw_possible, (std::vector<bool>{true, true, true}));
}

TEST(AsyncGenerator, CancelledAwaitInsideTheBodyEndsTheStreamWithItsException) {
  std::stop_source source;
  gate never_opened;
  auto make = [](gate& never_opened) -> ca::async_generator<int> {
    co_yield 1;
    const std::stop_token token = co_await ca::get_stop_token();
    if (token.stop_requested()) {
      throw ca::operation_cancelled("batch stream cancelled");
    }
    co_await never_opened; // not reached
  };
  auto consumer = [&]() -> ca::task<int> {
    auto gen = make(never_opened);
    co_await gen.next();
    source.request_stop();
    try {
      co_await gen.next();
    } catch (const ca::operation_cancelled&) {
      co_return 1;
    }
    co_return 0;
  };
  EXPECT_EQ(ca::sync_wait(consumer().with_stop_token(source.get_token())), 1);
}

TEST(AsyncGenerator, WithStopTokenReplacesTheConsumersToken) {
  std::stop_source own;
  own.request_stop();
  auto make = []() -> ca::async_generator<bool> {
    const std::stop_token token = co_await ca::get_stop_token();
    co_yield token.stop_requested();
  };
  auto consumer = [&]() -> ca::task<bool> {
    auto gen = make().with_stop_token(own.get_token());
    co_return *co_await gen.next();
  };
  std::stop_source consumers; // never stopped
  EXPECT_TRUE(ca::sync_wait(consumer().with_stop_token(consumers.get_token())));
}

TEST(AsyncGenerator, AConsumerWithoutATokenDoesNotSeeAnEarlierConsumersToken) {
  std::stop_source source;
  auto make = []() -> ca::async_generator<bool> {
    for (;;) {
      const std::stop_token token = co_await ca::get_stop_token();
      co_yield token.stop_possible();
    }
  };
  auto gen = make();
  auto with_token = [&]() -> ca::task<bool> { co_return *co_await gen.next(); };
  EXPECT_TRUE(ca::sync_wait(with_token().with_stop_token(source.get_token())));
  // sync_wait's own coroutine has no token: the generator must not keep the old one.
  EXPECT_FALSE(*ca::sync_wait(gen.next()));
}

TEST(AsyncGenerator, ConsumerWaitsWhileTheGeneratorIsSuspendedBetweenYields) {
  gate g;
  std::vector<int> got;
  bool finished = false;
  auto make = [](gate& g) -> ca::async_generator<int> {
    co_yield 1;
    co_await g; // e.g. a GPU batch still running
    co_yield 2;
  };
  auto gen = make(g);
  [](ca::async_generator<int>& gen, std::vector<int>& got, bool& finished) -> detached {
    while (int* x = co_await gen.next()) {
      got.push_back(*x);
    }
    finished = true;
  }(gen, got, finished);
  EXPECT_EQ(got, std::vector<int>{1});
  EXPECT_FALSE(finished);
  g.open(); // resumes the generator, which hands element 2 to the consumer
  EXPECT_EQ(got, (std::vector<int>{1, 2}));
  EXPECT_TRUE(finished);
}

TEST(AsyncGenerator, HundredThousandSynchronousYieldsUseBoundedStack) {
  constexpr int n = 100'000;
  auto make = []() -> ca::async_generator<int> {
    for (int i = 0; i < n; ++i) {
      co_yield i;
    }
  };
  auto body = [&]() -> ca::task<long long> {
    auto gen = make();
    long long sum = 0;
    for (auto it = co_await gen.begin(); it != gen.end(); co_await ++it) {
      sum += *it;
    }
    co_return sum;
  };
  EXPECT_EQ(ca::sync_wait(body()), static_cast<long long>(n) * (n - 1) / 2);
}

TEST(AsyncGenerator, HundredThousandYieldsAwaitingReadyTasksUseBoundedStack) {
  constexpr int n = 100'000;
  auto one = []() -> ca::task<int> { co_return 1; };
  auto make = [&]() -> ca::async_generator<int> {
    for (int i = 0; i < n; ++i) {
      co_yield co_await one();
    }
  };
  auto body = [&]() -> ca::task<int> {
    auto gen = make();
    int sum = 0;
    while (int* x = co_await gen.next()) {
      sum += *x;
    }
    co_return sum;
  };
  EXPECT_EQ(ca::sync_wait(body()), n);
}

TEST(AsyncGenerator, GeneratorHopsOntoAThreadPoolBetweenYields) {
  ca::thread_pool pool(2);
  constexpr int n = 1000;
  auto make = [&]() -> ca::async_generator<int> {
    for (int i = 0; i < n; ++i) {
      co_await pool.schedule();
      co_yield pool.on_worker_thread() ? i : -1'000'000;
    }
  };
  auto body = [&]() -> ca::task<long long> {
    auto gen = make();
    long long sum = 0;
    while (int* x = co_await gen.next()) {
      sum += *x;
    }
    co_return sum;
  };
  EXPECT_EQ(ca::sync_wait(body()), static_cast<long long>(n) * (n - 1) / 2);
}

TEST(AsyncGenerator, MovedFromGeneratorIsEmptyAndTheMoveTargetContinues) {
  auto body = []() -> ca::task<int> {
    auto a = count_to(3);
    co_await a.next();
    ca::async_generator<int> b = std::move(a);
    EXPECT_FALSE(static_cast<bool>(a));
    co_return *co_await b.next();
  };
  EXPECT_EQ(ca::sync_wait(body()), 2);
}

} // namespace
