// SPDX-License-Identifier: Apache-2.0
// with_timeout / with_deadline on CPU primitives, tasks and reactor waits (the fake
// completion source standing in for GPU work).

#include "common/fake_completion_source.hpp"

#include "cuawait/async_event.hpp"
#include "cuawait/async_mutex.hpp"
#include "cuawait/cancellation.hpp"
#include "cuawait/deadline.hpp"
#include "cuawait/sync_wait.hpp"
#include "cuawait/task.hpp"
#include "cuawait/timer.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <stop_token>
#include <thread>
#include <type_traits>

namespace {

namespace ca = cuawait;
using namespace std::chrono_literals;
using ca::test::fake_completion_source;
using ca::test::fake_wait;

static_assert(std::is_base_of_v<ca::operation_cancelled, ca::operation_timed_out>);

ca::task<int> value_now(int v) { co_return v; }

TEST(Deadline, AFinishedOperationYieldsItsResult) {
  EXPECT_EQ(ca::sync_wait(ca::with_timeout(value_now(7), 1h)), 7);
  ca::sync_wait(ca::with_timeout(ca::sleep_for(1ms), 1h)); // void stays void
  static_assert(std::is_void_v<decltype(ca::sync_wait(ca::with_timeout(ca::sleep_for(1ms), 1h)))>);
}

TEST(Deadline, AnLvalueResultStaysAReference) {
  int x = 1;
  auto ref = [&]() -> ca::task<int&> { co_return x; };
  int& r = ca::sync_wait(ca::with_timeout(ref(), 1h));
  EXPECT_EQ(&r, &x);
}

// The CPU primitives take their token explicitly (they do not inherit one): a task hands
// them its own, which the deadline stops.
ca::task<void> wait_for_event(ca::async_event& ev) {
  co_await ev.wait(co_await ca::get_stop_token());
}

TEST(Deadline, ExpiryStopsAPrimitiveWaitAndThrowsOperationTimedOut) {
  ca::async_event never;
  EXPECT_THROW(ca::sync_wait(ca::with_timeout(wait_for_event(never), 5ms)),
               ca::operation_timed_out);
}

TEST(Deadline, APastDeadlineTimesOutAtOnce) {
  ca::async_event never;
  EXPECT_THROW(ca::sync_wait(
                   ca::with_deadline(wait_for_event(never), std::chrono::steady_clock::now() - 1s)),
               ca::operation_timed_out);
}

TEST(Deadline, TheOperationsOwnErrorWins) {
  auto failing = []() -> ca::task<int> {
    throw std::runtime_error("boom");
    co_return 0;
  };
  EXPECT_THROW(ca::sync_wait(ca::with_timeout(failing(), 1h)), std::runtime_error);
}

TEST(Deadline, ALockTakenInTimeIsHeldThroughItsGuard) {
  ca::async_mutex m;
  auto locked = [&]() -> ca::task<ca::async_mutex_lock> {
    co_return co_await m.scoped_lock(co_await ca::get_stop_token());
  };
  auto lock = ca::sync_wait(ca::with_timeout(locked(), 1h));
  EXPECT_TRUE(lock.owns_lock());
  // Held: a second attempt times out, and leaves the mutex as it was.
  EXPECT_THROW(ca::sync_wait(ca::with_timeout(locked(), 2ms)), ca::operation_timed_out);
  lock.unlock();
  EXPECT_TRUE(m.try_lock());
  m.unlock();
}

// A stop request on the awaiting coroutine is a cancellation, not a timeout.
TEST(Deadline, AStopOfTheAwaitingTaskIsNotATimeout) {
  ca::async_event never;
  std::stop_source stop;
  stop.request_stop();
  auto body = [&]() -> ca::task<void> { co_await ca::with_timeout(wait_for_event(never), 1h); };
  try {
    ca::sync_wait(body().with_stop_token(stop.get_token()));
    FAIL() << "no exception";
  } catch (const ca::operation_timed_out&) {
    FAIL() << "reported as a timeout";
  } catch (const ca::operation_cancelled&) {
  }
}

// GPU-style work that never finishes: the deadline withdraws its wait from the reactor.
TEST(Deadline, ExpiryWithdrawsAReactorWait) {
  fake_completion_source src(/*notifies=*/true);
  ca::completion_reactor r(src);
  src.attach(&r);
  EXPECT_THROW(ca::sync_wait(ca::with_timeout(fake_wait(r, 1, 3), 5ms)), ca::operation_timed_out);
  EXPECT_EQ(r.pending(), 0U);
  EXPECT_EQ(r.stats().stopped, 1U);
}

TEST(Deadline, AReactorWaitFinishingInTimeYieldsItsStatus) {
  fake_completion_source src(/*notifies=*/true);
  ca::completion_reactor r(src);
  src.attach(&r);
  src.complete(3, 9);
  const ca::completion_status st = ca::sync_wait(ca::with_timeout(fake_wait(r, 1, 3), 1h));
  EXPECT_EQ(st.state, ca::completion_state::failed);
  EXPECT_EQ(st.error, 9);
  EXPECT_EQ(ca::timer_service::global().pending(), 0U); // the sleep was stopped
}

} // namespace
