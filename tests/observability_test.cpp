// SPDX-License-Identifier: Apache-2.0
// observability: the environment variables, what is installed on the reactor for each
// configuration (nothing when nothing is asked), the trace file written by finish().

#include "common/fake_completion_source.hpp"
#include "common/owned_coroutine.hpp"

#include <cuawait/completion_reactor.hpp>
#include <cuawait/observability.hpp>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

namespace {

namespace ca = cuawait;
using ca::completion_reactor;
using ca::test::fake_completion_source;
using ca::test::fake_wait;
using ca::test::owned_coroutine;

ca::reactor_options without_thread() {
  ca::reactor_options o;
  o.start_thread = false;
  return o;
}

owned_coroutine await_one(completion_reactor& r, std::uint64_t token) {
  (void)co_await fake_wait(r, 1, token);
}

//! Sets an environment variable for the scope's lifetime.
class scoped_env {
public:
  scoped_env(const char* name, const char* value) : m_name(name) {
    if (const char* old = std::getenv(name)) {
      m_old = old;
      m_had = true;
    }
    ::setenv(name, value, 1);
  }
  ~scoped_env() {
    if (m_had) {
      ::setenv(m_name, m_old.c_str(), 1);
    } else {
      ::unsetenv(m_name);
    }
  }

private:
  const char* m_name;
  std::string m_old;
  bool m_had = false;
};

TEST(Observability, ReadsTheEnvironment) {
  const scoped_env t("CUAWAIT_TRACE", "/tmp/x.json");
  const scoped_env l("CUAWAIT_LOG", "warn");
  const scoped_env n("CUAWAIT_NVTX", "1");
  const auto c = ca::observability_from_environment();
  EXPECT_EQ(c.trace_path, "/tmp/x.json");
  EXPECT_EQ(c.log, ca::log_level::warn);
  EXPECT_TRUE(c.nvtx);
}

TEST(Observability, RefusesUnknownValuesNamingTheVariable) {
  {
    const scoped_env l("CUAWAIT_LOG", "verbose");
    try {
      (void)ca::observability_from_environment();
      FAIL() << "accepted CUAWAIT_LOG=verbose";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("CUAWAIT_LOG"), std::string::npos);
    }
  }
  const scoped_env n("CUAWAIT_NVTX", "yes");
  EXPECT_THROW((void)ca::observability_from_environment(), std::invalid_argument);
}

TEST(Observability, InstallsNothingWhenNothingIsAsked) {
  fake_completion_source src;
  completion_reactor r(src, without_thread());
  ca::observability obs;
  obs.attach(r, {});
  EXPECT_EQ(r.trace().on_suspend, nullptr);
  EXPECT_EQ(obs.trace(), nullptr);
  EXPECT_THROW(obs.write_trace("/tmp/never.json"), std::runtime_error);
  obs.finish(r);
}

TEST(Observability, TracePathIsWrittenByFinishAndHooksRemoved) {
  fake_completion_source src;
  completion_reactor r(src, without_thread());
  const std::string path = ::testing::TempDir() + "cuawait_obs_%n.json";
  ca::observability obs;
  ca::observability_config c;
  c.trace_path = path;
  c.log = ca::log_level::off;
  obs.attach(r, c);
  ASSERT_NE(r.trace().on_suspend, nullptr);
  ASSERT_NE(obs.trace(), nullptr);
  auto w = await_one(r, 1);
  src.complete(1);
  r.drain();
  EXPECT_EQ(obs.trace()->recorded(), 3u); // suspend, complete, resume
  obs.finish(r);
  EXPECT_EQ(r.trace().on_suspend, nullptr);
  // %n: the first trace this process wrote through a path pattern is number 0.
  std::ifstream in(::testing::TempDir() + "cuawait_obs_0.json");
  ASSERT_TRUE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("\"traceEvents\""), std::string::npos);
  w.handle.destroy();
}

TEST(Observability, StartTraceByHandThenWrite) {
  fake_completion_source src;
  completion_reactor r(src, without_thread());
  ca::observability obs;
  obs.attach(r, {});
  ca::trace_recorder& rec = obs.start_trace(r, {.max_events = 4096});
  EXPECT_EQ(&rec, obs.trace());
  EXPECT_NE(r.trace().on_suspend, nullptr);
  auto w = await_one(r, 1);
  src.complete(1);
  r.drain();
  const std::string path = ::testing::TempDir() + "cuawait_obs_by_hand.json";
  obs.write_trace(path);
  EXPECT_TRUE(std::ifstream(path).good());
  obs.finish(r);
  w.handle.destroy();
}

} // namespace
