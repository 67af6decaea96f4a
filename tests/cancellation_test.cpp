// SPDX-License-Identifier: Apache-2.0
#include <cuawait/async_event.hpp>
#include <cuawait/async_latch.hpp>
#include <cuawait/async_mutex.hpp>
#include <cuawait/async_semaphore.hpp>
#include <cuawait/cancellation.hpp>
#include <cuawait/channel.hpp>
#include <cuawait/sync_wait.hpp>
#include <cuawait/task.hpp>

#include "common/thread_resumer.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <exception>
#include <stop_token>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace ca = cuawait;
using ca::test::task_group;
using ca::test::thread_resumer;

namespace {

static_assert(std::is_base_of_v<std::exception, ca::operation_cancelled>);
static_assert(std::is_nothrow_copy_constructible_v<ca::operation_cancelled>);

TEST(OperationCancelled, SaysWhatWasCancelled) {
  const ca::operation_cancelled plain;
  EXPECT_EQ(std::string(plain.what()), "cuawait: operation cancelled");
  const ca::operation_cancelled named("my_op cancelled");
  EXPECT_EQ(std::string(named.what()), "my_op cancelled");
  const std::exception& base = named;
  EXPECT_EQ(std::string(base.what()), "my_op cancelled");
}

// The token a task was started with reaches a primitive through get_stop_token().
TEST(Cancellation, TaskStopTokenCancelsAPrimitiveWait) {
  ca::async_event e;
  std::stop_source stop;
  bool cancelled = false;
  auto body = [&]() -> ca::task<void> {
    try {
      co_await e.wait(co_await ca::get_stop_token());
    } catch (const ca::operation_cancelled&) {
      cancelled = true;
    }
  };
  task_group g;
  g.spawn_call([&]() { return body().with_stop_token(stop.get_token()); });
  EXPECT_FALSE(cancelled);
  stop.request_stop();
  EXPECT_TRUE(cancelled);
  g.wait();
}

// One stop request, made on another thread, ends waits on every kind of primitive; the
// primitives are left exactly as they were.
TEST(Cancellation, OneRequestCancelsWaitsOnEveryPrimitive) {
  ca::async_mutex m;
  ASSERT_TRUE(m.try_lock());
  ca::async_semaphore s(0);
  ca::async_event e;
  ca::async_latch l(1);
  ca::channel<int> empty(1);
  ca::channel<int> full(1);
  ASSERT_TRUE(full.try_send(1));
  std::stop_source stop;
  std::atomic<int> cancelled{0};

  auto expect_cancel = [&](auto make_awaitable) -> ca::task<void> {
    try {
      co_await make_awaitable(stop.get_token());
    } catch (const ca::operation_cancelled&) {
      cancelled.fetch_add(1);
    }
  };
  task_group g;
  g.spawn_call([&] { return expect_cancel([&](std::stop_token t) { return m.lock(t); }); });
  g.spawn_call([&] { return expect_cancel([&](std::stop_token t) { return s.acquire(t); }); });
  g.spawn_call([&] { return expect_cancel([&](std::stop_token t) { return e.wait(t); }); });
  g.spawn_call([&] { return expect_cancel([&](std::stop_token t) { return l.wait(t); }); });
  g.spawn_call([&] { return expect_cancel([&](std::stop_token t) { return empty.receive(t); }); });
  g.spawn_call([&] { return expect_cancel([&](std::stop_token t) { return full.send(2, t); }); });
  EXPECT_EQ(cancelled.load(), 0);
  std::thread requester([&] { stop.request_stop(); });
  requester.join();
  g.wait();
  EXPECT_EQ(cancelled.load(), 6);

  EXPECT_FALSE(m.try_lock()); // still ours
  m.unlock();
  EXPECT_EQ(s.available(), 0);
  EXPECT_FALSE(e.is_set());
  EXPECT_FALSE(l.try_wait());
  EXPECT_EQ(empty.size(), 0u);
  EXPECT_EQ(full.try_receive(), 1);
  EXPECT_EQ(full.try_receive(), std::nullopt);
}

// Waiters that already finished are not affected by a later stop request, and one token
// may serve many waits in a row (each registers and drops its own callback).
TEST(Cancellation, TokenReusedAcrossManyCompletedWaits) {
  ca::async_semaphore s(1);
  std::stop_source stop;
  ca::sync_wait([&]() -> ca::task<void> {
    for (int i = 0; i < 1000; ++i) {
      auto permit = co_await s.acquire_permit(stop.get_token());
    }
  }());
  stop.request_stop();
  EXPECT_EQ(s.available(), 1);
}

// Many coroutines on several threads wait on a semaphore with one shared token while
// permits are released and stop is requested concurrently: every permit is accounted for.
TEST(Cancellation, StressSharedTokenWithConcurrentReleases) {
  constexpr int waiters = 256;
  ca::async_semaphore s(0);
  std::stop_source stop;
  std::atomic<int> acquired{0};
  std::atomic<int> cancelled{0};
  {
    thread_resumer threads(4);
    task_group g;
    for (int i = 0; i < waiters; ++i) {
      g.spawn_call([&]() -> ca::task<void> {
        co_await threads.schedule();
        try {
          co_await s.acquire(stop.get_token());
          acquired.fetch_add(1); // keeps its permit
        } catch (const ca::operation_cancelled&) {
          cancelled.fetch_add(1);
        }
      });
    }
    std::thread releaser([&] {
      for (int i = 0; i < waiters / 2; ++i) {
        s.release();
      }
    });
    std::thread requester([&] { stop.request_stop(); });
    releaser.join();
    requester.join();
    g.wait();
  }
  EXPECT_EQ(acquired.load() + cancelled.load(), waiters);
  EXPECT_EQ(acquired.load() + s.available(), waiters / 2);
}

} // namespace
