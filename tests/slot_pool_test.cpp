// SPDX-License-Identifier: Apache-2.0
// slot_pool: the core of the stream pool and of the arenas' slot leasing.

#include <cuawait/cuda/detail/slot_pool.hpp>
#include <cuawait/sync_wait.hpp>
#include <cuawait/task.hpp>

#include "common/manual_executor.hpp"
#include "common/owned_coroutine.hpp"
#include "common/race.hpp"

#include <cuawait/async_scope.hpp>
#include <cuawait/cancellation.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <coroutine>
#include <optional>
#include <random>
#include <stop_token>
#include <thread>
#include <vector>

namespace {

using cuawait::priority;
using cuawait::cuda::detail::slot_pool;
using cuawait::test::owned_coroutine;

// Acquires a slot, stores it in `got` and keeps it until the frame is destroyed.
owned_coroutine take(slot_pool& pool, std::optional<std::size_t>& got,
                     priority p = priority::normal) {
  got = co_await pool.acquire(p);
}

// Acquires a slot, stores it, and gives it back at once.
owned_coroutine take_and_release(slot_pool& pool, std::optional<std::size_t>& got) {
  const std::size_t s = co_await pool.acquire();
  got = s;
  pool.release(s);
}

TEST(SlotPool, LeasesLowestFreeSlotFirst) {
  slot_pool pool({0, 4, 0});
  EXPECT_EQ(pool.size(), 4u);
  EXPECT_EQ(pool.try_acquire(), 0u);
  EXPECT_EQ(pool.try_acquire(), 1u);
  EXPECT_EQ(pool.try_acquire(), 2u);
  pool.release(1);
  EXPECT_EQ(pool.try_acquire(), 1u);
  EXPECT_EQ(pool.try_acquire(), 3u);
  EXPECT_EQ(pool.try_acquire(), std::nullopt);
  EXPECT_EQ(pool.available(), 0u);
}

TEST(SlotPool, RejectsAnEmptyPool) { EXPECT_THROW(slot_pool({0, 0, 0}), std::invalid_argument); }

TEST(SlotPool, GroupsArePerPriorityWithFallbackToNormal) {
  slot_pool pool({0, 2, 1}); // no low-priority slots: low is served by normal
  EXPECT_EQ(pool.group_for(priority::low), pool.group_for(priority::normal));
  EXPECT_EQ(pool.try_acquire(priority::high), 2u);
  EXPECT_EQ(pool.try_acquire(priority::high), std::nullopt); // normal slots not borrowed
  EXPECT_EQ(pool.try_acquire(priority::low), 0u);
  EXPECT_EQ(pool.group_of(2), static_cast<int>(priority::high));
  EXPECT_EQ(pool.group_of(1), static_cast<int>(priority::normal));

  slot_pool only_high({0, 0, 3});
  EXPECT_EQ(only_high.try_acquire(priority::low), 0u);
}

TEST(SlotPool, RunsOfAdjacentSlots) {
  slot_pool pool({0, 70, 0}); // spans two bitmap words
  ASSERT_EQ(pool.try_acquire_run(3), 0u);
  EXPECT_EQ(pool.try_acquire(), 3u);
  pool.release(1);
  EXPECT_EQ(pool.try_acquire_run(2), 4u) << "slot 1 alone is no run of 2";
  EXPECT_EQ(pool.try_acquire_run(64), 6u);
  EXPECT_EQ(pool.try_acquire_run(2), std::nullopt);
  EXPECT_EQ(pool.available(), 1u);
  pool.release_run(6, 64);
  EXPECT_EQ(pool.available(), 65u);
  EXPECT_EQ(pool.try_acquire_run(0), std::nullopt);
}

TEST(SlotPool, AcquireDoesNotSuspendWhileASlotIsFree) {
  slot_pool pool({0, 1, 0});
  std::optional<std::size_t> got;
  auto c = take(pool, got);
  EXPECT_TRUE(c.done());
  EXPECT_EQ(got, 0u);
  c.handle.destroy();
}

TEST(SlotPool, AcquireWaitsUntilASlotIsReleasedAndTakesItOver) {
  slot_pool pool({0, 1, 0});
  const auto held = pool.try_acquire();
  std::optional<std::size_t> got;
  auto c = take(pool, got);
  EXPECT_FALSE(c.done());
  EXPECT_EQ(pool.waiting(), 1u);
  pool.release(*held); // no executor: resumed inline
  EXPECT_TRUE(c.done());
  EXPECT_EQ(got, 0u);
  EXPECT_EQ(pool.available(), 0u) << "the slot went to the waiter, not to the free set";
  c.handle.destroy();
}

TEST(SlotPool, WaitersAreServedInArrivalOrder) {
  slot_pool pool({0, 1, 0});
  const auto held = pool.try_acquire();
  std::optional<std::size_t> a;
  std::optional<std::size_t> b;
  auto ca = take_and_release(pool, a);
  auto cb = take_and_release(pool, b);
  EXPECT_EQ(pool.waiting(), 2u);
  pool.release(*held);
  EXPECT_TRUE(ca.done());
  EXPECT_TRUE(cb.done()); // a released it and b took it over
  EXPECT_EQ(pool.available(), 1u);
  ca.handle.destroy();
  cb.handle.destroy();
}

TEST(SlotPool, WaiterResumesOnItsExecutorWithItsPriority) {
  slot_pool pool({0, 1, 0});
  const auto held = pool.try_acquire();
  cuawait::test::manual_executor ex;
  std::optional<std::size_t> got;
  std::optional<owned_coroutine> c;
  {
    const cuawait::executor_scope scope(&ex, priority::high);
    c = take(pool, got);
  }
  pool.release(*held);
  EXPECT_FALSE(c->done()) << "must not resume on the releasing thread";
  ASSERT_EQ(ex.size(), 1u);
  EXPECT_EQ(ex.snapshot()[0].prio, priority::high);
  ex.run_all();
  EXPECT_TRUE(c->done());
  EXPECT_EQ(got, 0u);
  c->handle.destroy();
}

TEST(SlotPool, DestroyingAWaitingCoroutineWithdrawsItsWait) {
  slot_pool pool({0, 1, 0});
  const auto held = pool.try_acquire();
  std::optional<std::size_t> got;
  auto c = take(pool, got);
  EXPECT_EQ(pool.waiting(), 1u);
  c.handle.destroy();
  EXPECT_EQ(pool.waiting(), 0u);
  pool.release(*held);
  EXPECT_EQ(pool.available(), 1u);
  EXPECT_FALSE(got.has_value());
}

TEST(SlotPool, DestroyingAGrantedButNotResumedCoroutineReturnsTheSlot) {
  slot_pool pool({0, 1, 0});
  const auto held = pool.try_acquire();
  cuawait::test::manual_executor ex;
  std::optional<std::size_t> got;
  std::optional<owned_coroutine> c;
  {
    const cuawait::executor_scope scope(&ex, priority::normal);
    c = take(pool, got);
  }
  pool.release(*held); // granted, resumption queued on ex
  ASSERT_EQ(ex.size(), 1u);
  c->handle.destroy(); // cancelled before ex ran it (the queued entry is dropped below)
  EXPECT_EQ(pool.available(), 1u);
  EXPECT_EQ(pool.try_acquire(), 0u);
}

TEST(SlotPool, ThreadsAndCoroutinesNeverShareASlot) {
  constexpr std::size_t slots = 3;
  constexpr int threads = 6;
  constexpr int rounds = 2000;
  slot_pool pool({0, slots, 0});
  std::vector<std::atomic<int>> holders(slots);
  std::atomic<int> violations{0};
  auto use = [&](std::size_t s) {
    if (holders[s].fetch_add(1) != 0) {
      ++violations;
    }
    holders[s].fetch_sub(1);
  };
  auto job = [&]() -> cuawait::task<void> {
    const std::size_t s = co_await pool.acquire();
    use(s);
    pool.release(s);
  };
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (int i = 0; i < rounds; ++i) {
        if ((i + t) % 2 == 0) {
          cuawait::sync_wait(job());
        } else if (auto s = pool.try_acquire()) {
          use(*s);
          pool.release(*s);
        }
      }
    });
  }
  for (auto& w : workers) {
    w.join();
  }
  EXPECT_EQ(violations.load(), 0);
  EXPECT_EQ(pool.available(), slots);
  EXPECT_EQ(pool.waiting(), 0u);
}

// --- cancellation ------------------------------------------------------------------------

//! What a cancellable acquisition saw: the slot (kept until the frame is destroyed), or
//! a cancellation.
struct acquisition {
  std::optional<std::size_t> slot;
  bool cancelled = false;
  int resumptions = 0;
};

owned_coroutine take_cancellable(slot_pool& pool, std::stop_token token, acquisition& out) {
  try {
    out.slot = co_await pool.acquire(priority::normal, std::move(token));
  } catch (const cuawait::operation_cancelled&) {
    out.cancelled = true;
  }
  ++out.resumptions;
}

TEST(SlotPoolCancel, AStopWithdrawsTheWaitAndTakesNoSlot) {
  slot_pool pool({0, 1, 0});
  const auto held = pool.try_acquire();
  std::stop_source stop;
  acquisition first, second;
  auto c1 = take_cancellable(pool, stop.get_token(), first);
  auto c2 = take(pool, second.slot);
  EXPECT_EQ(pool.waiting(), 2u);
  std::thread([&] { stop.request_stop(); }).join();
  EXPECT_TRUE(first.cancelled); // at once, without a release
  EXPECT_EQ(first.resumptions, 1);
  EXPECT_EQ(pool.waiting(), 1u);
  pool.release(*held); // goes to the next waiter, not to the cancelled one
  EXPECT_EQ(second.slot, 0u);
  c1.handle.destroy();
  c2.handle.destroy();
  pool.release(0); // the second waiter's
  EXPECT_EQ(pool.available(), 1u);
}

TEST(SlotPoolCancel, AStoppedTokenCancelsEvenWithASlotFree) {
  slot_pool pool({0, 2, 0});
  std::stop_source stop;
  stop.request_stop();
  acquisition a;
  auto c = take_cancellable(pool, stop.get_token(), a);
  EXPECT_TRUE(a.cancelled);
  EXPECT_EQ(pool.available(), 2u);
  c.handle.destroy();
}

TEST(SlotPoolCancel, AGrantBeforeTheStopKeepsTheSlot) {
  slot_pool pool({0, 1, 0});
  const auto held = pool.try_acquire();
  std::stop_source stop;
  acquisition a;
  auto c = take_cancellable(pool, stop.get_token(), a);
  pool.release(*held);
  stop.request_stop();
  EXPECT_FALSE(a.cancelled);
  EXPECT_EQ(a.slot, 0u);
  EXPECT_EQ(pool.available(), 0u);
  c.handle.destroy();
  pool.release(0);
}

TEST(SlotPoolCancel, ACancelledWaitResumesOnItsExecutor) {
  slot_pool pool({0, 1, 0});
  const auto held = pool.try_acquire();
  cuawait::test::manual_executor ex;
  std::stop_source stop;
  acquisition a;
  std::optional<owned_coroutine> c;
  {
    const cuawait::executor_scope scope(&ex, priority::low);
    c = take_cancellable(pool, stop.get_token(), a);
  }
  stop.request_stop();
  EXPECT_FALSE(a.cancelled);
  ASSERT_EQ(ex.size(), 1u);
  ex.run_all();
  EXPECT_TRUE(a.cancelled);
  c->handle.destroy();
  pool.release(*held);
}

// A task's token (and so when_any's or an async_scope's) reaches the acquisition.
TEST(SlotPoolCancel, AnAsyncScopeStopsItsWaitingAcquisitions) {
  slot_pool pool({0, 1, 0});
  const auto held = pool.try_acquire();
  int cancelled = 0;
  cuawait::async_scope scope;
  auto job = [&]() -> cuawait::task<void> {
    try {
      pool.release(co_await pool.acquire());
    } catch (const cuawait::operation_cancelled&) {
      ++cancelled;
    }
  };
  for (int i = 0; i < 5; ++i) {
    scope.spawn(job());
  }
  EXPECT_EQ(pool.waiting(), 5u);
  scope.request_stop();
  cuawait::sync_wait(scope.join());
  EXPECT_EQ(cancelled, 5);
  pool.release(*held);
  EXPECT_EQ(pool.available(), 1u);
}

// 1,000 races of a stop against a release: exactly one outcome each time, and the slot is
// accounted for (held by the waiter, or back in the pool). Half the races also hit the
// window in which the waiter is still registering its stop callback.
TEST(SlotPoolCancel, ThousandRacesOfStopAgainstRelease) {
  std::mt19937 rng(11);
  int grants = 0, cancels = 0;
  for (int i = 0; i < 1000; ++i) {
    slot_pool pool({0, 1, 0});
    const auto held = pool.try_acquire();
    std::stop_source stop;
    acquisition a;
    std::optional<owned_coroutine> c;
    if ((rng() & 1U) != 0) {
      c = take_cancellable(pool, stop.get_token(), a);
      cuawait::test::race_stop_request(stop, [&] { pool.release(*held); });
    } else {
      cuawait::test::race_stop_request(stop, [&] {
        c = take_cancellable(pool, stop.get_token(), a);
        pool.release(*held);
      });
    }
    ASSERT_EQ(a.resumptions, 1) << "race " << i;
    if (a.cancelled) {
      ++cancels;
      ASSERT_EQ(pool.available(), 1u) << "race " << i;
    } else {
      ++grants;
      ASSERT_EQ(a.slot, 0u) << "race " << i;
      ASSERT_EQ(pool.available(), 0u) << "race " << i;
      pool.release(0);
    }
    ASSERT_EQ(pool.waiting(), 0u);
    c->handle.destroy();
  }
  // Which side wins depends on the machine's load (one side may win every race on a loaded
  // CI machine); both outcomes are covered deterministically above. Each race ended in
  // exactly one of them, with the slot accounted for (asserted per race).
  RecordProperty("grants", grants);
  RecordProperty("cancels", cancels);
  EXPECT_EQ(grants + cancels, 1000);
}

} // namespace
