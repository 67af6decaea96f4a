// SPDX-License-Identifier: Apache-2.0
// trace_recorder driven by a completion reactor over the fake completion source: the
// trace it writes is read back and checked by the structure checker (tools/trace_check),
// with a reactor polled by hand and with a thread_pool whose idle workers poll it. Also
// sampling, the memory bound, and that the checker does fail on broken traces.

#include "common/fake_completion_source.hpp"
#include "common/owned_coroutine.hpp"
#include "trace_check/trace_check.hpp"

#include <cuawait/completion_reactor.hpp>
#include <cuawait/sync_wait.hpp>
#include <cuawait/task.hpp>
#include <cuawait/thread_pool.hpp>
#include <cuawait/trace_recorder.hpp>
#include <cuawait/wait_observer.hpp>
#include <cuawait/when_all.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace ca = cuawait;
using ca::completion_reactor;
using ca::completion_state;
using ca::reactor_options;
using ca::test::fake_completion_source;
using ca::test::fake_wait;
using ca::test::owned_coroutine;

reactor_options without_thread() {
  reactor_options o;
  o.start_thread = false;
  return o;
}

std::string json_of(const ca::trace_recorder& rec) {
  std::ostringstream out;
  rec.write_json(out);
  return out.str();
}

std::string problems(const ca::tools::trace_check_result& r) {
  std::string s;
  for (const auto& p : r.problems) {
    s += p + "\n";
  }
  return s;
}

//! A recorder installed on a reactor for the scope's lifetime.
struct traced {
  traced(completion_reactor& r, ca::trace_options o = {}) : reactor(r), recorder(o) {
    observers.add(recorder);
    observers.install(reactor);
  }
  ~traced() { reactor.set_trace({}); }
  completion_reactor& reactor;
  ca::trace_recorder recorder;
  ca::observer_set observers;
};

owned_coroutine await_one(completion_reactor& r, std::uintptr_t lane, std::uint64_t token,
                          completion_state& out) {
  out = (co_await fake_wait(r, lane, token)).state;
}

TEST(TraceRecorder, ManualReactorEveryKindOfWait) {
  fake_completion_source src;
  completion_reactor r(src, without_thread());
  traced t(r);
  t.recorder.name_lane(reinterpret_cast<const void*>(std::uintptr_t{1}), "stream one");

  src.complete(100); // finished before it is awaited: no suspension
  std::vector<completion_state> st(6, completion_state::pending);
  auto ready = await_one(r, 3, 100, st[0]);
  auto a = await_one(r, 1, 1, st[1]);
  auto b = await_one(r, 1, 2, st[2]); // behind a on lane 1
  auto c = await_one(r, 2, 3, st[3]);
  auto d = await_one(r, 2, 4, st[4]); // withdrawn
  auto e = await_one(r, 1, 5, st[5]); // fails
  EXPECT_TRUE(ready.done());
  d.handle.destroy();
  src.complete(2);
  src.complete(3);
  src.complete(1);
  src.complete(5, 77);
  r.drain();
  EXPECT_EQ(st[1], completion_state::done);
  EXPECT_EQ(st[5], completion_state::failed);

  const std::string json = json_of(t.recorder);
  const auto res = ca::tools::check_trace(json);
  EXPECT_TRUE(res.ok()) << problems(res) << json;
  EXPECT_EQ(res.thread_tracks, 1u); // this thread suspended, polled and resumed everything
  EXPECT_EQ(res.lane_tracks, 2u);
  EXPECT_EQ(res.waits, 5u);
  EXPECT_EQ(res.resumed, 4u);
  EXPECT_EQ(res.withdrawn, 1u);
  EXPECT_EQ(res.ready, 1u);
  EXPECT_EQ(res.unfinished, 0u);
  EXPECT_EQ(res.flows, 2u * 4u + 1u); // two per resumed wait, one for the withdrawn one
  EXPECT_NE(std::find(res.lane_names.begin(), res.lane_names.end(), "stream one"),
            res.lane_names.end());
  EXPECT_NE(json.find("\"status\":\"failed\",\"suspended_at\""), std::string::npos);
  EXPECT_NE(json.find("\"error\":77"), std::string::npos);
  for (auto* h : {&ready, &a, &b, &c, &e}) {
    h->handle.destroy();
  }
}

TEST(TraceRecorder, AWaitStillPendingIsMarkedAndTheTraceStaysValid) {
  fake_completion_source src;
  completion_reactor r(src, without_thread());
  traced t(r);
  completion_state s1 = completion_state::pending, s2 = completion_state::pending;
  auto a = await_one(r, 1, 1, s1);
  auto b = await_one(r, 2, 2, s2);
  src.complete(2);
  r.poll(); // b resumes; a still waits
  const auto res = ca::tools::check_trace(json_of(t.recorder));
  EXPECT_TRUE(res.ok()) << problems(res);
  EXPECT_EQ(res.waits, 2u);
  EXPECT_EQ(res.resumed, 1u);
  EXPECT_EQ(res.unfinished, 1u);
  src.complete(1);
  r.drain();
  a.handle.destroy();
  b.handle.destroy();
}

void wake(void* pool) noexcept { static_cast<ca::thread_pool*>(pool)->wake_idle_poller(); }

//! A pool polling a thread-less reactor over a fake source, wired like `runtime` does, and
//! traced.
struct polled_pool {
  explicit polled_pool(std::size_t threads, ca::trace_options o = {})
      : reactor(source, without_thread()), pool(threads), trace(reactor, o) {
    trace.recorder.name_executor(&pool, "pool");
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
  traced trace;
};

//! Runs `n` coroutines on `p`'s pool, each awaiting `per_task` fake waits spread over
//! `lanes` lanes; in each round another thread completes the round's waits in random order
//! once all `n` coroutines wait (so most waits suspend). Returns the threads that
//! suspended or resumed a coroutine.
std::set<std::thread::id> run_on_pool(polled_pool& p, std::uint64_t n, std::uint64_t per_task,
                                      std::uint64_t lanes) {
  std::mutex m;
  std::set<std::thread::id> ran;
  auto note = [&] {
    const std::lock_guard lock(m);
    ran.insert(std::this_thread::get_id());
  };
  auto one = [&](std::uint64_t task) -> ca::task<void> {
    co_await p.pool.schedule();
    for (std::uint64_t k = 0; k < per_task; ++k) {
      const std::uint64_t token = k * n + task;
      note();
      (void)co_await fake_wait(p.reactor, 1 + token % lanes, token);
      note();
    }
  };
  std::vector<ca::task<void>> all;
  for (std::uint64_t i = 0; i < n; ++i) {
    all.push_back(one(i));
  }
  std::thread completer([&] {
    std::mt19937_64 rng(5);
    for (std::uint64_t k = 0; k < per_task; ++k) {
      while (p.reactor.pending() < n) {
        std::this_thread::yield(); // until every coroutine waits on this round
      }
      std::vector<std::uint64_t> order(n);
      for (std::uint64_t i = 0; i < n; ++i) {
        order[i] = k * n + i;
      }
      std::shuffle(order.begin(), order.end(), rng);
      for (const std::uint64_t tok : order) {
        p.source.complete(tok);
      }
    }
  });
  ca::sync_wait(ca::when_all(std::move(all)));
  completer.join();
  return ran;
}

TEST(TraceRecorder, PoolPollingTheReactorOneTrackPerThreadAndPerLane) {
  polled_pool p(3);
  const auto ran = run_on_pool(p, 40, 5, 4);
  const auto res = ca::tools::check_trace(json_of(p.trace.recorder));
  EXPECT_TRUE(res.ok()) << problems(res);
  EXPECT_EQ(res.lane_tracks, 4u);
  EXPECT_EQ(res.waits + res.ready, 200u);
  EXPECT_EQ(res.resumed, res.waits);
  std::size_t pool_tracks = 0;
  for (const std::string& name : res.thread_names) {
    pool_tracks += name.rfind("pool #", 0) == 0 ? 1 : 0;
  }
  // Every thread that ran coroutine code around a wait has its own track, named after its
  // executor; a worker that only polled would be a "poller" track besides.
  EXPECT_EQ(pool_tracks, ran.size());
  EXPECT_LE(res.thread_tracks, 3u);
  EXPECT_EQ(p.trace.recorder.dropped(), 0u);
}

// What a GPU program's trace holds: waits on stream lanes plus spans, CPU stages on the
// pool's threads around each wait and GPU work on a track per lane, timed inside the wait
// (as events timed on the GPU would be). The checker accepts it: every slice nests, every
// wait has its flows from the co_await to the lane and on to the resumption.
TEST(TraceRecorder, SpansOnThreadsAndGpuLanesSitBesideTheWaits) {
  polled_pool p(3);
  const std::uint64_t n = 12;
  const std::uint64_t lanes = 3;
  for (std::uint64_t l = 1; l <= lanes; ++l) {
    p.trace.recorder.name_lane(reinterpret_cast<const void*>(l), "stream " + std::to_string(l));
  }
  auto one = [&](std::uint64_t job) -> ca::task<void> {
    co_await p.pool.schedule();
    for (std::uint64_t k = 0; k < 3; ++k) {
      const std::uint64_t token = k * n + job;
      const auto lane = 1 + job % lanes;
      const std::uint64_t t0 = ca::observer_clock_ns();
      p.trace.recorder.record_span({"prepare", t0, ca::observer_clock_ns(), std::int64_t(job)});
      const std::uint64_t g0 = ca::observer_clock_ns();
      (void)co_await fake_wait(p.reactor, lane, token);
      // The GPU work ran between the submission and the completion: a span on the lane.
      p.trace.recorder.record_span(
          {"kernel", g0, g0 + 1, std::int64_t(job), reinterpret_cast<const void*>(lane)});
    }
  };
  std::vector<ca::task<void>> all;
  for (std::uint64_t i = 0; i < n; ++i) {
    all.push_back(one(i));
  }
  std::thread completer([&] {
    for (std::uint64_t k = 0; k < 3; ++k) {
      while (p.reactor.pending() < n) {
        std::this_thread::yield();
      }
      for (std::uint64_t i = 0; i < n; ++i) {
        p.source.complete(k * n + i);
      }
    }
  });
  ca::sync_wait(ca::when_all(std::move(all)));
  completer.join();
  const std::string json = json_of(p.trace.recorder);
  const auto res = ca::tools::check_trace(json);
  EXPECT_TRUE(res.ok()) << problems(res);
  EXPECT_EQ(res.waits + res.ready, 3 * n);
  EXPECT_EQ(res.resumed, res.waits);
  EXPECT_EQ(res.lane_tracks, 2 * lanes); // each lane's waits, and its GPU work
  EXPECT_NE(std::find(res.lane_names.begin(), res.lane_names.end(), "stream 2 (GPU work)"),
            res.lane_names.end());
  const auto spans = p.trace.recorder.spans();
  EXPECT_EQ(spans.size(), 2 * 3 * n);
  std::size_t kernels = 0;
  std::size_t items = 0;
  for (std::size_t at = json.find("\"name\":\"kernel\""); at != std::string::npos;
       at = json.find("\"name\":\"kernel\"", at + 1)) {
    ++kernels;
  }
  for (std::size_t at = json.find("\"item\":"); at != std::string::npos;
       at = json.find("\"item\":", at + 1)) {
    ++items;
  }
  EXPECT_EQ(kernels, 3 * n);
  EXPECT_EQ(items, 2 * 3 * n);
}

TEST(TraceRecorder, SpansCountAgainstTheMemoryBound) {
  ca::trace_options o;
  o.max_events = 1; // one chunk: 1,024 spans
  ca::trace_recorder rec(o);
  for (int i = 0; i < 1100; ++i) {
    rec.record_span({"stage", 10, 5, i}); // an end before the start is clamped to it
  }
  EXPECT_EQ(rec.spans().size(), 1024u);
  EXPECT_EQ(rec.dropped(), 76u);
  EXPECT_EQ(rec.spans().front().span.end_ns, 10u);
  const auto res = ca::tools::check_trace(json_of(rec));
  EXPECT_TRUE(res.ok()) << problems(res);
  EXPECT_EQ(res.thread_tracks, 1u);
}

// A trace written while threads record holds a prefix of their events and is well formed.
TEST(TraceRecorder, WritesWhileRecording) {
  polled_pool p(3);
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0}, written{0};
  std::thread writer([&] {
    while (!stop.load()) {
      if (!ca::tools::check_trace(json_of(p.trace.recorder)).ok()) {
        bad.fetch_add(1);
      }
      written.fetch_add(1);
    }
  });
  while (written.load() == 0) { // the writer is at it before the threads start recording
    std::this_thread::yield();
  }
  (void)run_on_pool(p, 40, 10, 4);
  stop = true;
  writer.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_TRUE(ca::tools::check_trace(json_of(p.trace.recorder)).ok());
}

TEST(TraceRecorder, SamplingKeepsWholeWaits) {
  polled_pool p(2, ca::trace_options{.sample_every = 4});
  (void)run_on_pool(p, 32, 8, 2);
  const auto res = ca::tools::check_trace(json_of(p.trace.recorder));
  EXPECT_TRUE(res.ok()) << problems(res);
  // Every 4th wait of each thread's count: about a quarter of the 256.
  EXPECT_GT(res.waits + res.ready, 0u);
  EXPECT_LT(res.waits + res.ready, 256u / 2);
  EXPECT_EQ(res.unfinished, 0u);
}

TEST(TraceRecorder, MemoryIsBoundedAndACutTraceStaysValid) {
  polled_pool p(2, ca::trace_options{.max_events = 2048});
  (void)run_on_pool(p, 100, 20, 3); // about 6,000 events
  EXPECT_GT(p.trace.recorder.dropped(), 0u);
  EXPECT_LE(p.trace.recorder.recorded(), 2048u);
  const std::string json = json_of(p.trace.recorder);
  const auto res = ca::tools::check_trace(json);
  EXPECT_TRUE(res.ok()) << problems(res);
  EXPECT_GT(res.dropped_events, 0u);
}

TEST(TraceRecorder, WritesAFile) {
  fake_completion_source src;
  completion_reactor r(src, without_thread());
  traced t(r);
  completion_state s = completion_state::pending;
  auto a = await_one(r, 1, 1, s);
  src.complete(1);
  r.drain();
  const std::string path = ::testing::TempDir() + "cuawait_trace_test.json";
  t.recorder.write_json(path);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_TRUE(ca::tools::check_trace(text.str()).ok());
  EXPECT_THROW(t.recorder.write_json("/nonexistent-dir/x.json"), std::runtime_error);
  a.handle.destroy();
}

// The checker must be able to fail: each broken trace is refused.
TEST(TraceCheck, RefusesBrokenTraces) {
  EXPECT_FALSE(ca::tools::check_trace("{\"traceEvents\":[").ok());
  EXPECT_FALSE(ca::tools::check_trace("[1,2]").ok());
  const std::string head =
      R"({"traceEvents":[{"ph":"M","name":"process_name","pid":1,"tid":0,"args":{"name":"cuawait threads"}},)"
      R"({"ph":"M","name":"process_name","pid":2,"tid":0,"args":{"name":"cuawait lanes"}},)"
      R"({"ph":"M","name":"thread_name","pid":1,"tid":1,"args":{"name":"t"}},)"
      R"({"ph":"M","name":"thread_name","pid":2,"tid":1,"args":{"name":"l"}})";
  // Well formed: await, flow, lane slice, flow, resume.
  const std::string good =
      head +
      R"(,{"ph":"X","name":"await op","pid":1,"tid":1,"ts":1,"dur":0.001,"args":{"wait":7}})"
      R"(,{"ph":"s","id":1,"pid":1,"tid":1,"ts":1})"
      R"(,{"ph":"X","name":"op","pid":2,"tid":1,"ts":1,"dur":5,"args":{"wait":7,"status":"done"}})"
      R"(,{"ph":"f","bp":"e","id":1,"pid":2,"tid":1,"ts":1.001})"
      R"(,{"ph":"s","id":2,"pid":2,"tid":1,"ts":5.999})"
      R"(,{"ph":"X","name":"resume op","pid":1,"tid":1,"ts":7,"dur":0.001,"args":{"wait":7}})"
      R"(,{"ph":"f","bp":"e","id":2,"pid":1,"tid":1,"ts":7}]})";
  const auto ok = ca::tools::check_trace(good);
  EXPECT_TRUE(ok.ok()) << problems(ok);
  EXPECT_EQ(ok.resumed, 1u);
  auto broken = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    const auto at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    s.replace(at, from.size(), to);
    return ca::tools::check_trace(s);
  };
  // The resume flow is missing its finish.
  EXPECT_FALSE(broken(R"(,{"ph":"f","bp":"e","id":2,"pid":1,"tid":1,"ts":7})", "").ok());
  // Resumed before the work finished.
  EXPECT_FALSE(broken(R"("name":"resume op","pid":1,"tid":1,"ts":7,)",
                      R"("name":"resume op","pid":1,"tid":1,"ts":3,)")
                   .ok());
  // Overlapping, not nested, slices on the lane.
  EXPECT_FALSE(broken(R"(,{"ph":"s","id":2,)",
                      R"(,{"ph":"X","name":"op2","pid":2,"tid":1,"ts":4,"dur":5,"args":{}})"
                      R"(,{"ph":"s","id":2,)")
                   .ok());
  // A track without a name.
  EXPECT_FALSE(broken(R"({"ph":"M","name":"thread_name","pid":2,"tid":1,"args":{"name":"l"}})",
                      R"({"ph":"M","name":"other","pid":2,"tid":1,"args":{}})")
                   .ok());
  // A flow finish that does not bind to its enclosing slice.
  EXPECT_FALSE(broken(R"({"ph":"f","bp":"e","id":1,)", R"({"ph":"f","id":1,)").ok());
  // No resumption and not marked.
  EXPECT_FALSE(
      broken(R"(,{"ph":"X","name":"resume op",)", R"(,{"ph":"X","name":"other op",)").ok());
}

} // namespace
