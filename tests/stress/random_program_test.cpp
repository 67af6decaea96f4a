// SPDX-License-Identifier: Apache-2.0
// The random-program stress test of the CPU core: programs of nested when_all / when_any,
// async_scope, stop requests, exceptions, timers and the synchronisation primitives,
// generated from seeds and checked against the values they must produce (program.hpp).
//
//   random_program_test                              the default number of programs
//   CUAWAIT_STRESS_PROGRAMS=100000 random_program_test   more (the `long` CTest entry)
//   CUAWAIT_STRESS_SEED=1234 random_program_test      replays one seed, printing its shape
//   CUAWAIT_STRESS_FIRST_SEED=5000                    starts somewhere else
//   CUAWAIT_STRESS_KNOWN_BUGS=1                       also generates the shapes that hit
//                                                     the known bug (docs/RELIABILITY.md)
//
// A failure names the seed and the program's shape. A program that hangs for
// CUAWAIT_STRESS_HANG_S seconds (default 60) makes the watchdog print its seed and abort.

#include "program.hpp"
#include "program_run.hpp"

#include <cuawait/async_event.hpp>
#include <cuawait/async_scope.hpp>
#include <cuawait/sync_wait.hpp>
#include <cuawait/task.hpp>
#include <cuawait/when_any.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#include <sanitizer/common_interface_defs.h>
#define CUAWAIT_STRESS_SANITIZED 1
#endif

namespace {

using namespace cuawait::stress;

// Programs per run by build: each preset's run stays within about a minute on 2 cores.
#if defined(__SANITIZE_THREAD__)
constexpr std::uint64_t default_programs = 10000;
#elif defined(__SANITIZE_ADDRESS__)
constexpr std::uint64_t default_programs = 16000;
#elif !defined(__OPTIMIZE__)
constexpr std::uint64_t default_programs = 10000;
#else
constexpr std::uint64_t default_programs = 20000;
#endif
constexpr int shards = 4;       // separate CTest entries, so that ctest -j spreads them
constexpr int max_reported = 5; // failing seeds reported per shard before it stops

std::optional<std::uint64_t> env_number(const char* name) {
  const char* s = std::getenv(name);
  if (s == nullptr || *s == '\0') {
    return std::nullopt;
  }
  return std::strtoull(s, nullptr, 10);
}

// Aborts the process, naming the program, when one runs for too long (a lost wake-up or a
// deadlock would otherwise only show as a CTest timeout without the seed).
class watchdog {
public:
  explicit watchdog(std::chrono::seconds limit) : m_limit(limit), m_thread([this] { watch(); }) {}
  watchdog(const watchdog&) = delete;
  watchdog& operator=(const watchdog&) = delete;
  ~watchdog() {
    {
      const std::lock_guard lock(m_mutex);
      m_done = true;
    }
    m_cv.notify_one();
    m_thread.join();
  }
  void arm(std::string what) {
    const std::lock_guard lock(m_mutex);
    m_what = std::move(what);
    m_deadline = std::chrono::steady_clock::now() + m_limit;
    m_armed = true;
  }
  void disarm() {
    const std::lock_guard lock(m_mutex);
    m_armed = false;
  }

private:
  void watch() {
    std::unique_lock lock(m_mutex);
    while (!m_done) {
      m_cv.wait_for(lock, std::chrono::milliseconds(200));
      if (m_armed && std::chrono::steady_clock::now() > m_deadline) {
        std::fprintf(stderr, "random_program_test: HUNG for %lld s: %s\n",
                     static_cast<long long>(m_limit.count()), m_what.c_str());
        std::abort();
      }
    }
  }

  std::chrono::seconds m_limit;
  std::mutex m_mutex;
  std::condition_variable m_cv;
  std::string m_what;
  std::chrono::steady_clock::time_point m_deadline;
  bool m_armed = false;
  bool m_done = false;
  std::thread m_thread;
};

// Runs one seed; reports a failure with the seed and shape. Returns whether it passed.
// The program running now, for the sanitizers' death callback: a sanitizer report ends
// the process before the test can name the seed.
char g_running[8192];

void print_running_program() {
  std::fprintf(stderr, "random_program_test: the sanitizer stopped %s\n", g_running);
}

void note_running(const std::string& where) {
  std::snprintf(g_running, sizeof g_running, "%s", where.c_str());
#ifdef CUAWAIT_STRESS_SANITIZED
  static const bool installed = (__sanitizer_set_death_callback(print_running_program), true);
  (void)installed;
#endif
}

bool known_bugs() { return env_number("CUAWAIT_STRESS_KNOWN_BUGS").value_or(0) != 0; }

bool run_seed(std::uint64_t seed, watchdog& dog) {
  const program p = generate(seed, known_bugs());
  const std::string where = shape(p);
  note_running(where);
  dog.arm(where);
  const std::vector<std::string> failures = run_and_check(p);
  dog.disarm();
  if (failures.empty()) {
    return true;
  }
  std::string text;
  for (const auto& f : failures) {
    text += "\n  " + f;
  }
  ADD_FAILURE() << "random program failed; replay with CUAWAIT_STRESS_SEED=" << seed << "\n  "
                << where << text;
  return false;
}

class RandomProgram : public ::testing::TestWithParam<int> {};

TEST_P(RandomProgram, ProducesWhatItsModelSays) {
  const int shard = GetParam();
  watchdog dog(std::chrono::seconds(env_number("CUAWAIT_STRESS_HANG_S").value_or(60)));
  if (const auto seed = env_number("CUAWAIT_STRESS_SEED")) {
    if (shard != 0) {
      GTEST_SKIP() << "CUAWAIT_STRESS_SEED replays one seed, in shard 0";
    }
    std::cout << shape(generate(*seed, known_bugs())) << "\n";
    run_seed(*seed, dog);
    return;
  }
  const std::uint64_t programs = env_number("CUAWAIT_STRESS_PROGRAMS").value_or(default_programs);
  const std::uint64_t first = env_number("CUAWAIT_STRESS_FIRST_SEED").value_or(1);
  const auto start = std::chrono::steady_clock::now();
  std::uint64_t ran = 0;
  int failed = 0;
  for (std::uint64_t i = static_cast<std::uint64_t>(shard); i < programs && failed < max_reported;
       i += shards) {
    failed += run_seed(first + i, dog) ? 0 : 1;
    ++ran;
  }
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  std::cout << "shard " << shard << ": " << ran << " programs (seeds " << first + shard << " + k*"
            << shards << "), " << failed << " failed, " << took.count() << " s\n";
}

INSTANTIATE_TEST_SUITE_P(Shard, RandomProgram, ::testing::Range(0, shards));

TEST(RandomProgramModel, TheSameSeedGivesTheSameProgram) {
  for (std::uint64_t seed = 1; seed < 200; ++seed) {
    EXPECT_EQ(shape(generate(seed)), shape(generate(seed)));
  }
  EXPECT_NE(shape(generate(1)), shape(generate(2)));
}

TEST(RandomProgramModel, TheCheckerRejectsAWrongValue) {
  // A program whose root is a when_all of two value leaves and a failing one, recorded as
  // if the when_all had returned a value: the checker must object.
  program p;
  p.nodes.resize(4);
  p.nodes[0] = node{kind::all, 0, -1, {1, 2, 3}, 7};
  p.nodes[1] = node{kind::value, 1, 0, {}, 11};
  p.nodes[2] = node{kind::value, 2, 0, {}, 12};
  p.nodes[3] = node{kind::fail, 3, 0, {}, 13};
  std::vector<record> r(4);
  r[1] = {state::value, 11};
  r[2] = {state::value, 12};
  r[3] = {state::error, 0, 3};
  r[0] = {state::error, 0, 3};
  EXPECT_TRUE(check(p, r).empty());
  r[0] = {state::value, combine(7, {11, 12, 0})};
  EXPECT_FALSE(check(p, r).empty());
  r[0] = {state::error, 0, 3};
  r[2] = {state::cancelled}; // nothing can stop it
  EXPECT_FALSE(check(p, r).empty());
}

// Found by the random programs (CUAWAIT_STRESS_KNOWN_BUGS=1, seed 18477 under ASan,
// timing-dependent): a
// stop request forwarded into a when_any (when_any_stop_forwarder::forward ->
// when_any_state::request_stop -> m_source.request_stop()) runs the children's stop
// callbacks inline; when they finish every child there, the last child_done() resumes
// the awaiting coroutine inside that call, which destroys the when_any (its state, its
// stop_source, the children's tokens), and libstdc++'s _M_request_stop then reads the
// freed stop state (heap-use-after-free under ASan). when_any_state::child_done() holds a
// count around its own request_stop(); the forwarder does not. A possible fix:
// `forward` keeps a copy of the source and requests through it, so that the stop state
// outlives the call (include/cuawait/detail/when_any_awaitable.hpp, when_any_stop_forwarder).
// Disabled until the library is fixed: it fails under ASan (and may pass without it).
TEST(RandomProgramRegression, DISABLED_WhenAnyFinishedInlineByAForwardedStop) {
  cuawait::async_event never;
  // The first child registers a second stop callback before it waits, so that the callback
  // that finishes the when_any is not the last one in the stop state's list: libstdc++'s
  // request_stop() then locks the (freed) state again to look for the next.
  auto child = [&](bool second_callback) -> cuawait::task<int> {
    const std::stop_token token = co_await cuawait::get_stop_token();
    std::optional<std::stop_callback<void (*)()>> extra;
    if (second_callback) {
      extra.emplace(
          token, +[] {});
    }
    co_await never.wait(token);
    co_return 1;
  };
  bool cancelled = false;
  auto parent = [&]() -> cuawait::task<void> {
    try {
      (void)co_await cuawait::when_any(child(true), child(false));
    } catch (const cuawait::operation_cancelled&) {
      cancelled = true;
    }
  };
  std::stop_source outer;
  cuawait::async_scope scope;
  scope.spawn(parent().with_stop_token(outer.get_token())); // suspends on the event
  outer.request_stop(); // cancels both waits inline, which finishes the when_any inline
  cuawait::sync_wait(scope.join());
  EXPECT_TRUE(cancelled);
}

} // namespace
