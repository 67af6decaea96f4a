// SPDX-License-Identifier: Apache-2.0
// The host cost of one GPU-style await without a GPU: C coroutines on a pool of P workers
// each await, in a loop, a wait that the source reports finished from its second query on
// (so every await suspends once and is found by the next poll). This is the path a
// `co_await` on a stream takes after its marker is enqueued: submission to the reactor,
// suspension, discovery by an idle worker, hand-over to the executor and resumption.
//
//   cuawait-await_path_bench [--workers P] [--coroutines C] [--awaits N] [--timers 0|1]
// Prints ns per await (wall time x workers / awaits: the CPU time each await costs), with the
// pool polling the reactor alone and then, as a `runtime` wires it, a set of the reactor and
// a polled timer service with no sleep pending (the cost of polling the timers beside).

#include "cuawait/completion_reactor.hpp"
#include "cuawait/completion_source.hpp"
#include "cuawait/idle_source_set.hpp"
#include "cuawait/sync_wait.hpp"
#include "cuawait/task.hpp"
#include "cuawait/thread_pool.hpp"
#include "cuawait/timer.hpp"
#include "cuawait/when_all.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

//! Pending at the first query (the one made at submission), finished at the next.
class second_query_source final : public cuawait::completion_source {
public:
  cuawait::completion_status query(const cuawait::detail::wait_node& w) noexcept override {
    auto* asked = static_cast<std::atomic<int>*>(w.source_data);
    if (asked->fetch_add(1, std::memory_order_relaxed) == 0) {
      return {};
    }
    return {cuawait::completion_state::done, 0};
  }
  [[nodiscard]] bool parallel_queries() const noexcept override { return parallel; }
  bool parallel = false;
};

class one_wait {
public:
  one_wait(cuawait::completion_reactor& r, std::uintptr_t lane) : m_reactor(&r) {
    m_wait.node().lane_key = reinterpret_cast<const void*>(lane);
    m_wait.node().source_data = &m_asked;
    m_wait.node().operation = "bench";
  }
  bool await_ready() const noexcept { return false; }
  bool await_suspend(std::coroutine_handle<> h) noexcept { return m_wait.suspend(*m_reactor, h); }
  void await_resume() noexcept { (void)m_wait.finish(); }

private:
  cuawait::completion_reactor* m_reactor;
  std::atomic<int> m_asked{0};
  cuawait::detail::reactor_wait m_wait;
};

cuawait::task<void> pipeline(cuawait::thread_pool& pool, cuawait::completion_reactor& r,
                             std::uintptr_t lane, int awaits) {
  co_await pool.schedule();
  for (int i = 0; i < awaits; ++i) {
    co_await one_wait(r, lane);
  }
}

void wake(void* pool) noexcept { static_cast<cuawait::thread_pool*>(pool)->wake_idle_poller(); }

double run(std::size_t workers, int coroutines, int awaits, bool parallel, bool with_timers) {
  second_query_source src;
  src.parallel = parallel;
  cuawait::reactor_options o;
  o.start_thread = false;
  cuawait::completion_reactor reactor(src, o);
  cuawait::timer_service timers{cuawait::timer_service::polled};
  cuawait::idle_source_set both{&reactor, &timers};
  cuawait::thread_pool pool(workers);
  reactor.set_idle_waker(&wake, &pool);
  pool.set_idle_source(with_timers ? static_cast<cuawait::idle_source*>(&both) : &reactor);
  std::vector<cuawait::task<void>> all;
  for (int c = 0; c < coroutines; ++c) {
    all.push_back(pipeline(pool, reactor, static_cast<std::uintptr_t>(c + 1), awaits));
  }
  const auto t0 = std::chrono::steady_clock::now();
  cuawait::sync_wait(cuawait::when_all(std::move(all)));
  const double ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
  pool.set_idle_source(nullptr);
  reactor.set_idle_waker(nullptr, nullptr);
  pool.shutdown();
  return ns * static_cast<double>(workers) / (static_cast<double>(coroutines) * awaits);
}

} // namespace

int main(int argc, char** argv) {
  std::size_t workers = 2;
  int coroutines = 2;
  int awaits = 200'000;
  int timers_from = 0; // --timers 1: only the run with the timers (e.g. under callgrind)
  int timers_to = 1;   // --timers 0: only the run without
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--workers") == 0) {
      workers = static_cast<std::size_t>(std::atoi(argv[i + 1]));
    } else if (std::strcmp(argv[i], "--coroutines") == 0) {
      coroutines = std::atoi(argv[i + 1]);
    } else if (std::strcmp(argv[i], "--awaits") == 0) {
      awaits = std::atoi(argv[i + 1]);
    } else if (std::strcmp(argv[i], "--timers") == 0) {
      timers_from = timers_to = std::atoi(argv[i + 1]) != 0 ? 1 : 0;
    }
  }
  for (int t = timers_from; t <= timers_to; ++t) {
    const bool with_timers = t != 0;
    for (const bool parallel : {false, true}) {
      const double ns = run(workers, coroutines, awaits, parallel, with_timers);
      std::printf("await path%s: %zu workers, %d coroutines, %s queries: %.0f ns of CPU per "
                  "await\n",
                  with_timers ? " (reactor + timers)" : "", workers, coroutines,
                  parallel ? "parallel" : "serial", ns);
    }
  }
}
