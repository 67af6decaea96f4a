// SPDX-License-Identifier: Apache-2.0
#include <cuawait/channel.hpp>
#include <cuawait/sync_wait.hpp>
#include <cuawait/task.hpp>

#include "common/counted.hpp"
#include "common/race.hpp"
#include "common/thread_resumer.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace ca = cuawait;
using ca::test::counted;
using ca::test::task_group;
using ca::test::thread_resumer;

namespace {

static_assert(std::is_base_of_v<std::logic_error, ca::channel_closed>);
static_assert(std::is_base_of_v<ca::channel_closed, ca::channel_closed_with_value<int>>);

TEST(Channel, BufferedValuesComeOutInOrder) {
  ca::channel<int> ch(3);
  EXPECT_EQ(ch.capacity(), 3u);
  ca::sync_wait([&]() -> ca::task<void> {
    co_await ch.send(1);
    co_await ch.send(2);
    co_await ch.send(3);
    EXPECT_EQ(ch.size(), 3u);
    EXPECT_EQ(co_await ch.receive(), 1);
    EXPECT_EQ(co_await ch.receive(), 2);
    EXPECT_EQ(co_await ch.receive(), 3);
  }());
  EXPECT_EQ(ch.size(), 0u);
}

TEST(Channel, TrySendAndTryReceiveNeverWait) {
  ca::channel<std::string> ch(1);
  EXPECT_EQ(ch.try_receive(), std::nullopt);
  std::string a = "first";
  EXPECT_TRUE(ch.try_send(std::move(a)));
  std::string b = "second";
  EXPECT_FALSE(ch.try_send(std::move(b)));
  EXPECT_EQ(b, "second"); // a failed try_send leaves its argument alone
  EXPECT_EQ(ch.try_receive(), "first");
  EXPECT_EQ(ch.try_receive(), std::nullopt);
}

TEST(Channel, ReceiveSuspendsUntilASendArrives) {
  ca::channel<int> ch(2);
  std::optional<int> got;
  task_group g;
  g.spawn_call([&]() -> ca::task<void> { got = co_await ch.receive(); });
  EXPECT_FALSE(got.has_value());
  EXPECT_TRUE(ch.try_send(7)); // handed straight to the waiting receiver
  EXPECT_EQ(got, 7);
  EXPECT_EQ(ch.size(), 0u);
  g.wait();
}

TEST(Channel, SendSuspendsWhileFullAndKeepsFifoOrder) {
  ca::channel<int> ch(1);
  std::vector<int> sent;
  task_group g;
  for (int i = 0; i < 4; ++i) {
    g.spawn_call([&ch, &sent, i]() -> ca::task<void> {
      co_await ch.send(int{i});
      sent.push_back(i);
    });
  }
  EXPECT_EQ(sent, (std::vector<int>{0})); // the other three wait
  std::vector<int> received;
  for (int i = 0; i < 4; ++i) {
    received.push_back(*ch.try_receive());
  }
  EXPECT_EQ(received, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(sent, (std::vector<int>{0, 1, 2, 3}));
  g.wait();
}

TEST(Channel, ReceiversAreServedInFifoOrder) {
  ca::channel<int> ch(4);
  std::vector<int> got(3, -1);
  task_group g;
  for (int i = 0; i < 3; ++i) {
    g.spawn_call([&ch, &got, i]() -> ca::task<void> { got[i] = *co_await ch.receive(); });
  }
  for (int v = 10; v < 13; ++v) {
    EXPECT_TRUE(ch.try_send(int{v}));
  }
  g.wait();
  EXPECT_EQ(got, (std::vector<int>{10, 11, 12}));
}

TEST(Channel, CloseDrainsBufferedValuesThenEndsConsumers) {
  ca::channel<int> ch(4);
  EXPECT_TRUE(ch.try_send(1));
  EXPECT_TRUE(ch.try_send(2));
  ch.close();
  ch.close(); // idempotent
  EXPECT_TRUE(ch.is_closed());
  std::vector<int> drained = ca::sync_wait([&]() -> ca::task<std::vector<int>> {
    std::vector<int> out;
    while (auto v = co_await ch.receive()) {
      out.push_back(*v);
    }
    co_return out;
  }());
  EXPECT_EQ(drained, (std::vector<int>{1, 2}));
  EXPECT_EQ(ca::sync_wait(ch.receive()), std::nullopt); // and again
}

TEST(Channel, CloseWakesWaitingReceiversWithNullopt) {
  ca::channel<int> ch(2);
  int ended = 0;
  task_group g;
  for (int i = 0; i < 3; ++i) {
    g.spawn_call([&]() -> ca::task<void> {
      EXPECT_EQ(co_await ch.receive(), std::nullopt);
      ++ended;
    });
  }
  ch.close();
  EXPECT_EQ(ended, 3);
  g.wait();
}

TEST(Channel, SendOnClosedChannelThrowsAndReturnsTheValue) {
  ca::channel<std::unique_ptr<int>> ch(1);
  ch.close();
  auto body = [&]() -> ca::task<int> {
    try {
      co_await ch.send(std::make_unique<int>(5));
    } catch (const ca::channel_closed_with_value<std::unique_ptr<int>>& e) {
      co_return *e.value();
    }
    co_return -1;
  };
  EXPECT_EQ(ca::sync_wait(body()), 5);
  EXPECT_THROW(ca::sync_wait(ch.send(std::make_unique<int>(6))), ca::channel_closed);
  auto p = std::make_unique<int>(7);
  EXPECT_FALSE(ch.try_send(std::move(p)));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(*p, 7);
}

TEST(Channel, CloseWakesWaitingSendersWhoGetTheirValuesBack) {
  ca::channel<int> ch(1);
  EXPECT_TRUE(ch.try_send(1));
  std::vector<int> returned;
  task_group g;
  for (int i = 2; i <= 3; ++i) {
    g.spawn_call([&ch, &returned, i]() -> ca::task<void> {
      try {
        co_await ch.send(int{i});
      } catch (const ca::channel_closed_with_value<int>& e) {
        returned.push_back(e.value());
      }
    });
  }
  ch.close();
  g.wait();
  EXPECT_EQ(returned, (std::vector<int>{2, 3}));
  EXPECT_EQ(ch.try_receive(), 1); // what was buffered stays receivable
  EXPECT_EQ(ch.try_receive(), std::nullopt);
}

TEST(Channel, RendezvousSendWaitsForAReceiver) {
  ca::channel<int> ch(0);
  EXPECT_EQ(ch.capacity(), 0u);
  EXPECT_FALSE(ch.try_send(1)); // nobody is receiving
  bool delivered = false;
  task_group g;
  g.spawn_call([&]() -> ca::task<void> {
    co_await ch.send(42);
    delivered = true;
  });
  EXPECT_FALSE(delivered);
  EXPECT_EQ(ch.size(), 0u);
  EXPECT_EQ(ch.try_receive(), 42); // taken straight from the sender
  EXPECT_TRUE(delivered);
  g.wait();

  std::optional<int> got;
  g.spawn_call([&]() -> ca::task<void> { got = co_await ch.receive(); });
  EXPECT_TRUE(ch.try_send(9)); // a waiting receiver makes try_send succeed
  EXPECT_EQ(got, 9);
  g.wait();
}

TEST(Channel, ValuesAreMovedNeverCopiedAndNothingLeaks) {
  counted::reset();
  {
    ca::channel<counted> ch(2);
    task_group g;
    std::vector<int> ids;
    g.spawn_call([&]() -> ca::task<void> {
      while (auto v = co_await ch.receive()) {
        ids.push_back(v->id);
      }
    });
    ca::sync_wait([&]() -> ca::task<void> {
      for (int i = 0; i < 10; ++i) {
        co_await ch.send(counted{i});
      }
      counted c{10};
      EXPECT_TRUE(ch.try_send(std::move(c)));
    }());
    ch.close();
    g.wait();
    EXPECT_EQ(ids, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  }
  EXPECT_EQ(counted::copies, 0);
  EXPECT_EQ(counted::alive(), 0);
}

TEST(Channel, ValuesLeftInTheChannelAreDestroyedWithIt) {
  counted::reset();
  {
    ca::channel<counted> ch(3);
    EXPECT_TRUE(ch.try_send(counted{1}));
    EXPECT_TRUE(ch.try_send(counted{2}));
    EXPECT_EQ(counted::alive(), 2);
  }
  EXPECT_EQ(counted::alive(), 0);
  EXPECT_EQ(counted::copies, 0);
}

TEST(Channel, RejectedValueOfAClosedChannelIsNotCopied) {
  counted::reset();
  {
    ca::channel<counted> ch(1);
    ch.close();
    try {
      ca::sync_wait(ch.send(counted{3}));
      ADD_FAILURE() << "send on a closed channel returned";
    } catch (const ca::channel_closed_with_value<counted>& e) {
      EXPECT_EQ(e.value().id, 3);
    }
  }
  EXPECT_EQ(counted::copies, 0);
  EXPECT_EQ(counted::alive(), 0);
}

enum class outcome { none, done, cancelled };

ca::task<void> receive_or_cancel(ca::channel<counted>& ch, std::stop_token token, outcome& out,
                                 int& id) {
  try {
    auto v = co_await ch.receive(std::move(token));
    id = v->id;
    out = outcome::done;
  } catch (const ca::operation_cancelled& e) {
    EXPECT_EQ(std::string(e.what()), "cuawait::channel::receive cancelled");
    out = outcome::cancelled;
  }
}

ca::task<void> send_or_cancel(ca::channel<counted>& ch, int id, std::stop_token token,
                              outcome& out) {
  try {
    co_await ch.send(counted{id}, std::move(token));
    out = outcome::done;
  } catch (const ca::operation_cancelled& e) {
    EXPECT_EQ(std::string(e.what()), "cuawait::channel::send cancelled");
    out = outcome::cancelled;
  }
}

TEST(Channel, CancelledReceiverTakesNoValue) {
  counted::reset();
  {
    ca::channel<counted> ch(1);
    std::stop_source stop;
    outcome first = outcome::none;
    outcome second = outcome::none;
    int first_id = -1;
    int second_id = -1;
    task_group g;
    g.spawn(receive_or_cancel(ch, stop.get_token(), first, first_id));
    g.spawn(receive_or_cancel(ch, {}, second, second_id));
    stop.request_stop();
    EXPECT_EQ(first, outcome::cancelled);
    EXPECT_TRUE(ch.try_send(counted{8}));
    g.wait();
    EXPECT_EQ(second, outcome::done);
    EXPECT_EQ(second_id, 8);
    EXPECT_EQ(first_id, -1);
  }
  EXPECT_EQ(counted::alive(), 0);
}

TEST(Channel, CancelledSenderDeliversNothing) {
  counted::reset();
  {
    ca::channel<counted> ch(1);
    EXPECT_TRUE(ch.try_send(counted{1}));
    std::stop_source stop;
    outcome out = outcome::none;
    task_group g;
    g.spawn(send_or_cancel(ch, 2, stop.get_token(), out));
    stop.request_stop();
    g.wait();
    EXPECT_EQ(out, outcome::cancelled);
    EXPECT_EQ(ch.try_receive()->id, 1);
    EXPECT_EQ(ch.try_receive(), std::nullopt);
  }
  EXPECT_EQ(counted::copies, 0);
  EXPECT_EQ(counted::alive(), 0);
}

TEST(Channel, StopRequestedBeforeTheAwaitCancelsIt) {
  ca::channel<counted> ch(1);
  std::stop_source stop;
  stop.request_stop();
  EXPECT_THROW(ca::sync_wait(ch.send(counted{1}, stop.get_token())), ca::operation_cancelled);
  EXPECT_EQ(ch.size(), 0u);
  EXPECT_TRUE(ch.try_send(counted{2}));
  EXPECT_THROW(ca::sync_wait(ch.receive(stop.get_token())), ca::operation_cancelled);
  EXPECT_EQ(ch.size(), 1u); // the value stays for someone else
}

// A stop request racing a value hand-over: the value goes to the receiver or stays in the
// channel, never both, never neither.
TEST(Channel, CancellationRacingSendKeepsEveryValueExactlyOnce) {
  counted::reset();
  for (int i = 0; i < 2000; ++i) {
    ca::channel<counted> ch(1);
    std::stop_source stop;
    outcome out = outcome::none;
    int id = -1;
    task_group g;
    g.spawn(receive_or_cancel(ch, stop.get_token(), out, id));
    ASSERT_NO_FATAL_FAILURE(
        ca::test::race_stop_request(stop, [&] { ASSERT_TRUE(ch.try_send(counted{i})); }));
    g.wait();
    ASSERT_NE(out, outcome::none);
    if (out == outcome::done) {
      ASSERT_EQ(id, i);
      ASSERT_EQ(ch.size(), 0u);
    } else {
      ASSERT_EQ(ch.size(), 1u) << "iteration " << i;
    }
  }
  EXPECT_EQ(counted::alive(), 0);
  EXPECT_EQ(counted::copies, 0);
}

// A stop request racing the receive that frees room for a waiting sender.
TEST(Channel, CancellationRacingReceiveKeepsEveryValueExactlyOnce) {
  for (int i = 0; i < 2000; ++i) {
    ca::channel<counted> ch(1);
    ASSERT_TRUE(ch.try_send(counted{-1}));
    std::stop_source stop;
    outcome out = outcome::none;
    task_group g;
    g.spawn(send_or_cancel(ch, i, stop.get_token(), out));
    ASSERT_NO_FATAL_FAILURE(
        ca::test::race_stop_request(stop, [&] { ASSERT_EQ(ch.try_receive()->id, -1); }));
    g.wait();
    ASSERT_NE(out, outcome::none);
    if (out == outcome::done) {
      ASSERT_EQ(ch.try_receive()->id, i);
    }
    ASSERT_EQ(ch.try_receive(), std::nullopt) << "iteration " << i;
  }
}

// 8 producer and 8 consumer threads, each driving 4 coroutines, move 200,000 values.
TEST(Channel, StressEveryValueReceivedExactlyOnce) {
  constexpr int threads_per_side = 8;
  constexpr int coroutines_per_thread = 4;
  constexpr int total = 200000;
  constexpr int per_producer = total / (threads_per_side * coroutines_per_thread);
  ca::channel<int> ch(64);
  std::vector<std::atomic<int>> seen(total);
  std::atomic<int> received{0};

  auto producer = [&](int first) -> ca::task<void> {
    for (int v = first; v < first + per_producer; ++v) {
      co_await ch.send(int{v});
    }
  };
  auto consumer = [&]() -> ca::task<void> {
    while (auto v = co_await ch.receive()) {
      seen[static_cast<std::size_t>(*v)].fetch_add(1, std::memory_order_relaxed);
      received.fetch_add(1, std::memory_order_relaxed);
    }
  };

  std::vector<std::thread> consumers;
  for (int t = 0; t < threads_per_side; ++t) {
    consumers.emplace_back([&] {
      task_group g;
      for (int c = 0; c < coroutines_per_thread; ++c) {
        g.spawn_call(consumer);
      }
      g.wait();
    });
  }
  std::vector<std::thread> producers;
  for (int t = 0; t < threads_per_side; ++t) {
    producers.emplace_back([&, t] {
      task_group g;
      for (int c = 0; c < coroutines_per_thread; ++c) {
        const int first = (t * coroutines_per_thread + c) * per_producer;
        g.spawn_call([&, first] { return producer(first); });
      }
      g.wait();
    });
  }
  for (std::thread& t : producers) {
    t.join();
  }
  ch.close();
  for (std::thread& t : consumers) {
    t.join();
  }
  EXPECT_EQ(received.load(), total);
  int wrong = 0;
  for (const std::atomic<int>& s : seen) {
    wrong += s.load() == 1 ? 0 : 1;
  }
  EXPECT_EQ(wrong, 0);
}

} // namespace
