// SPDX-License-Identifier: Apache-2.0
// What the batcher's engine itself costs a job that arrives alone, with a stand-in backend
// whose batches finish at once (so there is never back-pressure): the wait for company
// (`max_wait`) plus the engine thread's reaction, from an idle (sleeping) engine and from a
// busy (spinning) one. The GPU figure, with back-pressure reported apart, comes from
// cuawait-bench-pipeline (docs/PERFORMANCE.md).

#include <cuawait/cuda/detail/batch_engine.hpp>
#include <cuawait/sync_wait.hpp>
#include <cuawait/task.hpp>

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <span>
#include <thread>

namespace {

struct instant_backend {
  using job_type = int;
  struct ticket {};
  void thread_init() {}
  ticket submit(std::span<int* const> jobs) {
    for (int* j : jobs) {
      *j += 1;
    }
    return {};
  }
  bool done(ticket&) { return true; }
};

using engine_t = cuawait::cuda::detail::batch_engine<instant_backend>;
using awaiter_t = cuawait::cuda::detail::batch_awaiter<instant_backend>;

cuawait::task<int> submit_one(engine_t& e, int job) { co_return co_await awaiter_t(e, job); }

//! One lone job at a time, each submitted `gap` µs after the previous one came back (the
//! gap untimed): with no gap the engine is still spinning when the next job comes; after
//! 1 ms it has gone to sleep and must be woken.
void bm_lone_job(benchmark::State& state) {
  instant_backend backend;
  const auto max_wait = std::chrono::microseconds(state.range(0));
  const auto gap = std::chrono::microseconds(state.range(1));
  engine_t e(backend, cuawait::batch_options{.max_batch = 32, .max_wait = max_wait});
  int job = 0;
  for (auto _ : state) {
    if (gap.count() > 0) {
      state.PauseTiming();
      std::this_thread::sleep_for(gap); // lets the engine go idle: the case measured
      state.ResumeTiming();
    }
    benchmark::DoNotOptimize(cuawait::sync_wait(submit_one(e, job++)));
  }
  const cuawait::batch_stats s = e.stats();
  state.counters["lone_jobs"] = static_cast<double>(s.lone_jobs);
  state.counters["batching_us_mean"] = s.mean_lone_batching_us();
  state.counters["batching_us_max"] = static_cast<double>(s.lone_batching_ns_max) / 1e3;
  state.counters["over_bound_us_mean"] =
      s.mean_lone_batching_us() - static_cast<double>(max_wait.count());
}
BENCHMARK(bm_lone_job)
    ->ArgNames({"max_wait_us", "gap_us"})
    ->Args({5, 0})
    ->Args({20, 0})
    ->Args({5, 1000})
    ->Args({20, 1000})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

} // namespace

BENCHMARK_MAIN();
