// SPDX-License-Identifier: Apache-2.0
// The host cost of the reactor's sweep over many stalled lanes, without a GPU. Each lane
// holds one wait on a counter word, as the timeline strategy's streams do; with bells, one
// doorbell word per 64 lanes is rung after a counter moves, as that strategy does past 512
// streams. Two figures per lane count, with and without bells:
// - idle: host time and queries per poll while no wait finishes;
// - one at a time: 1,000 waits (lanes in a random order) finish one per poll; host time per
//   poll (the poll that finds and resumes the wait).
// Then, without bells, 10,000 waits over 100 and over 10,000 lanes that all finished before
// one poll: host time per completion (resolution and inline resumption).
// The words are written by this thread, so they are in its cache when read; on a GPU the
// written words and bells come from the device, so each costs a cache miss more. A model of
// the reactor's own work, not a GPU figure (cuawait-bench-reactor --idle measures that).
//
//   cuawait-reactor_sweep_bench [--lanes N,M,...]   (default 1000,10000,100000)

#include "common/detached.hpp"

#include "cuawait/completion_reactor.hpp"
#include "cuawait/completion_source.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <coroutine>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <vector>

namespace {

using cuawait::completion_reactor;
using cuawait::completion_state;
using cuawait::completion_status;

//! Done once the lane's counter word holds the wait's ticket (the timeline strategy's query).
class counter_source final : public cuawait::completion_source {
public:
  completion_status query(const cuawait::detail::wait_node& w) noexcept override {
    const std::uint64_t seen =
        std::atomic_ref<std::uint64_t>(*static_cast<std::uint64_t*>(w.source_data))
            .load(std::memory_order_acquire);
    return seen >= w.token ? completion_status{completion_state::done, 0} : completion_status{};
  }
  [[nodiscard]] bool unlocked_queries() const noexcept override { return true; }
};

using cuawait::test::detached;

class counter_wait {
public:
  counter_wait(completion_reactor& r, std::uint64_t* word, std::uint64_t* bell,
               std::uint64_t ticket = 1)
      : m_reactor(&r) {
    m_wait.node().lane_key = word;
    m_wait.node().source_data = word;
    m_wait.node().token = ticket;
    m_wait.node().bell = bell;
    m_wait.node().operation = "bench";
  }
  bool await_ready() const noexcept { return false; }
  bool await_suspend(std::coroutine_handle<> h) noexcept { return m_wait.suspend(*m_reactor, h); }
  void await_resume() noexcept { (void)m_wait.finish(); }

private:
  completion_reactor* m_reactor;
  cuawait::detail::reactor_wait m_wait;
};

detached wait_one(completion_reactor& r, std::uint64_t* word, std::uint64_t* bell,
                  std::atomic<int>& done, std::uint64_t ticket = 1) {
  co_await counter_wait(r, word, bell, ticket);
  done.fetch_add(1, std::memory_order_relaxed);
}

double thread_cpu_ns() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e9 + static_cast<double>(t.tv_nsec);
}

void run(int lanes, bool bells) {
  constexpr int lanes_per_bell = 64;
  constexpr int words_per_line = 8;
  counter_source src;
  cuawait::reactor_options o;
  o.start_thread = false;
  o.stall_probe = std::chrono::hours(1); // probes would query every lane: not this figure
  completion_reactor r(src, o);
  std::vector<std::uint64_t> words(static_cast<std::size_t>(lanes), 0);
  const int groups = (lanes + lanes_per_bell - 1) / lanes_per_bell;
  std::vector<std::uint64_t> bell_words(static_cast<std::size_t>(groups) * words_per_line, 0);
  const auto bell_of = [&](int l) {
    return bells ? &bell_words[static_cast<std::size_t>(l / lanes_per_bell) * words_per_line]
                 : nullptr;
  };
  std::atomic<int> done{0};
  for (int l = 0; l < lanes; ++l) {
    wait_one(r, &words[static_cast<std::size_t>(l)], bell_of(l), done);
  }
  r.poll(); // new groups are swept once

  constexpr int idle_polls = 2000;
  auto q0 = r.stats().queries;
  double c0 = thread_cpu_ns();
  for (int i = 0; i < idle_polls; ++i) {
    r.poll();
  }
  double c1 = thread_cpu_ns();
  const double idle_us = (c1 - c0) / 1000.0 / idle_polls;
  const double idle_q = double(r.stats().queries - q0) / idle_polls;

  std::vector<int> order(static_cast<std::size_t>(lanes));
  for (int l = 0; l < lanes; ++l) {
    order[static_cast<std::size_t>(l)] = l;
  }
  std::mt19937 rng(42);
  std::shuffle(order.begin(), order.end(), rng);
  const int ones = std::min(1000, lanes);
  int polls = 0;
  q0 = r.stats().queries;
  c0 = thread_cpu_ns();
  for (int k = 0; k < ones; ++k) {
    const int l = order[static_cast<std::size_t>(k)];
    std::atomic_ref<std::uint64_t>(words[static_cast<std::size_t>(l)])
        .store(1, std::memory_order_release);
    if (std::uint64_t* b = bell_of(l)) {
      std::atomic_ref<std::uint64_t>(*b).fetch_add(1, std::memory_order_release);
    }
    while (done.load(std::memory_order_relaxed) < k + 1) {
      r.poll();
      ++polls;
    }
  }
  c1 = thread_cpu_ns();
  std::printf("%7d lanes, %-8s idle: %8.3f us per poll, %8.1f queries per poll; one at a time: "
              "%8.3f us per poll, %8.1f queries per poll\n",
              lanes, bells ? "bells" : "no bells", idle_us, idle_q, (c1 - c0) / 1000.0 / polls,
              double(r.stats().queries - q0) / polls);
  std::fflush(stdout);
  for (int l = 0; l < lanes; ++l) { // the rest finish, so that no coroutine is left
    words[static_cast<std::size_t>(l)] = 1;
    if (std::uint64_t* b = bell_of(l)) {
      ++*b;
    }
  }
  while (done.load() < lanes) {
    r.poll();
  }
}

//! 10,000 waits over `lanes` lanes (tickets 1, 2, ... in each lane's order), all finished
//! before the first poll: host time per completion of the polls that resolve and resume
//! them (the GPU bench's "waits finished together", without bells).
void together(int lanes) {
  constexpr int waits = 10000;
  counter_source src;
  cuawait::reactor_options o;
  o.start_thread = false;
  o.stall_probe = std::chrono::hours(1);
  completion_reactor r(src, o);
  std::vector<std::uint64_t> words(static_cast<std::size_t>(lanes), 0);
  std::atomic<int> done{0};
  for (int i = 0; i < waits; ++i) {
    const auto l = static_cast<std::size_t>(i % lanes);
    wait_one(r, &words[l], nullptr, done, static_cast<std::uint64_t>(i / lanes) + 1);
  }
  for (std::uint64_t& w : words) {
    std::atomic_ref<std::uint64_t>(w).store(waits, std::memory_order_release);
  }
  const auto q0 = r.stats().queries;
  int polls = 0;
  const double c0 = thread_cpu_ns();
  while (done.load(std::memory_order_relaxed) < waits) {
    r.poll();
    ++polls;
  }
  const double c1 = thread_cpu_ns();
  std::printf("%7d lanes, 10,000 waits finished together: %8.3f us per completion, %5.2f "
              "queries per completion, %d polls\n",
              lanes, (c1 - c0) / 1000.0 / waits, double(r.stats().queries - q0) / waits, polls);
  std::fflush(stdout);
}

} // namespace

int main(int argc, char** argv) {
  std::vector<int> counts = {1000, 10000, 100000};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--lanes") == 0 && i + 1 < argc) {
      counts.clear();
      for (const char* p = argv[++i]; *p != '\0';) {
        char* end = nullptr;
        const long n = std::strtol(p, &end, 10);
        if (end == p || n <= 0) {
          std::fprintf(stderr, "--lanes: expected lane counts such as 1000,10000\n");
          return 2;
        }
        counts.push_back(static_cast<int>(n));
        p = *end == ',' ? end + 1 : end;
      }
    }
  }
  for (const int n : counts) {
    run(n, false);
    run(n, true);
  }
  together(100);
  together(10000);
}
