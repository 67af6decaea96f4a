// SPDX-License-Identifier: Apache-2.0
// What the batcher's engine itself costs a job that arrives alone, with a stand-in backend
// whose batches finish at once (so there is never back-pressure): the wait for company
// (`max_wait`) plus the engine thread's reaction, from an idle (sleeping) engine and from a
// busy (spinning) one. The GPU figure, with back-pressure reported apart, comes from
// cuawait-bench-pipeline (docs/PERFORMANCE.md).

#include <cuawait/completion_reactor.hpp>
#include <cuawait/completion_source.hpp>
#include <cuawait/cuda/detail/batch_engine.hpp>
#include <cuawait/sync_wait.hpp>
#include <cuawait/task.hpp>
#include <cuawait/thread_pool.hpp>
#include <cuawait/when_all.hpp>

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <thread>
#include <vector>

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

//! A source with no waits of its own: the reactor only carries the engine as a companion.
struct no_waits final : cuawait::completion_source {
  cuawait::completion_status query(const cuawait::detail::wait_node&) noexcept override {
    return {cuawait::completion_state::done, 0};
  }
};

void wake_pool(void* pool) noexcept {
  static_cast<cuawait::thread_pool*>(pool)->wake_idle_poller();
}

cuawait::task<void> pipeline(cuawait::thread_pool& pool, engine_t& e, int jobs) {
  co_await pool.schedule();
  for (int i = 0; i < jobs; ++i) {
    benchmark::DoNotOptimize(co_await awaiter_t(e, i));
  }
}

//! The host cost per job of the batch path itself: `pipelines` coroutines on a pool of
//! `threads` workers, each submitting jobs one after another to a batcher whose batches
//! finish at once, the engine driven by its own thread (driver 0) or by the workers that
//! poll the completion reactor (driver 1). Time per job, all pipelines together.
void bm_pool_jobs(benchmark::State& state) {
  const bool polled = state.range(0) != 0;
  const auto pipelines = static_cast<int>(state.range(1));
  const auto threads = static_cast<std::size_t>(state.range(2));
  constexpr int per_pipeline = 2000;
  instant_backend backend;
  no_waits source;
  cuawait::reactor_options ro;
  ro.start_thread = false;
  cuawait::completion_reactor reactor(source, ro);
  cuawait::thread_pool pool(threads);
  reactor.set_idle_waker(&wake_pool, &pool);
  pool.set_idle_source(&reactor);
  cuawait::batch_stats st;
  {
    engine_t e(backend,
               cuawait::batch_options{.max_batch = 32, .max_wait = std::chrono::microseconds(5)},
               polled ? &reactor : nullptr);
    for (auto _ : state) {
      std::vector<cuawait::task<void>> all;
      all.reserve(static_cast<std::size_t>(pipelines));
      for (int p = 0; p < pipelines; ++p) {
        all.push_back(pipeline(pool, e, per_pipeline));
      }
      cuawait::sync_wait(cuawait::when_all(std::move(all)));
    }
    st = e.stats();
  }
  pool.set_idle_source(nullptr);
  reactor.set_idle_waker(nullptr, nullptr);
  pool.shutdown();
  state.SetItemsProcessed(state.iterations() * pipelines * per_pipeline);
  state.counters["mean_batch"] = st.mean_batch();
  state.counters["per_job"] =
      benchmark::Counter(static_cast<double>(state.iterations() * pipelines * per_pipeline),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(bm_pool_jobs)
    ->ArgNames({"polled", "pipelines", "threads"})
    ->ArgsProduct({{0, 1}, {4, 64}, {2}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

} // namespace

BENCHMARK_MAIN();
