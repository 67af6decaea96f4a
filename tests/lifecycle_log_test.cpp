// SPDX-License-Identifier: Apache-2.0
// lifecycle_log over a completion reactor driven by the fake completion source: which
// events reach the sink at each level, what a record says, and the text of a line.

#include "common/fake_completion_source.hpp"
#include "common/owned_coroutine.hpp"

#include <cuawait/completion_reactor.hpp>
#include <cuawait/lifecycle_log.hpp>
#include <cuawait/wait_observer.hpp>

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

namespace ca = cuawait;
using ca::completion_reactor;
using ca::completion_state;
using ca::log_level;
using ca::wait_event;
using ca::test::fake_completion_source;
using ca::test::fake_wait;
using ca::test::owned_coroutine;

owned_coroutine await_one(completion_reactor& r, std::uintptr_t lane, std::uint64_t token) {
  (void)co_await fake_wait(r, lane, token);
}

//! Runs one done, one failed, one withdrawn and one ready wait with a log of `level`.
std::vector<ca::log_record> run_with_log(log_level level) {
  fake_completion_source src;
  ca::reactor_options o;
  o.start_thread = false;
  completion_reactor r(src, o);
  std::vector<ca::log_record> got;
  ca::lifecycle_log log(level, [&](const ca::log_record& rec) { got.push_back(rec); });
  ca::observer_set set;
  set.add(log);
  set.install(r);
  src.complete(9);
  auto ready = await_one(r, 3, 9);
  auto done = await_one(r, 1, 1);
  auto failed = await_one(r, 2, 2);
  auto gone = await_one(r, 1, 3);
  gone.handle.destroy();
  src.complete(1);
  src.complete(2, 700);
  r.drain();
  r.set_trace({});
  for (auto* c : {&ready, &done, &failed}) {
    c->handle.destroy();
  }
  return got;
}

std::size_t count(const std::vector<ca::log_record>& v, wait_event e) {
  std::size_t n = 0;
  for (const auto& r : v) {
    n += r.event == e ? 1 : 0;
  }
  return n;
}

TEST(LifecycleLog, DebugSeesEveryEvent) {
  const auto got = run_with_log(log_level::debug);
  EXPECT_EQ(count(got, wait_event::suspend), 4u);
  EXPECT_EQ(count(got, wait_event::ready), 1u);
  EXPECT_EQ(count(got, wait_event::complete), 2u);
  EXPECT_EQ(count(got, wait_event::resume), 2u);
  EXPECT_EQ(count(got, wait_event::withdraw), 1u);
  // One id per wait, the same on all of its events.
  std::uint64_t suspend_id = 0;
  for (const auto& r : got) {
    EXPECT_NE(r.wait_id, 0u);
    if (r.event == wait_event::suspend && r.lane == reinterpret_cast<const void*>(2)) {
      suspend_id = r.wait_id;
    }
  }
  bool failed_seen = false;
  for (const auto& r : got) {
    if (r.event == wait_event::complete && r.status.state == completion_state::failed) {
      failed_seen = true;
      EXPECT_EQ(r.wait_id, suspend_id);
      EXPECT_EQ(r.level, log_level::error);
      EXPECT_EQ(r.status.error, 700);
    }
  }
  EXPECT_TRUE(failed_seen);
}

TEST(LifecycleLog, InfoSeesResumptionsWithdrawalsAndErrorsOnly) {
  const auto got = run_with_log(log_level::info);
  EXPECT_EQ(count(got, wait_event::suspend), 0u);
  EXPECT_EQ(count(got, wait_event::ready), 0u);
  EXPECT_EQ(count(got, wait_event::complete), 1u); // the failure, at error level
  EXPECT_EQ(count(got, wait_event::resume), 2u);
  EXPECT_EQ(count(got, wait_event::withdraw), 1u);
  for (const auto& r : got) {
    if (r.event == wait_event::resume) {
      EXPECT_EQ(r.thread, ca::observed_thread_ordinal());
      EXPECT_EQ(r.suspended_on, ca::observed_thread_ordinal());
      EXPECT_GE(r.waited_ns, r.latency_ns);
    }
  }
}

TEST(LifecycleLog, ErrorSeesTheFailureOnly) {
  const auto got = run_with_log(log_level::error);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status.state, completion_state::failed);
  EXPECT_TRUE(run_with_log(log_level::off).empty());
}

TEST(LifecycleLog, FormatsALine) {
  ca::log_record r;
  r.level = log_level::info;
  r.event = wait_event::resume;
  r.wait_id = 42;
  r.operation = "kernel launch";
  r.thread = 3;
  r.suspended_on = 1;
  r.waited_ns = 41'200;
  r.latency_ns = 3'100;
  r.status = {completion_state::done, 0};
  const std::string s = ca::format_log_record(r);
  EXPECT_NE(s.find("cuawait info wait 42 \"kernel launch\""), std::string::npos) << s;
  EXPECT_NE(s.find("resumed on thread 3 (suspended on 1) after 41.2 us, 3.1 us after completion"),
            std::string::npos)
      << s;
}

TEST(LifecycleLog, ParsesLevels) {
  EXPECT_EQ(ca::parse_log_level("debug"), log_level::debug);
  EXPECT_EQ(ca::parse_log_level("warning"), log_level::warn);
  EXPECT_EQ(ca::parse_log_level("off"), log_level::off);
  EXPECT_FALSE(ca::parse_log_level("loud").has_value());
}

TEST(LifecycleLog, ASinkThatThrowsIsContained) {
  fake_completion_source src;
  ca::reactor_options o;
  o.start_thread = false;
  completion_reactor r(src, o);
  int calls = 0;
  ca::lifecycle_log log(log_level::debug, [&](const ca::log_record&) {
    ++calls;
    throw std::runtime_error("sink broke");
  });
  ca::observer_set set;
  set.add(log);
  set.install(r);
  auto c = await_one(r, 1, 1);
  src.complete(1);
  r.drain();
  r.set_trace({});
  EXPECT_TRUE(c.done());
  EXPECT_EQ(calls, 3); // suspend, complete, resume
  c.handle.destroy();
}

} // namespace
