// SPDX-License-Identifier: Apache-2.0
// The completion reactor driven by a fake completion source: ordering, cost per
// completion, many lanes, errors, withdrawal, shutdown, executors, threads.

#include "common/fake_completion_source.hpp"

#include "cuawait/cancellation.hpp"
#include "cuawait/completion_reactor.hpp"
#include "cuawait/executor.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <coroutine>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

namespace {

using cuawait::completion_reactor;
using cuawait::completion_state;
using cuawait::completion_status;
using cuawait::reactor_options;
using cuawait::test::fake_completion_source;
using cuawait::test::fake_wait;

//! What a waiting coroutine saw.
struct outcome {
  bool resumed = false;
  completion_status status{};
  std::thread::id thread{};
  cuawait::executor* exec = nullptr;
  cuawait::priority prio = cuawait::priority::normal;
  int order = -1; // position among resumptions, when a counter is given
};

//! An eagerly started coroutine that awaits one fake wait and records the outcome. The
//! owner destroys the frame (also while it is suspended, to test withdrawal).
class waiter {
public:
  struct promise_type {
    waiter get_return_object() {
      return waiter{std::coroutine_handle<promise_type>::from_promise(*this)};
    }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_always final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }
  };
  explicit waiter(std::coroutine_handle<promise_type> h) : m_h(h) {}
  waiter(waiter&& o) noexcept : m_h(std::exchange(o.m_h, {})) {}
  waiter& operator=(waiter&&) = delete;
  ~waiter() { destroy(); }
  void destroy() {
    if (m_h) {
      m_h.destroy();
      m_h = {};
    }
  }
  [[nodiscard]] bool done() const { return m_h && m_h.done(); }

private:
  std::coroutine_handle<promise_type> m_h;
};

std::atomic<int> g_order{0};

waiter wait_on(completion_reactor& r, std::uintptr_t lane, std::uint64_t token, outcome& out) {
  out.status = co_await fake_wait(r, lane, token);
  out.resumed = true;
  out.thread = std::this_thread::get_id();
  out.exec = cuawait::current_executor();
  out.prio = cuawait::current_priority();
  out.order = g_order.fetch_add(1);
}

waiter wait_on_bell(completion_reactor& r, std::uintptr_t lane, std::uint64_t token,
                    std::uint64_t* bell, outcome& out) {
  out.status = co_await fake_wait(r, lane, token, {}, bell);
  out.resumed = true;
  out.order = g_order.fetch_add(1);
}

//! Token of the i-th wait on lane l.
std::uint64_t tok(std::uint64_t l, std::uint64_t i) { return (l << 32) | i; }

reactor_options manual() {
  reactor_options o;
  o.start_thread = false;
  return o;
}

TEST(ReactorTest, ResumesEachLaneInOrderWhateverOrderWorkFinishesIn) {
  fake_completion_source src;
  completion_reactor r(src, manual());
  constexpr int lanes = 3, per_lane = 5;
  std::vector<outcome> out(lanes * per_lane);
  std::vector<waiter> ws;
  for (int l = 0; l < lanes; ++l) {
    for (int i = 0; i < per_lane; ++i) {
      ws.push_back(wait_on(r, l + 1, tok(l, i), out[l * per_lane + i]));
    }
  }
  EXPECT_EQ(r.pending(), std::size_t{lanes * per_lane});
  // Lane 0 finishes its last item first: nothing on lane 0 may resume before item 0 does.
  src.complete(tok(0, 4));
  r.poll();
  EXPECT_FALSE(out[4].resumed);
  std::vector<std::uint64_t> tokens;
  for (int l = 0; l < lanes; ++l) {
    for (int i = 0; i < per_lane; ++i) {
      tokens.push_back(tok(l, i));
    }
  }
  std::mt19937 rng(42);
  std::shuffle(tokens.begin(), tokens.end(), rng);
  for (const auto t : tokens) {
    src.complete(t);
    r.poll();
  }
  for (int l = 0; l < lanes; ++l) {
    for (int i = 0; i < per_lane; ++i) {
      const outcome& o = out[l * per_lane + i];
      ASSERT_TRUE(o.resumed) << "lane " << l << " item " << i;
      EXPECT_EQ(o.status.state, completion_state::done);
      if (i > 0) {
        EXPECT_LT(out[l * per_lane + i - 1].order, o.order) << "lane " << l << " item " << i;
      }
    }
  }
  EXPECT_EQ(r.pending(), 0U);
  EXPECT_EQ(src.retired(), std::uint64_t{lanes * per_lane});
}

TEST(ReactorTest, AlreadyFinishedWorkDoesNotSuspend) {
  fake_completion_source src;
  completion_reactor r(src, manual());
  src.complete(7);
  outcome o;
  auto w = wait_on(r, 1, 7, o);
  EXPECT_TRUE(o.resumed);
  EXPECT_EQ(o.status.state, completion_state::done);
  EXPECT_EQ(r.stats().submitted, 0U);
  EXPECT_EQ(src.retired(), 1U);
}

// The cost the reactor pays per completion must not grow with the number of waits pending.
TEST(ReactorTest, QueriesPerCompletionStayConstantFrom10To100000PendingWaits) {
  std::vector<double> ratios;
  for (const std::uint64_t n : {10, 100, 1000, 10000, 100000}) {
    fake_completion_source src;
    completion_reactor r(src, manual());
    const std::uint64_t lanes = std::min<std::uint64_t>(n, 100);
    std::vector<outcome> out(n);
    std::vector<waiter> ws;
    ws.reserve(n);
    for (std::uint64_t i = 0; i < n; ++i) {
      ws.push_back(wait_on(r, i % lanes + 1, tok(i % lanes, i / lanes), out[i]));
    }
    const std::uint64_t before = src.queries();
    // Finish work in rounds: each round completes a random prefix of each lane's remainder.
    std::mt19937 rng(7);
    std::vector<std::uint64_t> next(lanes, 0);
    const std::uint64_t per_lane = n / lanes;
    std::uint64_t completed = 0;
    while (completed < n) {
      for (std::uint64_t l = 0; l < lanes; ++l) {
        const std::uint64_t left = per_lane - next[l];
        const std::uint64_t k = left == 0 ? 0 : 1 + rng() % std::min<std::uint64_t>(left, 8);
        for (std::uint64_t j = 0; j < k; ++j) {
          src.complete(tok(l, next[l]++));
        }
        completed += k;
      }
      r.poll();
    }
    const double ratio = static_cast<double>(src.queries() - before) / static_cast<double>(n);
    ratios.push_back(ratio);
    EXPECT_EQ(r.pending(), 0U);
    EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](const outcome& o) { return o.resumed; }));
    EXPECT_LE(ratio, 2.0) << n << " waits";
  }
  EXPECT_LE(ratios.back(), ratios.front() * 1.5 + 0.01);
}

TEST(ReactorTest, ThousandsOfLanesWithAPollingThread) {
  fake_completion_source src(/*notifies=*/true);
  completion_reactor r(src);
  src.attach(&r);
  constexpr std::uint64_t lanes = 4000, per_lane = 3;
  std::vector<outcome> out(lanes * per_lane);
  std::vector<waiter> ws;
  std::vector<std::uint64_t> tokens;
  for (std::uint64_t i = 0; i < per_lane; ++i) {
    for (std::uint64_t l = 0; l < lanes; ++l) {
      ws.push_back(wait_on(r, l + 1, tok(l, i), out[i * lanes + l]));
      tokens.push_back(tok(l, i));
    }
  }
  std::thread completer([&] {
    std::mt19937 rng(3);
    std::shuffle(tokens.begin(), tokens.end(), rng);
    for (const auto t : tokens) {
      src.complete(t);
    }
  });
  completer.join();
  r.drain();
  for (const outcome& o : out) {
    ASSERT_TRUE(o.resumed);
    EXPECT_EQ(o.status.state, completion_state::done);
  }
  EXPECT_EQ(r.stats().completions, lanes * per_lane);
}

TEST(ReactorTest, AFailedOperationReachesItsAwaiterAndTheLaneGoesOn) {
  fake_completion_source src;
  completion_reactor r(src, manual());
  outcome a, b;
  auto wa = wait_on(r, 1, 1, a);
  auto wb = wait_on(r, 1, 2, b);
  src.complete(1, 77);
  src.complete(2);
  r.poll();
  ASSERT_TRUE(a.resumed && b.resumed);
  EXPECT_EQ(a.status.state, completion_state::failed);
  EXPECT_EQ(a.status.error, 77);
  EXPECT_EQ(b.status.state, completion_state::done);
  EXPECT_EQ(r.stats().failures, 1U);
}

TEST(ReactorTest, ALostContextFailsEveryPendingWaitOnEveryLane) {
  fake_completion_source src;
  completion_reactor r(src, manual());
  std::vector<outcome> out(20);
  std::vector<waiter> ws;
  for (std::uint64_t i = 0; i < out.size(); ++i) {
    ws.push_back(wait_on(r, i % 5 + 1, i, out[i]));
  }
  src.lose_context(700);
  r.poll();
  for (const outcome& o : out) {
    ASSERT_TRUE(o.resumed);
    EXPECT_EQ(o.status.state, completion_state::context_lost);
    EXPECT_EQ(o.status.error, 700);
  }
  EXPECT_EQ(r.pending(), 0U);
}

// Regression: a wait that finds the context lost at submission (its own work faulted)
// must fail the waits pending on other lanes too, which may never report the loss.
TEST(ReactorTest, ALostContextSeenAtSubmissionFailsTheOtherLanes) {
  fake_completion_source src;
  completion_reactor r(src, manual());
  outcome a, b;
  auto wa = wait_on(r, 1, 1, a);
  src.lose_context(700);
  auto wb = wait_on(r, 2, 2, b);
  EXPECT_TRUE(b.resumed);
  EXPECT_EQ(b.status.state, completion_state::context_lost);
  r.poll();
  ASSERT_TRUE(a.resumed);
  EXPECT_EQ(a.status.state, completion_state::context_lost);
  EXPECT_EQ(a.status.error, 700);
}

TEST(ReactorTest, ADestroyedWaitingCoroutineIsWithdrawnAndNeverResumed) {
  fake_completion_source src;
  completion_reactor r(src, manual());
  outcome a, b, c;
  auto wa = wait_on(r, 1, 1, a);
  auto wb = wait_on(r, 1, 2, b);
  auto wc = wait_on(r, 1, 3, c);
  wb.destroy();
  EXPECT_EQ(r.pending(), 2U);
  src.complete(1);
  src.complete(2);
  src.complete(3);
  r.poll();
  EXPECT_TRUE(a.resumed);
  EXPECT_FALSE(b.resumed);
  EXPECT_TRUE(c.resumed);
  EXPECT_EQ(r.stats().withdrawn, 1U);
  EXPECT_EQ(src.retired(), 3U);
  // The oldest of a lane can be withdrawn too; the next becomes the oldest.
  outcome d, e;
  auto wd = wait_on(r, 2, 10, d);
  auto we = wait_on(r, 2, 11, e);
  wd.destroy();
  src.complete(11);
  r.poll();
  EXPECT_TRUE(e.resumed);
}

TEST(ReactorTest, ShutdownWithWaitsPendingCancelsThemAndLeaksNothing) {
  fake_completion_source src;
  std::vector<outcome> out(10);
  std::vector<waiter> ws;
  {
    completion_reactor r(src);
    for (std::uint64_t i = 0; i < out.size(); ++i) {
      ws.push_back(wait_on(r, i % 3 + 1, i, out[i]));
    }
  }
  for (const outcome& o : out) {
    ASSERT_TRUE(o.resumed);
    EXPECT_EQ(o.status.state, completion_state::cancelled);
  }
  EXPECT_EQ(src.retired(), out.size());
  EXPECT_TRUE(std::all_of(ws.begin(), ws.end(), [](const waiter& w) { return w.done(); }));
}

//! An executor whose queue the test runs by hand.
class manual_executor final : public cuawait::executor {
public:
  void post(std::coroutine_handle<> h, cuawait::priority p) noexcept override {
    const std::lock_guard lock(m_mutex);
    m_queue.emplace_back(h, p);
  }
  std::size_t run() {
    std::deque<std::pair<std::coroutine_handle<>, cuawait::priority>> q;
    {
      const std::lock_guard lock(m_mutex);
      q.swap(m_queue);
    }
    for (auto [h, p] : q) {
      const cuawait::executor_scope scope(this, p);
      h.resume();
    }
    return q.size();
  }

private:
  std::mutex m_mutex;
  std::deque<std::pair<std::coroutine_handle<>, cuawait::priority>> m_queue;
};

TEST(ReactorTest, ResumesOnTheSuspendingExecutorWithItsPriority) {
  fake_completion_source src;
  completion_reactor r(src, manual());
  manual_executor ex;
  outcome o;
  std::optional<waiter> w;
  {
    const cuawait::executor_scope scope(&ex, cuawait::priority::high);
    w.emplace(wait_on(r, 1, 1, o));
  }
  src.complete(1);
  r.poll();
  EXPECT_FALSE(o.resumed) << "must be posted to its executor, not resumed by the poller";
  EXPECT_EQ(ex.run(), 1U);
  ASSERT_TRUE(o.resumed);
  EXPECT_EQ(o.exec, &ex);
  EXPECT_EQ(o.prio, cuawait::priority::high);
  const auto s = r.stats();
  std::uint64_t recorded = 0;
  for (const auto c : s.resume_latency) {
    recorded += c;
  }
  EXPECT_EQ(recorded, 1U);
}

TEST(ReactorTest, WithoutAnExecutorResumesInlineOnThePollingThread) {
  fake_completion_source src(true);
  completion_reactor r(src);
  src.attach(&r);
  outcome o;
  auto w = wait_on(r, 1, 1, o);
  src.complete(1);
  r.drain();
  ASSERT_TRUE(o.resumed);
  EXPECT_NE(o.thread, std::this_thread::get_id());
  EXPECT_EQ(o.exec, nullptr);
}

TEST(ReactorTest, StatsCountPendingWaitsPerLane) {
  fake_completion_source src;
  completion_reactor r(src, manual());
  std::vector<outcome> out(5);
  std::vector<waiter> ws;
  for (std::uint64_t i = 0; i < 5; ++i) {
    ws.push_back(wait_on(r, i < 3 ? 1 : 2, i, out[i]));
  }
  auto s = r.stats();
  EXPECT_EQ(s.pending, 5U);
  ASSERT_EQ(s.lanes.size(), 2U);
  std::sort(s.lanes.begin(), s.lanes.end(),
            [](const auto& a, const auto& b) { return a.lane_key < b.lane_key; });
  EXPECT_EQ(s.lanes[0].waits, 3U);
  EXPECT_EQ(s.lanes[1].waits, 2U);
  r.cancel_all();
}

// The load counters the doctor reads: peaks, waits per lane, ready waits, completions
// found after the spin window, and integrals that obey their invariants.
TEST(ReactorTest, StatsMeasureTheLoadOverTime) {
  fake_completion_source src;
  reactor_options o = manual();
  o.spin_window = std::chrono::nanoseconds(0); // pollers are told to park at once
  completion_reactor r(src, o);
  std::vector<outcome> out(6);
  std::vector<waiter> ws;
  for (std::uint64_t i = 0; i < 5; ++i) {
    ws.push_back(wait_on(r, i < 3 ? 1 : 2, i, out[i]));
  }
  src.complete(99);
  ws.push_back(wait_on(r, 3, 99, out[5])); // finished already: no suspension
  EXPECT_TRUE(out[5].resumed);
  r.poll();
  EXPECT_FALSE(r.idle_keep_spinning()); // a poller asks, and is told to park
  for (std::uint64_t i = 0; i < 5; ++i) {
    src.complete(i);
  }
  EXPECT_EQ(r.poll(), 5U); // what it finds now was seen after the spin window
  auto s = r.stats();
  EXPECT_EQ(s.submitted, 5U);
  EXPECT_EQ(s.ready, 1U);
  EXPECT_EQ(s.completions, 5U);
  EXPECT_EQ(s.completions_after_spin, 5U);
  EXPECT_EQ(s.peak_pending, 5U);
  EXPECT_EQ(s.peak_busy_lanes, 2U);
  EXPECT_EQ(s.lanes_created, 3U); // lane 3 was made for the ready wait's query
  std::sort(s.lane_waits.begin(), s.lane_waits.end(),
            [](const auto& a, const auto& b) { return a.lane_key < b.lane_key; });
  ASSERT_EQ(s.lane_waits.size(), 3U);
  EXPECT_EQ(s.lane_waits[0].waits, 3U);
  EXPECT_EQ(s.lane_waits[1].waits, 2U);
  EXPECT_EQ(s.lane_waits[2].waits, 0U);
  // Busy lanes never exceed pending waits, which are at most 5 while anything is pending.
  EXPECT_LE(s.busy_ns, s.age_ns);
  EXPECT_LE(s.busy_lane_ns, s.pending_wait_ns);
  EXPECT_LE(s.pending_wait_ns, 5 * s.busy_ns);
  EXPECT_LE(s.busy_ns, s.busy_lane_ns);
  // Nothing pending now: the integrals stay where they are.
  const auto later = r.stats();
  EXPECT_EQ(later.busy_ns, s.busy_ns);
  EXPECT_EQ(later.pending_wait_ns, s.pending_wait_ns);
}

TEST(ReactorTest, TracingHooksSeeSuspendCompleteResumeAndWithdraw) {
  fake_completion_source src;
  completion_reactor r(src, manual());
  struct counts {
    int suspend = 0, complete = 0, resume = 0, withdraw = 0;
  } c;
  cuawait::reactor_trace t;
  t.context = &c;
  t.on_suspend = [](void* p, const cuawait::detail::wait_node&) {
    ++static_cast<counts*>(p)->suspend;
  };
  t.on_complete = [](void* p, const cuawait::detail::wait_node&) {
    ++static_cast<counts*>(p)->complete;
  };
  t.on_resume = [](void* p, const cuawait::detail::wait_node&) {
    ++static_cast<counts*>(p)->resume;
  };
  t.on_withdraw = [](void* p, const cuawait::detail::wait_node&) {
    ++static_cast<counts*>(p)->withdraw;
  };
  r.set_trace(t);
  outcome a, b;
  auto wa = wait_on(r, 1, 1, a);
  auto wb = wait_on(r, 2, 2, b);
  wb.destroy();
  src.complete(1);
  r.poll();
  EXPECT_EQ(c.suspend, 2);
  EXPECT_EQ(c.complete, 1);
  EXPECT_EQ(c.resume, 1);
  EXPECT_EQ(c.withdraw, 1);
}

// Many threads suspend coroutines while another completes work and the reactor's thread
// resumes them (parking and waking as it goes): every wait resumes exactly once.
// With bells, the completer rings lane t's bell (shared by two lanes) after each completion.
TEST(ReactorTest, StressSubmittersCompleterAndPollerInParallel) {
  for (const auto& [notifies, bells] : {std::pair{false, false}, {true, false}, {false, true}}) {
    fake_completion_source src(notifies);
    reactor_options opts;
    opts.spin_window = std::chrono::microseconds(50); // park often
    opts.park_poll = std::chrono::microseconds(100);
    if (bells) {
      opts.stall_probe = std::chrono::hours(1); // probes sweep every lane: none here
    }
    completion_reactor r(src, opts);
    src.attach(&r);
    constexpr int threads = 4, per_thread = 500;
    std::vector<std::uint64_t> bell(2, 0);
    const auto bell_of = [&](int t) { return bells ? &bell[t % 2] : nullptr; };
    std::vector<outcome> out(threads * per_thread);
    std::vector<std::vector<waiter>> ws(threads);
    std::vector<std::thread> submitters;
    for (int t = 0; t < threads; ++t) {
      submitters.emplace_back([&, t] {
        for (int i = 0; i < per_thread; ++i) {
          ws[t].push_back(wait_on_bell(r, static_cast<std::uintptr_t>(t + 1), tok(t, i), bell_of(t),
                                       out[t * per_thread + i]));
        }
      });
    }
    std::thread completer([&] {
      for (int i = 0; i < per_thread; ++i) {
        for (int t = 0; t < threads; ++t) {
          src.complete(tok(t, i));
          if (bells) {
            cuawait::test::ring(bell[t % 2]);
          }
        }
      }
    });
    for (auto& s : submitters) {
      s.join();
    }
    completer.join();
    r.drain();
    for (const outcome& o : out) {
      ASSERT_TRUE(o.resumed);
      EXPECT_EQ(o.status.state, completion_state::done);
    }
    const auto s = r.stats();
    EXPECT_EQ(s.completions + (threads * per_thread - s.submitted),
              std::uint64_t{threads * per_thread});
  }
}

} // namespace

namespace {

const void* lane_key_of(std::uintptr_t lane) { return reinterpret_cast<const void*>(lane); }

TEST(ReactorTest, ForgottenIdleLanesAreRemovedAndBusyOnesKept) {
  fake_completion_source src;
  completion_reactor r(src, manual());
  // 10,000 lanes used once each and forgotten (streams created, awaited, destroyed): the
  // table does not grow.
  for (std::uintptr_t lane = 1; lane <= 10'000; ++lane) {
    outcome o;
    auto w = wait_on(r, lane, lane, o);
    src.complete(lane);
    r.poll();
    ASSERT_TRUE(o.resumed);
    EXPECT_TRUE(r.forget_lane(lane_key_of(lane)));
  }
  EXPECT_EQ(r.lane_count(), 0U);
  // A lane with a wait pending is kept, and its wait still resolves.
  outcome busy;
  auto wb = wait_on(r, 77'777, 1'000'000, busy);
  EXPECT_FALSE(r.forget_lane(lane_key_of(77'777)));
  EXPECT_EQ(r.lane_count(), 1U);
  src.complete(1'000'000);
  r.poll();
  EXPECT_TRUE(busy.resumed);
  EXPECT_TRUE(r.forget_lane(lane_key_of(77'777)));
  // A lane emptied by a withdrawal (still listed as active until a sweep) is removed too,
  // and a later poll does not touch it.
  outcome gone;
  auto wg = wait_on(r, 5, 2'000'000, gone);
  wg.destroy();
  EXPECT_TRUE(r.forget_lane(lane_key_of(5)));
  EXPECT_EQ(r.lane_count(), 0U);
  EXPECT_EQ(r.poll(), 0U);
  EXPECT_FALSE(r.forget_lane(lane_key_of(123))); // never seen
}

} // namespace

namespace {

waiter stop_aware_wait(completion_reactor& r, std::uintptr_t lane, std::uint64_t token,
                       int& cancelled) {
  try {
    (void)co_await fake_wait(r, lane, token);
  } catch (const cuawait::operation_cancelled&) {
    ++cancelled;
  }
}

TEST(ReactorTest, StopAllEndsEveryPendingWaitAsAStopRequest) {
  fake_completion_source src;
  completion_reactor r(src, manual());
  int cancelled = 0;
  std::vector<waiter> ws;
  ws.reserve(1000);
  for (std::uintptr_t i = 0; i < 1000; ++i) {
    ws.push_back(stop_aware_wait(r, 1 + i % 10, 1 + i, cancelled));
  }
  EXPECT_EQ(r.pending(), 1000U);
  EXPECT_EQ(r.stop_all(), 1000U); // no executor: each resumes inline here
  EXPECT_EQ(r.pending(), 0U);
  EXPECT_EQ(cancelled, 1000); // reported as a stop request, not as a shutdown
  for (const waiter& w : ws) {
    EXPECT_TRUE(w.done());
  }
  // The reactor goes on: a later wait completes normally.
  outcome later;
  auto w = wait_on(r, 3, 5000, later);
  src.complete(5000);
  r.poll();
  EXPECT_TRUE(later.resumed);
  EXPECT_EQ(later.status.state, completion_state::done);
}

} // namespace

namespace {

//! Nothing ever finishes by `query`; `probe` costs `probe_cost` of busy CPU time (like one
//! driver call per lane over thousands of stalled lanes) and finds the failure once `broken`.
class costly_probe_source final : public cuawait::completion_source {
public:
  explicit costly_probe_source(std::chrono::nanoseconds probe_cost) : m_cost(probe_cost) {}
  completion_status query(const cuawait::detail::wait_node&) noexcept override { return {}; }
  completion_status probe(const cuawait::detail::wait_node&) noexcept override {
    m_probes.fetch_add(1);
    const auto until = std::chrono::steady_clock::now() + m_cost;
    while (std::chrono::steady_clock::now() < until) {
    }
    return m_broken.load() ? completion_status{completion_state::failed, 700} : completion_status{};
  }
  void breaks() { m_broken.store(true); }
  [[nodiscard]] int probes() const { return m_probes.load(); }

private:
  std::chrono::nanoseconds m_cost;
  std::atomic<int> m_probes{0};
  std::atomic<bool> m_broken{false};
};

// A stalled poller probes for errors, but a probe that costs more than the stall interval
// must not make every poll a probe (thousands of stalled streams: a driver call each). Probes
// cost 2 ms here against a stall interval of 0.1 ms, over 120 ms of polling: a probe at every
// poll would be about 60; at most a tenth of the time is about 6. A failure is still found.
TEST(ReactorTest, ProbesOfStalledLanesTakeAtMostATenthOfThePollersTime) {
  costly_probe_source src(std::chrono::milliseconds(2));
  reactor_options o = manual();
  o.stall_probe = std::chrono::microseconds(100);
  completion_reactor r(src, o);
  outcome stuck;
  auto w = wait_on(r, 1, 1, stuck);
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(120)) {
    r.poll();
  }
  EXPECT_GE(src.probes(), 2) << "a stalled lane must still be probed";
  EXPECT_LE(src.probes(), 12) << "probes took more than about a tenth of the polling time";
  EXPECT_FALSE(stuck.resumed);
  src.breaks();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!stuck.resumed && std::chrono::steady_clock::now() < deadline) {
    r.poll();
  }
  ASSERT_TRUE(stuck.resumed) << "the failure found by a probe never reached the waiter";
  EXPECT_EQ(stuck.status.state, completion_state::failed);
  EXPECT_EQ(stuck.status.error, 700);
}

} // namespace

namespace {

using cuawait::test::ring;

reactor_options manual_no_probe() {
  reactor_options o = manual();
  o.stall_probe = std::chrono::hours(1); // probes query every lane: none in these tests
  return o;
}

// 1,024 stalled lanes in 16 groups of 64, one bell per group (a GPU-written doorbell): while
// no bell rings a poll queries nothing, and a ring costs the queries of its own group only.
TEST(ReactorTest, ASweepQueriesOnlyTheLanesOfBellsThatRang) {
  fake_completion_source src;
  completion_reactor r(src, manual_no_probe());
  constexpr int groups = 16, per_group = 64, lanes = groups * per_group;
  std::vector<std::uint64_t> bells(groups, 0);
  std::vector<outcome> out(lanes);
  std::vector<waiter> ws;
  for (int l = 0; l < lanes; ++l) {
    ws.push_back(wait_on_bell(r, l + 1, tok(l, 0), &bells[l / per_group], out[l]));
  }
  r.poll(); // new groups are swept once
  const std::uint64_t before = src.queries();
  for (int i = 0; i < 100; ++i) {
    r.poll();
  }
  EXPECT_EQ(src.queries(), before) << "polls of stalled lanes whose bells are quiet query them";

  // Work of lane 200 (group 3) finishes and rings: found by querying group 3 only.
  src.complete(tok(200, 0));
  ring(bells[3]);
  EXPECT_EQ(r.poll(), 1U);
  EXPECT_TRUE(out[200].resumed);
  EXPECT_EQ(src.queries() - before, std::uint64_t{per_group});

  // Each lane finishes in a random order, each ring followed by a poll: every waiter resumes
  // done, and the queries stay within one group per ring.
  std::vector<int> order;
  for (int l = 0; l < lanes; ++l) {
    if (l != 200) {
      order.push_back(l);
    }
  }
  std::mt19937 rng(7);
  std::shuffle(order.begin(), order.end(), rng);
  const std::uint64_t start = src.queries();
  for (const int l : order) {
    src.complete(tok(l, 0));
    ring(bells[l / per_group]);
    r.poll();
    ASSERT_TRUE(out[l].resumed) << "lane " << l;
    EXPECT_EQ(out[l].status.state, completion_state::done);
  }
  EXPECT_LE(src.queries() - start, order.size() * per_group);
  EXPECT_EQ(r.pending(), 0U);
}

// Waits submitted stream by stream in turn (a job per stream, again and again) that all
// finished before a poll resume in turn too: each stream's oldest first, then each one's
// next, never one stream's whole backlog before another stream's first wait. Lanes of
// unequal depth, with and without bells, and one lane whose third wait is still running.
TEST(ReactorTest, WaitsFinishedTogetherResumeRoundByRoundAcrossLanes) {
  for (const bool bells : {false, true}) {
    fake_completion_source src;
    completion_reactor r(src, manual_no_probe());
    constexpr int lanes = 4;
    const int depth[lanes] = {5, 1, 3, 4};
    std::uint64_t bell = 0;
    std::vector<outcome> out(lanes * 5);
    std::vector<waiter> ws;
    std::vector<int> submitted; // places in `out`, in the order submitted
    for (int i = 0; i < 5; ++i) {
      for (int l = 0; l < lanes; ++l) {
        if (i < depth[l]) {
          const int k = l * 5 + i;
          ws.push_back(bells ? wait_on_bell(r, l + 1, tok(l, i), &bell, out[k])
                             : wait_on(r, l + 1, tok(l, i), out[k]));
          submitted.push_back(k);
        }
      }
    }
    for (const int k : submitted) {
      if (k != 3 * 5 + 2) { // lane 3's third wait runs on
        src.complete(tok(k / 5, k % 5));
      }
    }
    ring(bell);
    r.poll();
    std::vector<int> resumed; // places in `out`, in the order resumed
    for (const int k : submitted) {
      if (out[k].resumed) {
        resumed.push_back(k);
      }
    }
    std::vector<int> expected;
    for (const int k : submitted) {
      if (k % 5 < 2 || k / 5 != 3) {
        expected.push_back(k);
      }
    }
    EXPECT_EQ(resumed, expected) << "which waits resumed";
    // Round by round: a lane's (i+1)-th wait never before another lane's i-th. (Within a
    // round the lanes' order is the reactor's.)
    std::sort(resumed.begin(), resumed.end(),
              [&](int a, int b) { return out[a].order < out[b].order; });
    for (std::size_t j = 1; j < resumed.size(); ++j) {
      EXPECT_LE(resumed[j - 1] % 5, resumed[j] % 5)
          << "wait " << resumed[j - 1] % 5 << " of lane " << resumed[j - 1] / 5
          << " resumed after wait " << resumed[j] % 5 << " of lane " << resumed[j] / 5
          << (bells ? " (with a bell)" : " (without bells)");
    }
    src.complete(tok(3, 2));
    ring(bell);
    r.poll();
    EXPECT_TRUE(out[3 * 5 + 3].resumed);
    EXPECT_EQ(r.pending(), 0U);
  }
}

// Finished work whose bell already rang while an older wait of its lane was pending: when the
// older one leaves without a ring (a withdrawal), the newer one is still found.
TEST(ReactorTest, AWaitBehindAWithdrawnOneIsFoundWithoutANewRing) {
  fake_completion_source src;
  completion_reactor r(src, manual_no_probe());
  std::uint64_t bell = 0;
  outcome first, second;
  auto w0 = wait_on_bell(r, 1, tok(1, 0), &bell, first);
  auto w1 = wait_on_bell(r, 1, tok(1, 1), &bell, second);
  src.complete(tok(1, 1));
  ring(bell);
  r.poll(); // the ring is seen; the lane's oldest wait is still pending
  EXPECT_FALSE(second.resumed);
  w0.destroy(); // withdrawn
  r.poll();
  EXPECT_TRUE(second.resumed) << "the wait behind a withdrawn one hangs until another ring";
}

// A lane whose waits ring different bells, or none (a stream whose markers change kind): each
// wait is found by the bell it names, in lane order, whatever order the work finishes in.
TEST(ReactorTest, ALaneMovesBetweenBellsAsItsOldestWaitChanges) {
  fake_completion_source src;
  completion_reactor r(src, manual_no_probe());
  std::vector<std::uint64_t> bells(3, 0);
  constexpr int lanes = 4, per_lane = 6;
  // Wait i of lane l rings bell (l + i) % 4, where 3 means no bell.
  const auto bell_of = [&](int l, int i) -> std::uint64_t* {
    const int b = (l + i) % 4;
    return b == 3 ? nullptr : &bells[b];
  };
  std::vector<outcome> out(lanes * per_lane);
  std::vector<waiter> ws;
  for (int l = 0; l < lanes; ++l) {
    for (int i = 0; i < per_lane; ++i) {
      ws.push_back(wait_on_bell(r, l + 1, tok(l, i), bell_of(l, i), out[l * per_lane + i]));
    }
  }
  std::vector<std::pair<int, int>> order;
  for (int l = 0; l < lanes; ++l) {
    for (int i = 0; i < per_lane; ++i) {
      order.emplace_back(l, i);
    }
  }
  std::mt19937 rng(11);
  std::shuffle(order.begin(), order.end(), rng);
  for (const auto& [l, i] : order) {
    src.complete(tok(l, i));
    if (std::uint64_t* b = bell_of(l, i)) {
      ring(*b);
    }
    r.poll();
  }
  for (int l = 0; l < lanes; ++l) {
    for (int i = 0; i < per_lane; ++i) {
      const outcome& o = out[l * per_lane + i];
      ASSERT_TRUE(o.resumed) << "lane " << l << " wait " << i;
      if (i > 0) {
        EXPECT_LT(out[l * per_lane + i - 1].order, o.order) << "lane " << l << " wait " << i;
      }
    }
  }
  EXPECT_EQ(r.pending(), 0U);
}

} // namespace
