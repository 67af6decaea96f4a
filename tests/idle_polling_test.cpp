// SPDX-License-Identifier: Apache-2.0
// Completions found where work resumes: a thread_pool whose idle workers poll a completion
// reactor that has no thread of its own (driven by a fake completion source). Resumption on
// the right executor with its priority, parking and waking with no lost wake-up, withdrawal,
// detaching the source, and a stress of many waits completed in random order.

#include "common/detached.hpp"
#include "common/fake_completion_source.hpp"
#include "common/owned_coroutine.hpp"

#include <cuawait/completion_reactor.hpp>
#include <cuawait/run_loop.hpp>
#include <cuawait/sync_wait.hpp>
#include <cuawait/task.hpp>
#include <cuawait/thread_pool.hpp>
#include <cuawait/when_all.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

namespace {

namespace ca = cuawait;
using ca::completion_reactor;
using ca::completion_state;
using ca::reactor_options;
using ca::test::fake_completion_source;
using ca::test::fake_wait;
using namespace std::chrono_literals;

reactor_options without_thread() {
  reactor_options o;
  o.start_thread = false;
  return o;
}

void wake(void* pool) noexcept { static_cast<ca::thread_pool*>(pool)->wake_idle_poller(); }

//! A pool polling a thread-less reactor over a fake source, wired like `runtime` does.
struct polled_pool {
  explicit polled_pool(std::size_t threads, bool notifies = false,
                       reactor_options options = without_thread(), bool parallel = false,
                       bool unlocked = false, bool costly = false)
      : source(notifies, parallel, unlocked, costly), reactor(source, options), pool(threads) {
    source.attach(&reactor);
    reactor.set_idle_waker(&wake, &pool);
    pool.set_idle_source(&reactor);
  }
  ~polled_pool() {
    pool.set_idle_source(nullptr);
    reactor.set_idle_waker(nullptr, nullptr);
    pool.shutdown();
  }
  fake_completion_source source;
  completion_reactor reactor;
  ca::thread_pool pool;
};

struct seen {
  ca::executor* exec = nullptr;
  ca::priority prio = ca::priority::normal;
  bool on_worker = false;
  completion_state state = completion_state::pending;
};

ca::task<seen> await_on_pool(polled_pool& p, std::uint64_t token, ca::priority prio) {
  co_await p.pool.schedule(prio);
  const ca::completion_status st = co_await fake_wait(p.reactor, 1, token);
  co_return seen{ca::current_executor(), ca::current_priority(), p.pool.on_worker_thread(),
                 st.state};
}

TEST(IdlePolling, AFinishedWaitResumesOnAPoolWorkerWithItsPriority) {
  polled_pool p(2);
  std::thread completer([&] {
    while (p.reactor.pending() == 0) {
      std::this_thread::yield(); // until the coroutine has suspended on the wait
    }
    p.source.complete(7);
  });
  const seen s = ca::sync_wait(await_on_pool(p, 7, ca::priority::high));
  completer.join();
  EXPECT_EQ(s.state, completion_state::done);
  EXPECT_EQ(s.exec, &p.pool);
  EXPECT_EQ(s.prio, ca::priority::high);
  EXPECT_TRUE(s.on_worker);
  EXPECT_EQ(p.reactor.pending(), 0u);
}

TEST(IdlePolling, AWaitFromAPlainThreadIsResumedByTheWorkerThatFindsIt) {
  polled_pool p(1);
  std::thread completer([&] {
    while (p.reactor.pending() == 0) {
      std::this_thread::yield();
    }
    p.source.complete(3, 42);
  });
  // No executor: the reactor has no thread, so a polling worker must resume it.
  const auto st = ca::sync_wait([&]() -> ca::task<ca::completion_status> {
    co_return co_await fake_wait(p.reactor, 5, 3);
  }());
  completer.join();
  EXPECT_EQ(st.state, completion_state::failed);
  EXPECT_EQ(st.error, 42);
}

// A pool that never runs out of work (each worker always has a coroutine queued) must still
// find completions: a busy worker polls between two pieces of work, one worker per period
// (`CUAWAIT_BUSY_POLL_US`, 50 us by default). Before, workers polled only when they had
// nothing to run, so a CPU stage queued for a whole batch of images held every finished GPU
// wait (and the stream and buffers behind it) until the backlog was gone. The busy
// coroutines give up after 20 s, turning that hang into a failure.
TEST(IdlePolling, APoolThatNeverRunsOutOfWorkStillFindsCompletions) {
  polled_pool p(2);
  std::atomic<bool> resumed{false};
  std::atomic<int> started{0};
  const auto busy = [&]() -> ca::task<bool> {
    co_await p.pool.schedule();
    started.fetch_add(1);
    const auto give_up = std::chrono::steady_clock::now() + 20s;
    while (!resumed.load()) {
      if (std::chrono::steady_clock::now() > give_up) {
        co_return false;
      }
      co_await p.pool.schedule(); // queued again: the worker never runs out of work
    }
    co_return true;
  };
  const auto waiter = [&]() -> ca::task<seen> {
    const seen s = co_await await_on_pool(p, 9, ca::priority::high);
    resumed.store(true);
    co_return s;
  };
  std::thread completer([&] {
    while (p.reactor.pending() == 0 || started.load() < 4) {
      std::this_thread::yield(); // the wait is pending and both workers are busy
    }
    p.source.complete(9);
  });
  const auto [s, b1, b2, b3, b4] =
      ca::sync_wait(ca::when_all(waiter(), busy(), busy(), busy(), busy()));
  completer.join();
  EXPECT_TRUE(b1 && b2 && b3 && b4) << "the completion was found only once the pool ran dry";
  EXPECT_EQ(s.state, completion_state::done);
  EXPECT_EQ(s.exec, &p.pool);
  EXPECT_EQ(s.prio, ca::priority::high);
  EXPECT_TRUE(s.on_worker);
}

// A worker with one coroutine waiting watches that wait's lane outside the reactor's lock,
// as a thread in cudaStreamSynchronize watches its stream, instead of sweeping every lane
// under the lock (where it would hold up the threads submitting work). The watch is made
// long here so that only it can have found the completion.
TEST(IdlePolling, AWorkerWithOneWaitWatchesItsOwnLaneWithoutSweeping) {
  reactor_options o = without_thread();
  o.own_lane_watch = true;
  o.claim_spin = 10s;
  o.stall_probe = 10s;
  polled_pool p(1, false, o, false, true);
  std::thread completer([&] {
    while (p.reactor.pending() == 0) {
      std::this_thread::yield();
    }
    p.source.complete(7);
  });
  const seen s = ca::sync_wait(await_on_pool(p, 7, ca::priority::high));
  completer.join();
  EXPECT_EQ(s.state, completion_state::done);
  EXPECT_EQ(s.exec, &p.pool);
  EXPECT_EQ(s.prio, ca::priority::high);
  EXPECT_TRUE(s.on_worker);
  EXPECT_EQ(p.reactor.stats().sweeps, 0u) << "found by a sweep, not by watching its lane";
}

// The watch must not hide other lanes: the pool's only worker watches the lane of its own
// coroutine, which finishes last, while a wait of a plain thread on another lane finishes
// first. The worker must find that one too (it sweeps between watches); the reactor has no
// thread and nobody else polls.
void other_lanes_found_while_watching(std::uint32_t others_every) {
  reactor_options o = without_thread();
  o.own_lane_watch = true;
  o.own_lane_others_every = others_every;
  o.stall_probe = 10s;
  polled_pool p(1, false, o, false, true);
  std::atomic<bool> own_done{false};
  [](polled_pool& pp, std::atomic<bool>& done) -> ca::test::detached {
    co_await pp.pool.schedule(ca::priority::normal);
    (void)co_await fake_wait(pp.reactor, 1, 1);
    done.store(true);
  }(p, own_done);
  while (p.reactor.pending() == 0) {
    std::this_thread::yield(); // the worker's coroutine waits on lane 1
  }
  std::atomic<bool> other_done{false};
  std::thread plain([&] {
    const auto st = ca::sync_wait([&]() -> ca::task<ca::completion_status> {
      co_return co_await fake_wait(p.reactor, 5, 3);
    }());
    EXPECT_EQ(st.state, completion_state::done);
    other_done.store(true);
  });
  while (p.reactor.pending() < 2) {
    std::this_thread::yield();
  }
  p.source.complete(3);
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!other_done.load() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  const bool found = other_done.load();
  p.source.complete(1); // lets everything finish, found or not
  plain.join();
  EXPECT_TRUE(found) << "the wait on lane 5 was not found while the worker watched lane 1";
  while (!own_done.load()) {
    std::this_thread::yield();
  }
}

TEST(IdlePolling, AWorkerWatchingItsOwnLaneStillFindsTheWaitsOfOtherLanes) {
  other_lanes_found_while_watching(1);
}

// The same when the watcher looks at the other lanes at every 16th poll only.
TEST(IdlePolling, AWatcherThatLooksElsewhereRarelyStillFindsTheWaitsOfOtherLanes) {
  other_lanes_found_while_watching(16);
}

// A thread spinning on a claimed lane queries it at most once per `query_pace`: over a
// wait held pending for 40 ms, with a 2 ms pace, at most 40 / 2 queries and the first.
// Back to back (no pace) the same worker makes thousands.
TEST(IdlePolling, QueryPaceBoundsTheQueriesOfAClaimedLane) {
  reactor_options o = without_thread();
  o.claim_spin = 10s;
  o.stall_probe = 10s;
  o.query_pace = 2ms;
  polled_pool p(1, false, o, true);
  std::uint64_t queried = 0;
  double elapsed_ms = 0;
  std::thread completer([&] {
    while (p.reactor.pending() == 0) {
      std::this_thread::yield();
    }
    const std::uint64_t q0 = p.source.queries();
    const auto t0 = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(40ms); // how long the wait stays pending, not a synchronization
    queried = p.source.queries() - q0;
    elapsed_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    p.source.complete(7);
  });
  const seen s = ca::sync_wait(await_on_pool(p, 7, ca::priority::normal));
  completer.join();
  EXPECT_EQ(s.state, completion_state::done);
  EXPECT_TRUE(s.on_worker);
  EXPECT_LE(static_cast<double>(queried), elapsed_ms / 2.0 + 2.0)
      << "queries of a claimed lane closer together than the pace";
}

// Workers park (the spin window is tiny) while a wait is pending; the completion then
// comes from another thread. Notifying and non-notifying sources: the first wakes the
// parked poller through the waker, the second is found by its timed poll. If every worker
// parked without a timeout while a wait was pending, nothing would ever poll again: the
// round hangs and the CTest timeout fails the test.
void rounds_after_parking(bool notifies, std::size_t idle_spinners = static_cast<std::size_t>(-1)) {
  reactor_options o = without_thread();
  o.idle_spinners = idle_spinners;
  o.spin_window = 1us;
  o.park_poll = 200us;
  polled_pool p(3, notifies, o);
  for (std::uint64_t round = 0; round < 300; ++round) {
    std::thread completer([&] {
      while (p.reactor.pending() == 0) {
        std::this_thread::yield();
      }
      if (round % 3 == 0) {
        std::this_thread::sleep_for(300us); // let the workers park first (either way is valid)
      }
      p.source.complete(round);
    });
    const seen s = ca::sync_wait(await_on_pool(p, round, ca::priority::normal));
    completer.join();
    ASSERT_EQ(s.state, completion_state::done);
    ASSERT_TRUE(s.on_worker);
  }
}

TEST(IdlePolling, NoLostWakeUpWhenTheSourceNotifies) { rounds_after_parking(true); }

TEST(IdlePolling, NoLostWakeUpWhenTheSourceIsOnlyPolled) { rounds_after_parking(false); }

// With spinners capped at the pending waits, the workers beyond the cap park at once: the
// one allowed to spin (or the timed poller) must still find every completion.
TEST(IdlePolling, NoLostWakeUpWithSpinnersCappedAtThePendingWaits) {
  rounds_after_parking(false, 0);
  rounds_after_parking(true, 0);
}

TEST(IdlePolling, ADestroyedWaiterIsNeverResumed) {
  polled_pool p(2);
  std::atomic<int> resumed{0};
  auto body = [&]() -> ca::test::owned_coroutine {
    (void)co_await fake_wait(p.reactor, 9, 100);
    resumed.fetch_add(1);
  };
  for (int round = 0; round < 100; ++round) {
    ca::test::owned_coroutine c = body(); // suspended on the wait, no executor
    ASSERT_FALSE(c.done());
    c.handle.destroy(); // withdraws the wait (the workers may be polling right now)
  }
  EXPECT_EQ(p.reactor.pending(), 0u);
  p.source.complete(100);
  // A later wait on the same lane still completes: the withdrawn ones left nothing behind.
  const seen s = ca::sync_wait(await_on_pool(p, 100, ca::priority::normal));
  EXPECT_EQ(s.state, completion_state::done);
  EXPECT_EQ(resumed.load(), 0);
}

// A run_loop whose driver polls the reactor: with no pool and no reactor thread, the only
// thread that can find the completion is the loop's own. Without the loop's polling the
// round never completes (the CTest timeout fails the test). Rounds alternate between a
// completion found while the driver spins and one found after it stopped spinning and naps.
TEST(IdlePolling, ARunLoopDriverFindsItsOwnCompletionsWithNoOtherThreadPolling) {
  reactor_options o = without_thread();
  o.spin_window = 50us;
  o.park_poll = 200us;
  fake_completion_source source(false, false);
  completion_reactor reactor(source, o);
  source.attach(&reactor);
  ca::run_loop loop;
  loop.set_idle_source(&reactor);
  const std::thread::id driver = std::this_thread::get_id();
  for (std::uint64_t round = 0; round < 100; ++round) {
    std::thread completer([&] {
      while (reactor.pending() == 0) {
        std::this_thread::yield();
      }
      if (round % 2 == 1) {
        std::this_thread::sleep_for(1ms); // past the spin window: the driver naps first
      }
      source.complete(round);
    });
    const auto [st, exec, where] =
        loop.run([&]() -> ca::task<std::tuple<completion_state, ca::executor*, std::thread::id>> {
          const ca::completion_status s = co_await fake_wait(reactor, 1, round);
          co_return std::tuple{s.state, ca::current_executor(), std::this_thread::get_id()};
        }());
    completer.join();
    ASSERT_EQ(st, completion_state::done) << "round " << round;
    ASSERT_EQ(exec, &loop) << "round " << round;
    ASSERT_EQ(where, driver) << "round " << round;
  }
  loop.set_idle_source(nullptr);
}

//! Forwards to a source and counts the polls made through it.
class counting_source final : public ca::idle_source {
public:
  explicit counting_source(ca::idle_source& inner) : m_inner(inner) {}
  std::size_t poll_idle() noexcept override {
    polls.fetch_add(1);
    return m_inner.poll_idle();
  }
  [[nodiscard]] bool idle_keep_spinning() const noexcept override {
    return m_inner.idle_keep_spinning();
  }
  [[nodiscard]] std::size_t idle_spinners_wanted() const noexcept override {
    return m_inner.idle_spinners_wanted();
  }
  [[nodiscard]] bool idle_pending() const noexcept override { return m_inner.idle_pending(); }
  [[nodiscard]] std::chrono::nanoseconds idle_park_period() const noexcept override {
    return m_inner.idle_park_period();
  }
  void set_idle_waker(void (*fn)(void*) noexcept, void* context) noexcept override {
    m_inner.set_idle_waker(fn, context);
  }
  std::atomic<std::size_t> polls{0};

private:
  ca::idle_source& m_inner;
};

TEST(IdlePolling, ARunLoopPollsOnlyForItsOwnWaitsNotForThoseOfThePool) {
  // Wired like `runtime`: the pool's workers and the loop's driver poll one reactor. The
  // loop's coroutine moves to the pool and waits there: the pool's workers find those
  // completions, and the driver, with no wait of its own, never polls for them (a second
  // spinning thread would only slow the workers down). Then a wait of the loop's own is
  // found by the driver itself.
  polled_pool p(2);
  counting_source through_loop(p.reactor);
  ca::run_loop loop;
  loop.set_idle_source(&through_loop);
  std::atomic<int> nudges_run{0};
  for (std::uint64_t round = 0; round < 20; ++round) {
    std::thread completer([&] {
      while (p.reactor.pending() == 0) {
        std::this_thread::yield();
      }
      // Wake the driver while the pool's wait is pending (it went to sleep before the wait
      // was submitted), and give it time to poll if it were to: a driver that polls for
      // every pending wait fails the count below.
      [](ca::run_loop& l, std::atomic<int>& n) -> ca::test::detached {
        co_await l.schedule();
        n.fetch_add(1);
      }(loop, nudges_run);
      std::this_thread::sleep_for(2ms);
      p.source.complete(round);
    });
    const seen s = loop.run(await_on_pool(p, round, ca::priority::normal));
    completer.join();
    ASSERT_EQ(s.state, completion_state::done) << "round " << round;
    ASSERT_TRUE(s.on_worker) << "round " << round;
  }
  EXPECT_EQ(through_loop.polls.load(), 0U) << "the driver polled for the pool's waits";
  (void)loop.poll(); // a nudge posted as the last round ended
  EXPECT_EQ(nudges_run.load(), 20);

  std::thread completer([&] {
    while (p.reactor.pending() == 0) {
      std::this_thread::yield();
    }
    p.source.complete(1000);
  });
  const auto [st, exec] = loop.run([&]() -> ca::task<std::tuple<completion_state, ca::executor*>> {
    const ca::completion_status r = co_await fake_wait(p.reactor, 1, 1000);
    co_return std::tuple{r.state, ca::current_executor()};
  }());
  completer.join();
  EXPECT_EQ(st, completion_state::done);
  EXPECT_EQ(exec, &loop);
  loop.set_idle_source(nullptr);
}

// A run_loop whose queue never runs dry must still find the completions of its own waits:
// its driver polls once between two resumptions every busy-poll period
// (`CUAWAIT_BUSY_POLL_US`, 50 us by default), as a pool's busy workers do. With no pool and
// no reactor thread, only the driver can find the completion; before, it polled only when
// its queue was empty, which the busy coroutine never lets happen (it gives up after 20 s,
// turning that hang into a failure).
TEST(IdlePolling, ARunLoopThatNeverRunsOutOfWorkStillFindsItsCompletions) {
  fake_completion_source source(false, false);
  completion_reactor reactor(source, without_thread());
  source.attach(&reactor);
  ca::run_loop loop;
  loop.set_idle_source(&reactor);
  std::atomic<bool> resumed{false};
  std::atomic<bool> started{false};
  const auto busy = [&]() -> ca::task<bool> {
    started.store(true);
    const auto give_up = std::chrono::steady_clock::now() + 20s;
    while (!resumed.load()) {
      if (std::chrono::steady_clock::now() > give_up) {
        co_return false;
      }
      co_await loop.schedule(); // queued again: the driver never runs out of work
    }
    co_return true;
  };
  const auto waiter = [&]() -> ca::task<std::tuple<completion_state, ca::executor*>> {
    const ca::completion_status st = co_await fake_wait(reactor, 1, 4);
    resumed.store(true);
    co_return std::tuple{st.state, ca::current_executor()};
  };
  std::thread completer([&] {
    while (reactor.pending() == 0 || !started.load()) {
      std::this_thread::yield(); // the wait is pending and the driver is busy
    }
    source.complete(4);
  });
  const auto [w, b] = loop.run(ca::when_all(waiter(), busy()));
  completer.join();
  const auto [st, exec] = w;
  EXPECT_TRUE(b) << "the completion was found only once the loop ran dry";
  EXPECT_EQ(st, completion_state::done);
  EXPECT_EQ(exec, &loop);
  loop.set_idle_source(nullptr);
}

// A period that is not a number is refused by name when the executor is made, instead of
// being read as 0 (which would turn the busy poll off without a word).
TEST(IdlePolling, ABusyPollPeriodThatIsNotANumberIsRefusedByName) {
  const char* const before = std::getenv("CUAWAIT_BUSY_POLL_US");
  const std::string kept = before != nullptr ? before : "";
  ASSERT_EQ(setenv("CUAWAIT_BUSY_POLL_US", "50us", 1), 0);
  const auto message = [](auto make) {
    try {
      make();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("nothing thrown");
  };
  const std::string pool = message([] { ca::thread_pool p(1); });
  const std::string loop = message([] { ca::run_loop l; });
  if (before != nullptr) {
    (void)setenv("CUAWAIT_BUSY_POLL_US", kept.c_str(), 1);
  } else {
    (void)unsetenv("CUAWAIT_BUSY_POLL_US");
  }
  EXPECT_NE(pool.find("CUAWAIT_BUSY_POLL_US=50us"), std::string::npos) << pool;
  EXPECT_NE(loop.find("CUAWAIT_BUSY_POLL_US=50us"), std::string::npos) << loop;
  ca::thread_pool fine(1); // and a number is taken again
  fine.shutdown();
}

// A costly query (a driver call, as `cudaEventQuery` for an event marker) is made without the
// reactor's lock, by `submit` and by a sweep: with the lock held during it, every submission
// and sweep of other threads would wait for the driver. The query hook asks another thread to
// take the lock; under the lock that thread is still blocked 2 s later.
TEST(IdlePolling, ACostlyQueryIsMadeWithoutTheReactorsLock) {
  fake_completion_source source(false, false, true, true);
  completion_reactor reactor(source, without_thread());
  source.attach(&reactor);
  std::mutex m;
  std::vector<std::thread> takers;
  std::atomic<int> asked{0};
  std::atomic<int> under_lock{0};
  source.set_query_hook([&] {
    asked.fetch_add(1);
    auto took = std::make_shared<std::atomic<bool>>(false);
    {
      const std::lock_guard lock(m);
      takers.emplace_back([&reactor, took] {
        (void)reactor.lane_count(); // takes the reactor's lock
        took->store(true);
      });
    }
    const auto until = std::chrono::steady_clock::now() + 2s;
    while (!took->load() && std::chrono::steady_clock::now() < until) {
      std::this_thread::yield();
    }
    if (!took->load()) {
      under_lock.fetch_add(1);
    }
  });
  bool resumed = false;
  auto body = [&]() -> ca::test::owned_coroutine {
    const ca::completion_status st = co_await fake_wait(reactor, 1, 5);
    resumed = st.state == completion_state::done;
  };
  ca::test::owned_coroutine c = body(); // submit asks once: still running
  EXPECT_FALSE(resumed);
  EXPECT_EQ(reactor.pending(), 1U);
  source.complete(5);
  (void)reactor.poll(); // the sweep defers the query, asks, resolves, resumes inline
  EXPECT_TRUE(resumed);
  EXPECT_EQ(reactor.pending(), 0U);
  // An operation already finished when awaited: answered by submit's early query.
  source.complete(6);
  bool ready = false;
  auto again = [&]() -> ca::test::owned_coroutine {
    ready = (co_await fake_wait(reactor, 1, 6)).state == completion_state::done;
  };
  ca::test::owned_coroutine d = again();
  EXPECT_TRUE(ready);
  for (std::thread& t : takers) {
    t.join();
  }
  c.handle.destroy();
  d.handle.destroy();
  EXPECT_GE(asked.load(), 3);
  EXPECT_EQ(under_lock.load(), 0) << "asked about a costly wait with the reactor's lock held";
}

// While nothing finishes, a costly lane is asked about by the sweeps once per 1/50 of
// `stall_probe` (20 us by default), not at every poll: a thread polling over stalled event
// markers would otherwise make a driver call per lane per poll (measured: 16 event lanes
// cost 7-13 us per poll). Once its work finishes it is still found, within that pace.
TEST(IdlePolling, AStalledCostlyLaneIsAskedAboutOncePerPaceNotAtEveryPoll) {
  fake_completion_source source(false, false, true, true);
  completion_reactor reactor(source, without_thread()); // stall_probe 1 ms: a pace of 20 us
  source.attach(&reactor);
  bool resumed = false;
  auto body = [&]() -> ca::test::owned_coroutine {
    resumed = (co_await fake_wait(reactor, 1, 8)).state == completion_state::done;
  };
  ca::test::owned_coroutine c = body();
  ASSERT_EQ(reactor.pending(), 1U);
  const auto stalled_from = std::chrono::steady_clock::now() + 2ms; // past stall_probe
  while (std::chrono::steady_clock::now() < stalled_from) {
    (void)reactor.poll();
  }
  const std::uint64_t q0 = source.queries();
  std::uint64_t polls = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < 4ms) {
    (void)reactor.poll();
    ++polls;
  }
  const double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  const std::uint64_t asked = source.queries() - q0;
  // One ask per 20 us, plus a probe sweep (one per lane) at most every ms, plus slack.
  const double bound = us / 20.0 + us / 1000.0 + 5.0;
  EXPECT_LE(static_cast<double>(asked), bound) << polls << " polls in " << us << " us";
  EXPECT_GT(static_cast<double>(polls), 2.0 * bound) << "too few polls to tell (slow machine)";
  source.complete(8);
  const auto give_up = std::chrono::steady_clock::now() + 1s;
  while (!resumed && std::chrono::steady_clock::now() < give_up) {
    (void)reactor.poll();
  }
  EXPECT_TRUE(resumed) << "a paced costly lane was never asked about again";
  c.handle.destroy();
}

TEST(IdlePolling, DetachingTheSourceReturnsOnceNoWorkerUsesIt) {
  // Each round: a reactor polled by spinning workers is detached and destroyed at once;
  // TSan/ASan report any worker still inside it.
  ca::thread_pool pool(3);
  for (int round = 0; round < 50; ++round) {
    fake_completion_source source;
    auto reactor = std::make_unique<completion_reactor>(source, without_thread());
    reactor->set_idle_waker(&wake, &pool);
    pool.set_idle_source(reactor.get());
    const seen s = ca::sync_wait([&]() -> ca::task<seen> {
      co_await pool.schedule();
      std::thread completer([&] { source.complete(1); });
      const auto st = co_await fake_wait(*reactor, 1, 1);
      completer.join();
      co_return seen{ca::current_executor(), ca::current_priority(), pool.on_worker_thread(),
                     st.state};
    }());
    ASSERT_EQ(s.state, completion_state::done);
    pool.set_idle_source(nullptr);
    reactor->set_idle_waker(nullptr, nullptr);
    reactor.reset();
  }
}

//! `n` waits on `lanes` lanes of `p`, completed from another thread in a random order
//! (allowed: a lane's later wait is only asked once its head finished, exactly like a
//! stream). Each must resume once, done, on a pool worker.
void many_waits_in_random_order(polled_pool& p, std::uint64_t n, std::uint64_t lanes,
                                std::uint64_t seed) {
  std::atomic<std::uint64_t> sum{0};
  std::atomic<std::uint64_t> wrong{0};
  auto one = [&](std::uint64_t token) -> ca::task<void> {
    co_await p.pool.schedule();
    const auto st = co_await fake_wait(p.reactor, token % lanes, token);
    if (st.state != completion_state::done || !p.pool.on_worker_thread()) {
      wrong.fetch_add(1);
    }
    sum.fetch_add(token);
  };
  std::vector<ca::task<void>> all;
  all.reserve(n);
  for (std::uint64_t i = 0; i < n; ++i) {
    all.push_back(one(i));
  }
  std::thread completer([&] {
    std::vector<std::uint64_t> order(n);
    for (std::uint64_t i = 0; i < n; ++i) {
      order[i] = i;
    }
    std::shuffle(order.begin(), order.end(), std::mt19937_64(seed));
    for (const std::uint64_t t : order) {
      p.source.complete(t);
    }
  });
  ca::sync_wait(ca::when_all(std::move(all)));
  completer.join();
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_EQ(sum.load(), n * (n - 1) / 2);
  EXPECT_EQ(p.reactor.pending(), 0u);
  EXPECT_EQ(p.source.retired(), n);
}

TEST(IdlePolling, StressManyWaitsOnManyLanesCompletedInRandomOrder) {
  polled_pool p(4, true);
  many_waits_in_random_order(p, 20000, 64, 17);
}

// The same with lane watching: workers with one coroutine waiting watch its lane outside
// the lock while others sweep; every wait must still resolve exactly once.
TEST(IdlePolling, StressWithWorkersWatchingTheirOwnLanes) {
  reactor_options o = without_thread();
  o.own_lane_watch = true;
  polled_pool p(4, false, o, false, true);
  many_waits_in_random_order(p, 20000, 64, 23);
}

// The same with costly queries (event markers): sweeps claim the lanes and ask about their
// oldest waits after releasing the lock, while busy and idle workers sweep and watch their
// own lanes; every wait must still resolve exactly once, on its executor.
TEST(IdlePolling, StressWithCostlyQueriesAskedAfterTheLock) {
  reactor_options o = without_thread();
  o.own_lane_watch = true;
  polled_pool p(4, false, o, false, true, true);
  many_waits_in_random_order(p, 20000, 64, 29);
}

//! Many waits on many lanes, idle workers querying different lanes at once outside the
//! reactor's lock (a source that allows parallel queries, like event and stream polling).
TEST(IdlePolling, ParallelLanePollingResolvesEveryWaitOnceOnItsExecutor) {
  polled_pool p(6, false, without_thread(), true);
  many_waits_in_random_order(p, 20000, 16, 5);
}

//! A claimer queries a copy of a lane's oldest wait; when that wait is withdrawn and
//! another takes its place, the claimer's answer about the old one is never applied to the
//! new one.
TEST(IdlePolling, AnAnswerAboutAWithdrawnWaitIsNeverGivenToItsSuccessor) {
  reactor_options o = without_thread();
  o.claim_spin = std::chrono::milliseconds(2); // claimers hold their lane a long time
  o.stall_probe = std::chrono::seconds(10);    // and stay in parallel mode
  polled_pool p(3, false, o, true);
  for (std::uint64_t round = 0; round < 200; ++round) {
    const std::uint64_t old_token = 1'000'000 + 2 * round;
    const std::uint64_t new_token = old_token + 1;
    std::atomic<int> old_resumed{0};
    auto old_body = [&]() -> ca::test::owned_coroutine {
      (void)co_await fake_wait(p.reactor, 9, old_token);
      old_resumed.fetch_add(1);
    };
    ca::test::owned_coroutine old_wait = old_body();
    // Let a worker claim the lane and start querying the old wait.
    const std::uint64_t q0 = p.source.queries();
    while (p.source.queries() < q0 + 2) {
      std::this_thread::yield();
    }
    old_wait.handle.destroy(); // withdrawn while claimed
    p.source.complete(old_token);
    std::atomic<bool> new_done{false};
    std::thread waiter([&] {
      const auto st = ca::sync_wait([&]() -> ca::task<ca::completion_status> {
        co_return co_await fake_wait(p.reactor, 9, new_token);
      }());
      EXPECT_EQ(st.state, completion_state::done);
      new_done.store(true);
    });
    // The new wait is queried many times (by claimers) and must stay pending.
    const std::uint64_t q1 = p.source.queries();
    while (p.source.queries() < q1 + 50) {
      std::this_thread::yield();
    }
    EXPECT_FALSE(new_done.load()) << "round " << round;
    p.source.complete(new_token);
    waiter.join();
    EXPECT_TRUE(new_done.load());
    EXPECT_EQ(old_resumed.load(), 0);
  }
  EXPECT_EQ(p.reactor.pending(), 0u);
}

} // namespace
