// SPDX-License-Identifier: Apache-2.0
// idle_source_set: several idle sources seen by a pool as one. Each answer is the members'
// combined answer; a pool polling the set finds work of every member.

#include "common/fake_completion_source.hpp"

#include <cuawait/completion_reactor.hpp>
#include <cuawait/idle_source_set.hpp>
#include <cuawait/sync_wait.hpp>
#include <cuawait/task.hpp>
#include <cuawait/thread_pool.hpp>
#include <cuawait/when_all.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <span>
#include <stdexcept>
#include <vector>

namespace {

namespace ca = cuawait;
using namespace std::chrono_literals;

//! An idle source whose answers the test sets; counts its polls.
class scripted_source final : public ca::idle_source {
public:
  std::size_t poll_idle() noexcept override {
    ++polls;
    return resolves;
  }
  [[nodiscard]] bool idle_keep_spinning() const noexcept override { return spinning; }
  [[nodiscard]] bool idle_pending() const noexcept override { return pending; }
  [[nodiscard]] std::chrono::nanoseconds idle_park_period() const noexcept override {
    return period;
  }
  [[nodiscard]] std::size_t idle_spinners_wanted() const noexcept override { return spinners; }
  std::atomic<std::size_t> polls{0};
  std::size_t spinners = 1;
  std::size_t resolves = 0;
  bool spinning = false;
  bool pending = false;
  std::chrono::nanoseconds period = 1ms;
};

TEST(idle_source_set, polls_every_member_and_adds_what_they_resolved) {
  scripted_source a;
  scripted_source b;
  a.resolves = 2;
  b.resolves = 3;
  ca::idle_source_set set{&a, &b};
  EXPECT_EQ(set.size(), 2u);
  EXPECT_EQ(set.poll_idle(), 5u);
  EXPECT_EQ(a.polls.load(), 1u);
  EXPECT_EQ(b.polls.load(), 1u);
}

TEST(idle_source_set, a_set_built_at_run_time_from_a_span) {
  scripted_source a;
  scripted_source b;
  a.resolves = 1;
  b.resolves = 4;
  const std::vector<ca::idle_source*> list{&a, &b};
  ca::idle_source_set set{std::span<ca::idle_source* const>(list)};
  EXPECT_EQ(set.size(), 2u);
  EXPECT_EQ(set.poll_idle(), 5u);
  const std::vector<ca::idle_source*> with_null{&a, nullptr};
  EXPECT_THROW(ca::idle_source_set{std::span<ca::idle_source* const>(with_null)},
               std::invalid_argument);
  // A source that needs no waking ignores the waker an owner gives it (the default).
  static_cast<ca::idle_source&>(a).set_idle_waker(nullptr, nullptr);
}

TEST(idle_source_set, pending_and_spinning_when_any_member_is) {
  scripted_source a;
  scripted_source b;
  ca::idle_source_set set{&a, &b};
  EXPECT_FALSE(set.idle_pending());
  EXPECT_FALSE(set.idle_keep_spinning());
  b.pending = true;
  EXPECT_TRUE(set.idle_pending());
  a.spinning = true;
  EXPECT_TRUE(set.idle_keep_spinning());
}

TEST(idle_source_set, park_period_is_the_shortest_of_the_members_with_work_pending) {
  scripted_source a;
  scripted_source b;
  a.period = 50us;
  b.period = 2ms;
  ca::idle_source_set set{&a, &b};
  EXPECT_EQ(set.idle_park_period(), 50us); // none pending: the shortest of all
  b.pending = true;
  EXPECT_EQ(set.idle_park_period(), 2ms); // a has nothing to find
  a.pending = true;
  EXPECT_EQ(set.idle_park_period(), 50us);
}

TEST(idle_source_set, spinners_wanted_add_up_and_saturate) {
  scripted_source a;
  scripted_source b;
  a.spinners = 2;
  b.spinners = 3;
  ca::idle_source_set set{&a, &b};
  EXPECT_EQ(set.idle_spinners_wanted(), 5u);
  b.spinners = static_cast<std::size_t>(-1); // every idle thread
  EXPECT_EQ(set.idle_spinners_wanted(), static_cast<std::size_t>(-1));
}

TEST(idle_source_set, refuses_null_members_and_too_many) {
  scripted_source a;
  EXPECT_THROW((ca::idle_source_set{&a, nullptr}), std::invalid_argument);
  const std::vector<ca::idle_source*> too_many(ca::idle_source_set::max_sources + 1, &a);
  EXPECT_THROW((ca::idle_source_set{std::span<ca::idle_source* const>(too_many)}),
               std::invalid_argument);
  const std::vector<ca::idle_source*> most(ca::idle_source_set::max_sources, &a);
  EXPECT_EQ(ca::idle_source_set{std::span<ca::idle_source* const>(most)}.size(),
            ca::idle_source_set::max_sources);
}

void wake(void* pool) noexcept { static_cast<ca::thread_pool*>(pool)->wake_idle_poller(); }

TEST(idle_source_set, pool_resumes_a_wait_of_the_second_member) {
  ca::test::fake_completion_source source;
  ca::reactor_options options;
  options.start_thread = false;
  ca::completion_reactor reactor(source, options);
  source.attach(&reactor);
  scripted_source quiet;
  ca::idle_source_set set{&quiet, &reactor};
  ca::thread_pool pool(2);
  reactor.set_idle_waker(&wake, &pool);
  pool.set_idle_source(&set);
  auto waiter = [&]() -> ca::task<ca::completion_state> {
    co_await pool.schedule();
    co_return (co_await ca::test::fake_wait(reactor, 1, 7)).state;
  };
  auto completer = [&]() -> ca::task<void> {
    do { // until the wait is queued, so that only a poll of the set can find it done
      co_await pool.schedule();
    } while (reactor.pending() == 0);
    source.complete(7);
  };
  auto [state, none] = ca::sync_wait(ca::when_all(waiter(), completer()));
  (void)none;
  EXPECT_EQ(state, ca::completion_state::done);
  EXPECT_GT(quiet.polls.load(), 0u); // the set polled both members
  pool.set_idle_source(nullptr);
  reactor.set_idle_waker(nullptr, nullptr);
}

} // namespace
