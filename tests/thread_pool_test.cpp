// SPDX-License-Identifier: Apache-2.0
#include <cuawait/sync_wait.hpp>
#include <cuawait/task.hpp>
#include <cuawait/thread_pool.hpp>

#include "common/counted.hpp"
#include "common/detached.hpp"
#include "common/job.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <latch>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace ca = cuawait;
using ca::priority;
using ca::test::counted;
using ca::test::detached;
using ca::test::job;

namespace {

job record(std::vector<std::string>& order, std::string label, std::latch& done) {
  order.push_back(std::move(label)); // single worker in these tests: no race
  done.count_down();
  co_return;
}

//! Blocks the worker that runs it until the test opens `gate`.
job block_worker(std::latch& started, std::latch& gate) {
  started.count_down();
  gate.wait();
  co_return;
}

TEST(ThreadPool, SizeIsAtLeastOne) {
  ca::thread_pool three(3);
  EXPECT_EQ(three.size(), 3U);
  ca::thread_pool zero(0);
  EXPECT_EQ(zero.size(), 1U);
}

TEST(ThreadPool, StatsCountResumptionsAndAccountEveryWorkersTime) {
  ca::thread_pool pool(2);
  constexpr int n = 200;
  auto hop = [&]() -> ca::task<void> { co_await pool.schedule(); };
  std::vector<ca::task<void>> all;
  for (int i = 0; i < n; ++i) {
    all.push_back(hop());
  }
  for (auto& t : all) {
    ca::sync_wait(std::move(t));
  }
  const ca::thread_pool_stats s = pool.stats();
  EXPECT_EQ(s.workers, 2U);
  EXPECT_EQ(s.resumed, static_cast<std::uint64_t>(n)); // one per schedule()
  EXPECT_EQ(s.queued, 0U);
  EXPECT_GT(s.busy_ns + s.idle_ns, 0U);
  EXPECT_GE(s.busy_fraction(), 0.0);
  EXPECT_LE(s.busy_fraction(), 1.0);
  // A worker held busy: its spell counts while it lasts, before it ends.
  std::latch started(1);
  std::latch gate(1);
  pool.post(block_worker(started, gate).handle, priority::normal);
  started.wait();
  const auto before = pool.stats();
  const auto after = pool.stats();
  EXPECT_GT(after.busy_ns, before.busy_ns);
  gate.count_down();
}

TEST(ThreadPool, ScheduleMovesOntoAWorkerWithExecutorScope) {
  ca::thread_pool pool(2);
  const auto main_id = std::this_thread::get_id();
  auto body = [&]() -> ca::task<bool> {
    co_await pool.schedule(priority::high);
    const bool moved = std::this_thread::get_id() != main_id && pool.on_worker_thread();
    const bool scoped = ca::current_executor() == &pool && ca::current_priority() == priority::high;
    co_await pool.schedule(); // keeps the current priority
    co_return moved&& scoped&& ca::current_priority() == priority::high;
  };
  EXPECT_TRUE(ca::sync_wait(body()));
  EXPECT_FALSE(pool.on_worker_thread());
  EXPECT_EQ(ca::current_executor(), nullptr);
}

//! Completes on a foreign thread the way the GPU reactor does: captures the executor and
//! priority at suspension and posts the coroutine back to them.
struct foreign_completion {
  std::thread* completer;
  std::latch* assigned; // the thread posts only once `*completer` holds it
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> h) const {
    ca::executor* ex = ca::current_executor();
    const priority p = ca::current_priority();
    std::latch* ready = assigned;
    *completer = std::thread([ex, p, h, ready] {
      ready->wait();
      ex->post(h, p);
    });
    assigned->count_down();
  }
  void await_resume() const noexcept {}
};

TEST(ThreadPool, CompletionFromAForeignThreadComesBackToThePool) {
  ca::thread_pool pool(2);
  std::thread completer;
  std::latch assigned(1);
  auto body = [&]() -> ca::task<bool> {
    co_await pool.schedule(priority::low);
    co_await foreign_completion{&completer, &assigned};
    co_return pool.on_worker_thread() && ca::current_priority() == priority::low;
  };
  EXPECT_TRUE(ca::sync_wait(body()));
  completer.join();
}

TEST(ThreadPool, IdleWorkersStealWorkQueuedBehindABlockedWorker) {
  constexpr int n = 64;
  ca::thread_pool pool(4);
  std::latch gate(1);
  std::latch all_done(n);
  std::latch blocker_done(1);
  std::atomic<std::thread::id> blocked_id{};
  std::atomic<int> ran_on_blocked{0};

  auto item = [&]() -> job {
    if (std::this_thread::get_id() == blocked_id.load()) {
      ++ran_on_blocked;
    }
    all_done.count_down();
    co_return;
  };
  auto blocker = [&]() -> job {
    blocked_id = std::this_thread::get_id();
    for (int i = 0; i < n; ++i) {
      pool.post(item().handle, priority::normal); // from a worker: its own queue
    }
    gate.wait();
    blocker_done.count_down();
    co_return;
  };
  pool.post(blocker().handle, priority::normal);
  // Returns only if other workers took the items while their owner is still blocked.
  all_done.wait();
  EXPECT_EQ(ran_on_blocked.load(), 0);
  gate.count_down();
  blocker_done.wait();
}

TEST(ThreadPool, QueuedHighRunsBeforeQueuedLowOnOneWorker) {
  ca::thread_pool pool(1);
  std::vector<std::string> order;
  std::latch done(7);
  auto producer = [&]() -> job {
    // All posted from the worker, so all wait in its own queue until this returns.
    pool.post(record(order, "low1", done).handle, priority::low);
    pool.post(record(order, "high1", done).handle, priority::high);
    pool.post(record(order, "normal1", done).handle, priority::normal);
    pool.post(record(order, "low2", done).handle, priority::low);
    pool.post(record(order, "high2", done).handle, priority::high);
    pool.post(record(order, "normal2", done).handle, priority::normal);
    order.push_back("producer");
    done.count_down();
    co_return;
  };
  pool.post(producer().handle, priority::low);
  done.wait();
  const std::vector<std::string> expected{"producer", "high1", "high2", "normal1",
                                          "normal2",  "low1",  "low2"};
  EXPECT_EQ(order, expected);
}

TEST(ThreadPool, PriorityOrdersOutsidePostsAndBeatsLocalLowWork) {
  ca::thread_pool pool(1);
  std::vector<std::string> order;
  std::latch done(5);
  std::latch started(1);
  std::latch gate(1);
  auto producer = [&]() -> job {
    pool.post(record(order, "local-low", done).handle, priority::low);
    started.count_down();
    gate.wait(); // the test posts from outside meanwhile
    co_return;
  };
  pool.post(producer().handle, priority::normal);
  started.wait();
  pool.post(record(order, "out-low", done).handle, priority::low);
  pool.post(record(order, "out-normal", done).handle, priority::normal);
  pool.post(record(order, "out-high1", done).handle, priority::high);
  pool.post(record(order, "out-high2", done).handle, priority::high);
  gate.count_down();
  done.wait();
  const std::vector<std::string> expected{"out-high1", "out-high2", "out-normal", "local-low",
                                          "out-low"};
  EXPECT_EQ(order, expected);
}

TEST(ThreadPool, ShutdownRunsQueuedWorkAndRunsLatePostsInline) {
  constexpr int n = 200;
  counted::reset();
  std::atomic<int> ran{0};
  {
    ca::thread_pool pool(1);
    std::latch started(1);
    std::latch gate(1);
    pool.post(block_worker(started, gate).handle, priority::normal);
    started.wait();
    auto item = [&](ca::thread_pool& p) -> job {
      const counted c(1);
      co_await p.schedule(); // during the drain this hop is local work: accepted
      ++ran;
      co_return;
    };
    for (int i = 0; i < n; ++i) {
      pool.post(item(pool).handle, priority::normal);
    }
    EXPECT_EQ(counted::alive(), 0); // frames not started yet
    std::thread stopper([&] { pool.shutdown(); });
    while (!pool.is_shutting_down()) {
      std::this_thread::yield();
    }
    // Refused by the pool, so it runs here, now.
    bool late_ran = false;
    const auto main_id = std::this_thread::get_id();
    auto late = [&]() -> job {
      late_ran = std::this_thread::get_id() == main_id && ca::current_executor() == &pool;
      co_return;
    };
    pool.post(late().handle, priority::normal);
    EXPECT_TRUE(late_ran);
    gate.count_down();
    stopper.join();
    EXPECT_EQ(ran.load(), n);
  }
  EXPECT_EQ(counted::alive(), 0);
}

TEST(ThreadPool, ShutdownIsIdempotentAndMayRaceWithItself) {
  ca::thread_pool pool(3);
  std::thread a([&] { pool.shutdown(); });
  std::thread b([&] { pool.shutdown(); });
  pool.shutdown();
  a.join();
  b.join();
  pool.shutdown();
  EXPECT_TRUE(pool.is_shutting_down());
}

TEST(ThreadPool, ShutdownFromAWorkerThrows) {
  ca::thread_pool pool(2);
  auto body = [&]() -> ca::task<std::string> {
    co_await pool.schedule();
    try {
      pool.shutdown();
    } catch (const std::logic_error& e) {
      co_return e.what();
    }
    co_return "no exception";
  };
  EXPECT_NE(ca::sync_wait(body()).find("own workers"), std::string::npos);
  EXPECT_FALSE(pool.is_shutting_down());
}

TEST(ThreadPool, ScheduleAfterShutdownContinuesOnTheCaller) {
  ca::thread_pool pool(2);
  pool.shutdown();
  auto body = [&]() -> ca::task<std::thread::id> {
    co_await pool.schedule();
    co_return std::this_thread::get_id();
  };
  EXPECT_EQ(ca::sync_wait(body()), std::this_thread::get_id());
}

TEST(ThreadPool, ExceptionsCrossThePool) {
  ca::thread_pool pool(2);
  auto body = [&]() -> ca::task<int> {
    co_await pool.schedule();
    throw std::runtime_error("from a worker");
    co_return 0;
  };
  EXPECT_THROW(ca::sync_wait(body()), std::runtime_error);
}

TEST(ThreadPool, StressHundredThousandTasksFromOutside) {
  constexpr std::int64_t n = 100'000;
  ca::thread_pool pool(4);
  std::atomic<std::int64_t> sum{0};
  std::latch done(n);
  auto work = [&](std::int64_t i) -> detached {
    co_await pool.schedule();
    sum += i;
    done.count_down();
  };
  for (std::int64_t i = 0; i < n; ++i) {
    work(i);
  }
  done.wait();
  EXPECT_EQ(sum.load(), n * (n - 1) / 2);
}

TEST(ThreadPool, StressTasksSpawnedFromWorkersWithHops) {
  constexpr std::int64_t roots = 100;
  constexpr std::int64_t per_root = 1000;
  ca::thread_pool pool(4);
  std::atomic<std::int64_t> sum{0};
  std::latch done(roots * per_root);
  auto leaf = [&](std::int64_t i) -> detached {
    co_await pool.schedule(priority::low); // local queue of the spawning worker
    co_await pool.schedule(priority::high);
    sum += i;
    done.count_down();
  };
  auto root = [&](std::int64_t r) -> detached {
    co_await pool.schedule();
    for (std::int64_t i = 0; i < per_root; ++i) {
      leaf(r * per_root + i);
    }
  };
  for (std::int64_t r = 0; r < roots; ++r) {
    root(r);
  }
  done.wait();
  const std::int64_t n = roots * per_root;
  EXPECT_EQ(sum.load(), n * (n - 1) / 2);
}

TEST(ThreadPool, NoLostWakeUpsWhenPostingOneAtATime) {
  // Each round lets the workers go idle, then posts one item: a lost wake-up hangs here
  // (and the 30 s CTest timeout fails the test).
  ca::thread_pool pool(2);
  auto hop = [&]() -> ca::task<int> {
    co_await pool.schedule();
    co_return 1;
  };
  int total = 0;
  for (int i = 0; i < 2000; ++i) {
    total += ca::sync_wait(hop());
  }
  EXPECT_EQ(total, 2000);
}

TEST(ThreadPool, DestructorDrainsWorkPostedFromOutside) {
  counted::reset();
  std::atomic<int> ran{0};
  {
    ca::thread_pool pool(2);
    auto item = [&]() -> job {
      const counted c(1);
      ++ran;
      co_return;
    };
    for (int i = 0; i < 1000; ++i) {
      pool.post(item().handle, priority::low);
    }
  }
  EXPECT_EQ(ran.load(), 1000);
  EXPECT_EQ(counted::alive(), 0);
}

// Regression: a post from outside the pool published the work, released the injection lock,
// then read the pool's sleeper count and could lock its park mutex. By then the coroutine
// could have run and its owner destroyed the pool (TSan reported it on every run). Each
// round: a foreign thread posts a coroutine that tells the owner to destroy the pool.
TEST(ThreadPool, RegressionOutsidePostNeverTouchesThePoolAfterPublishing) {
  for (int round = 0; round < 200; ++round) {
    auto pool = std::make_unique<ca::thread_pool>(1);
    std::atomic<bool> ran{false};
    auto body = [&]() -> job {
      ran.store(true, std::memory_order_release);
      ran.notify_one();
      co_return;
    };
    std::thread poster([&] { pool->post(body().handle, priority::normal); });
    ran.wait(false, std::memory_order_acquire);
    pool.reset(); // the owner destroys the pool while the poster may still be in post()
    poster.join();
  }
}

} // namespace

namespace {

thread_local int tl_worker_index = -1;

TEST(ThreadPoolTest, EachWorkerRunsItsStartHookBeforeAnyTask) {
  constexpr std::size_t workers = 4;
  std::atomic<unsigned> seen_mask{0};
  std::atomic<int> hooks{0};
  std::atomic<int> tasks_without_hook{0};
  std::atomic<int> tasks{0};
  {
    cuawait::thread_pool pool(workers, [&](std::size_t index) {
      tl_worker_index = static_cast<int>(index);
      seen_mask.fetch_or(1U << index);
      hooks.fetch_add(1);
    });
    std::latch done(64);
    for (int i = 0; i < 64; ++i) {
      [](cuawait::thread_pool& p, std::atomic<int>& without, std::atomic<int>& n,
         std::latch& l) -> cuawait::test::detached {
        co_await p.schedule();
        if (tl_worker_index < 0) {
          without.fetch_add(1);
        }
        n.fetch_add(1);
        l.count_down();
      }(pool, tasks_without_hook, tasks, done);
    }
    done.wait();
  }
  EXPECT_EQ(tasks.load(), 64);
  EXPECT_EQ(tasks_without_hook.load(), 0);
  EXPECT_EQ(hooks.load(), static_cast<int>(workers));
  EXPECT_EQ(seen_mask.load(), (1U << workers) - 1);
}

} // namespace

namespace {

// post_bulk: a batch of handles queued at once (what the reactor does for thousands of waits
// ended by one stop request) runs each exactly once, on the pool, with its priority.
TEST(ThreadPool, PostBulkRunsEveryHandleOnceOnThePool) {
  constexpr int n = 1000;
  ca::thread_pool pool(3);
  std::vector<std::atomic<int>> runs(n);
  std::atomic<int> wrong_place{0};
  std::latch done(n);
  auto item = [&](int i) -> job {
    if (ca::current_executor() != &pool || ca::current_priority() != priority::high) {
      wrong_place.fetch_add(1);
    }
    runs[static_cast<std::size_t>(i)].fetch_add(1);
    done.count_down();
    co_return;
  };
  std::vector<std::coroutine_handle<>> handles;
  for (int i = 0; i < n; ++i) {
    handles.push_back(item(i).handle);
  }
  // From outside the pool, in chunks (each goes to the next worker's queue)...
  const std::span<const std::coroutine_handle<>> all(handles);
  for (std::size_t at = 0; at < n / 2; at += 64) {
    pool.post_bulk(all.subspan(at, std::min<std::size_t>(64, n / 2 - at)), priority::high);
  }
  // ...and from a worker (a poller ending many waits).
  auto from_worker = [&]() -> job {
    ca::thread_pool& p = pool;
    p.post_bulk(all.subspan(n / 2), priority::high);
    co_return;
  };
  pool.post(from_worker().handle, priority::normal);
  done.wait();
  EXPECT_EQ(wrong_place.load(), 0);
  for (const std::atomic<int>& r : runs) {
    EXPECT_EQ(r.load(), 1);
  }
}

TEST(ThreadPool, PostBulkAfterShutdownRunsTheBatchOnTheCaller) {
  ca::thread_pool pool(2);
  pool.shutdown();
  const auto main_id = std::this_thread::get_id();
  int ran_here = 0;
  auto item = [&]() -> job {
    ran_here += std::this_thread::get_id() == main_id && ca::current_executor() == &pool ? 1 : 0;
    co_return;
  };
  const std::vector<std::coroutine_handle<>> handles{item().handle, item().handle, item().handle};
  pool.post_bulk(handles, priority::normal);
  EXPECT_EQ(ran_here, 3); // refused by the pool, so run here, now: nothing leaks
}

} // namespace
