// SPDX-License-Identifier: Apache-2.0
// Several completion reactors (one per device, as a runtime serving several GPUs has)
// polled by the same pool workers through one `idle_source_set`, driven by fake completion
// sources: waits on every reactor resume on the pool, `when_all` across reactors, jobs
// spread over the reactors by load, completions in random order.

#include "common/fake_completion_source.hpp"

#include <cuawait/completion_reactor.hpp>
#include <cuawait/cuda/detail/load_balancer.hpp>
#include <cuawait/idle_source_set.hpp>
#include <cuawait/sync_wait.hpp>
#include <cuawait/task.hpp>
#include <cuawait/thread_pool.hpp>
#include <cuawait/when_all.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <random>
#include <thread>
#include <vector>

namespace {

namespace ca = cuawait;
using ca::completion_reactor;
using ca::completion_state;
using ca::test::fake_completion_source;
using ca::test::fake_wait;

void wake(void* pool) noexcept { static_cast<ca::thread_pool*>(pool)->wake_idle_poller(); }

//! `n` fake "devices" (a source and a thread-less reactor each) polled by one pool, wired
//! as `runtime` wires the reactors of the devices it serves.
struct devices_on_one_pool {
  devices_on_one_pool(std::size_t n, std::size_t threads, bool notifies) : pool(threads) {
    ca::reactor_options o;
    o.start_thread = false;
    for (std::size_t i = 0; i < n; ++i) {
      sources.push_back(std::make_unique<fake_completion_source>(notifies));
      reactors.push_back(std::make_unique<completion_reactor>(*sources.back(), o));
      sources.back()->attach(reactors.back().get());
      reactors.back()->set_idle_waker(&wake, &pool);
    }
    std::vector<ca::idle_source*> list;
    for (auto& r : reactors) {
      list.push_back(r.get());
    }
    set = std::make_unique<ca::idle_source_set>(std::span<ca::idle_source* const>(list));
    pool.set_idle_source(set.get());
  }
  ~devices_on_one_pool() {
    pool.set_idle_source(nullptr);
    for (auto& r : reactors) {
      r->set_idle_waker(nullptr, nullptr);
    }
    pool.shutdown();
  }
  [[nodiscard]] std::size_t pending() const {
    std::size_t n = 0;
    for (const auto& r : reactors) {
      n += r->pending();
    }
    return n;
  }

  std::vector<std::unique_ptr<fake_completion_source>> sources;
  std::vector<std::unique_ptr<completion_reactor>> reactors;
  ca::thread_pool pool;
  std::unique_ptr<ca::idle_source_set> set;
};

//! A job on device `d`: moves to the pool, awaits two completions there in order.
ca::task<std::size_t> job(devices_on_one_pool& g, std::size_t d, std::uint64_t token) {
  co_await g.pool.schedule();
  const auto first = co_await fake_wait(*g.reactors[d], token, token * 2);
  const auto second = co_await fake_wait(*g.reactors[d], token, token * 2 + 1);
  EXPECT_EQ(first.state, completion_state::done);
  EXPECT_EQ(second.state, completion_state::done);
  EXPECT_TRUE(g.pool.on_worker_thread());
  co_return d;
}

//! Completes every token below `2 * jobs` in random order once all `jobs` first waits are in.
std::thread completer(devices_on_one_pool& g, std::uint64_t jobs, unsigned seed) {
  return std::thread([&g, jobs, seed] {
    std::vector<std::uint64_t> order;
    for (std::uint64_t t = 0; t < 2 * jobs; ++t) {
      order.push_back(t);
    }
    std::shuffle(order.begin(), order.end(), std::mt19937(seed));
    while (g.pending() < jobs) {
      std::this_thread::yield();
    }
    for (const std::uint64_t t : order) {
      const std::uint64_t job = t / 2;
      g.sources[job % g.sources.size()]->complete(t); // each job's device: job % n
    }
  });
}

TEST(MultiReactor, WhenAllAcrossDevicesResumesEveryJob) {
  for (const bool notifies : {false, true}) {
    devices_on_one_pool g(3, 4, notifies);
    std::thread c = completer(g, 3, 1);
    const auto [a, b, d] = ca::sync_wait(ca::when_all(job(g, 0, 0), job(g, 1, 1), job(g, 2, 2)));
    c.join();
    EXPECT_EQ(a, 0u);
    EXPECT_EQ(b, 1u);
    EXPECT_EQ(d, 2u);
    EXPECT_EQ(g.pending(), 0u);
  }
}

//! Jobs spread over the devices by a load balancer (as `cuda::device_scheduler` does), all
//! started before any completes: each device gets an equal share, every job resumes.
ca::task<std::size_t> balanced_job(devices_on_one_pool& g, ca::cuda::detail::load_balancer& b,
                                   std::uint64_t id, std::atomic<std::uint64_t>& next_token,
                                   std::vector<std::atomic<std::uint64_t>>& token_of) {
  auto claim = b.acquire();
  const std::size_t d = claim.slot();
  // Tokens are numbered per device in the order the jobs claimed it.
  const std::uint64_t token = next_token.fetch_add(1);
  token_of[id] = token * 16 + d;
  co_await g.pool.schedule();
  const auto st = co_await fake_wait(*g.reactors[d], id, token * 16 + d);
  EXPECT_EQ(st.state, completion_state::done);
  co_return d;
}

TEST(MultiReactor, JobsSpreadByLoadOverSeveralReactorsAllResume) {
  constexpr std::size_t devices = 4;
  constexpr std::uint64_t jobs = 400;
  devices_on_one_pool g(devices, 4, false);
  ca::cuda::detail::load_balancer b(devices);
  std::atomic<std::uint64_t> next_token{0};
  std::vector<std::atomic<std::uint64_t>> token_of(jobs);
  std::vector<ca::task<std::size_t>> tasks;
  for (std::uint64_t i = 0; i < jobs; ++i) {
    tasks.push_back(balanced_job(g, b, i, next_token, token_of));
  }
  std::thread c([&] {
    while (g.pending() < jobs) {
      std::this_thread::yield();
    }
    std::vector<std::uint64_t> ids(jobs);
    for (std::uint64_t i = 0; i < jobs; ++i) {
      ids[i] = i;
    }
    std::shuffle(ids.begin(), ids.end(), std::mt19937(7));
    for (const std::uint64_t i : ids) {
      const std::uint64_t t = token_of[i].load();
      g.sources[t % 16]->complete(t);
    }
  });
  const std::vector<std::size_t> where = ca::sync_wait(ca::when_all(std::move(tasks)));
  c.join();
  std::vector<std::size_t> per_device(devices, 0);
  for (const std::size_t d : where) {
    ++per_device[d];
  }
  for (std::size_t d = 0; d < devices; ++d) {
    EXPECT_EQ(per_device[d], jobs / devices) << "device " << d;
    EXPECT_EQ(b.completed(d), jobs / devices);
    EXPECT_EQ(b.load(d), 0u);
  }
  EXPECT_EQ(g.pending(), 0u);
}

} // namespace
