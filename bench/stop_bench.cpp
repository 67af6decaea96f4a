// SPDX-License-Identifier: Apache-2.0
// Stopping many pending reactor waits at once, without a GPU: N coroutines on a pool of P
// workers that polls the reactor (as in a `runtime`) each await work that never finishes,
// all sharing one `std::stop_source` (the CPU half of `cuawait-bench-cancel`'s `stop`
// figure). Measured: the time from `request_stop()` until every coroutine has resumed with
// `operation_cancelled`; and the same for `completion_reactor::stop_all()` (what
// `runtime::stop()` does to waits that carry no token).
//
//   cuawait-stop_bench [--workers P] [--waits N] [--runs R] [--no-throw 1]
// Prints the median, min and max over R runs of each. --no-throw 1: a stopped wait reports
// itself through a flag instead of throwing `operation_cancelled` (to see what the
// exceptions cost of the resumption).

#include "common/detached.hpp"
#include "cuawait/cancellation.hpp"
#include "cuawait/completion_reactor.hpp"
#include "cuawait/completion_source.hpp"
#include "cuawait/thread_pool.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <coroutine>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <stop_token>
#include <thread>
#include <vector>

namespace {

using clk = std::chrono::steady_clock;

//! Work that never finishes (a kernel held for the whole run).
class never_source final : public cuawait::completion_source {
public:
  cuawait::completion_status query(const cuawait::detail::wait_node&) noexcept override {
    return {};
  }
};

//! A GPU-style wait on that work, honouring a stop token (as `cuda::event_wait` does).
class held_wait {
public:
  held_wait(cuawait::completion_reactor& r, std::stop_token stop)
      : m_reactor(&r), m_stop(std::move(stop)) {
    m_wait.node().lane_key = reinterpret_cast<const void*>(std::uintptr_t{1}); // one lane
    m_wait.node().operation = "held";
  }
  bool await_ready() const noexcept { return false; }
  bool await_suspend(std::coroutine_handle<> h) noexcept {
    return !m_wait.stop_before_submit(m_stop) && m_wait.suspend(*m_reactor, h, m_stop);
  }
  bool await_resume() {
    (void)m_wait.finish();
    g_entered.fetch_add(1, std::memory_order_relaxed); // resumed by the library
    if (m_wait.stopped() && g_throw) {
      throw cuawait::operation_cancelled("held wait stopped");
    }
    return m_wait.stopped();
  }
  static inline bool g_throw = true;
  static inline std::atomic<int> g_entered{0};

private:
  cuawait::completion_reactor* m_reactor;
  std::stop_token m_stop;
  cuawait::detail::reactor_wait m_wait;
};

using cuawait::test::detached; // frees its frame when it ends

detached waiter(cuawait::thread_pool& pool, cuawait::completion_reactor& r, std::stop_token stop,
                std::atomic<int>& resumed) {
  co_await pool.schedule();
  try {
    (void)co_await held_wait(r, std::move(stop));
  } catch (const cuawait::operation_cancelled&) {
  }
  resumed.fetch_add(1, std::memory_order_relaxed);
}

void wake(void* pool) noexcept { static_cast<cuawait::thread_pool*>(pool)->wake_idle_poller(); }

std::vector<double> g_returned_ms; //!< how long the stop call itself took, per run
std::vector<double> g_cpu_ms;      //!< the CPU time of the stopping thread in that call
std::vector<double> g_entered_ms;  //!< until every wait's await_resume had run, per run

//! CPU time of the calling thread: unlike wall time, not inflated while it is preempted
//! (the workers and other programs share few cores with it).
double thread_cpu_ms() {
  timespec ts{};
  (void)clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

//! One run: `waits` coroutines pending, then stopped; returns ms from the stop to all resumed.
double run_once(cuawait::thread_pool& pool, cuawait::completion_reactor& r, int waits,
                bool use_stop_all) {
  std::stop_source stop;
  std::atomic<int> resumed{0};
  held_wait::g_entered.store(0);
  for (int i = 0; i < waits; ++i) {
    waiter(pool, r, use_stop_all ? std::stop_token{} : stop.get_token(), resumed);
  }
  while (r.pending() < static_cast<std::size_t>(waits)) {
    std::this_thread::yield();
  }
  const auto t0 = clk::now();
  const double cpu0 = thread_cpu_ms();
  if (use_stop_all) {
    (void)r.stop_all();
  } else {
    stop.request_stop();
  }
  g_returned_ms.push_back(std::chrono::duration<double, std::milli>(clk::now() - t0).count());
  g_cpu_ms.push_back(thread_cpu_ms() - cpu0);
  bool all_entered = false;
  while (resumed.load(std::memory_order_relaxed) < waits) {
    if (!all_entered && held_wait::g_entered.load(std::memory_order_relaxed) >= waits) {
      all_entered = true;
      g_entered_ms.push_back(std::chrono::duration<double, std::milli>(clk::now() - t0).count());
    }
    std::this_thread::yield(); // the workers need the cores more (2-core machines)
  }
  if (!all_entered) {
    g_entered_ms.push_back(std::chrono::duration<double, std::milli>(clk::now() - t0).count());
  }
  return std::chrono::duration<double, std::milli>(clk::now() - t0).count();
}

} // namespace

int main(int argc, char** argv) {
  std::size_t workers = 4;
  int waits = 10'000;
  int runs = 11;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--workers") == 0) {
      workers = static_cast<std::size_t>(std::atoi(argv[i + 1]));
    } else if (std::strcmp(argv[i], "--waits") == 0) {
      waits = std::atoi(argv[i + 1]);
    } else if (std::strcmp(argv[i], "--runs") == 0) {
      runs = std::max(1, std::atoi(argv[i + 1]));
    } else if (std::strcmp(argv[i], "--no-throw") == 0) {
      held_wait::g_throw = std::atoi(argv[i + 1]) == 0;
    }
  }
  never_source src;
  cuawait::reactor_options o;
  o.start_thread = false; // polled by the pool's idle workers, as in a runtime
  cuawait::completion_reactor reactor(src, o);
  cuawait::thread_pool pool(workers);
  reactor.set_idle_waker(&wake, &pool);
  pool.set_idle_source(&reactor);
  for (const bool use_stop_all : {false, true}) {
    std::vector<double> t;
    g_returned_ms.clear();
    g_cpu_ms.clear();
    g_entered_ms.clear();
    for (int i = 0; i < runs; ++i) {
      t.push_back(run_once(pool, reactor, waits, use_stop_all));
    }
    std::sort(t.begin(), t.end());
    std::sort(g_returned_ms.begin(), g_returned_ms.end());
    std::sort(g_cpu_ms.begin(), g_cpu_ms.end());
    std::sort(g_entered_ms.begin(), g_entered_ms.end());
    std::printf("stop %d pending waits, %zu workers, %s%s: all resumed after median %.3f ms, "
                "min %.3f, max %.3f (%d runs); every await_resume reached after %.3f ms; the "
                "call returned after %.3f ms, %.3f ms of its thread's CPU (medians)\n",
                waits, workers, use_stop_all ? "stop_all()" : "one std::stop_source",
                held_wait::g_throw ? "" : " (no exceptions)", t[t.size() / 2], t.front(), t.back(),
                runs, g_entered_ms[g_entered_ms.size() / 2],
                g_returned_ms[g_returned_ms.size() / 2], g_cpu_ms[g_cpu_ms.size() / 2]);
  }
  pool.set_idle_source(nullptr);
  reactor.set_idle_waker(nullptr, nullptr);
  pool.shutdown();
}
