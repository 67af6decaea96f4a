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

#include <algorithm>
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
  engine_t e(backend, cuawait::batch_options{
                          .max_batch = 32, .max_wait = max_wait, .submit_when_idle = false});
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

template <class Backend>
cuawait::task<void> pipeline(cuawait::thread_pool& pool,
                             cuawait::cuda::detail::batch_engine<Backend>& e, int jobs) {
  co_await pool.schedule();
  for (int i = 0; i < jobs; ++i) {
    benchmark::DoNotOptimize(co_await cuawait::cuda::detail::batch_awaiter<Backend>(e, i));
  }
}

//! `pipelines` coroutines on a pool of `threads` workers, each submitting `per_pipeline`
//! jobs one after another to a batcher over `backend`, driven by its engine thread or (with
//! `polled`) by the workers that poll a thread-less completion reactor. Sets `per_job` (time
//! per job, all pipelines together) and `mean_batch`; returns the batcher's counters.
template <class Backend>
cuawait::batch_stats run_pipelines(benchmark::State& state, Backend& backend,
                                   cuawait::batch_options options, bool polled, int pipelines,
                                   std::size_t threads, int per_pipeline) {
  no_waits source;
  cuawait::reactor_options ro;
  ro.start_thread = false;
  cuawait::completion_reactor reactor(source, ro);
  cuawait::thread_pool pool(threads);
  reactor.set_idle_waker(&wake_pool, &pool);
  pool.set_idle_source(&reactor);
  cuawait::batch_stats st;
  {
    cuawait::cuda::detail::batch_engine<Backend> e(backend, options, polled ? &reactor : nullptr);
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
  const auto jobs = state.iterations() * pipelines * per_pipeline;
  state.SetItemsProcessed(jobs);
  state.counters["mean_batch"] = st.mean_batch();
  state.counters["per_job"] = benchmark::Counter(
      static_cast<double>(jobs), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  return st;
}

//! The host cost per job of the batch path itself: `pipelines` coroutines on a pool of
//! `threads` workers, each submitting jobs one after another to a batcher whose batches
//! finish at once, the engine driven by its own thread (driver 0) or by the workers that
//! poll the completion reactor (driver 1). Time per job, all pipelines together.
void bm_pool_jobs(benchmark::State& state) {
  instant_backend backend;
  (void)run_pipelines(state, backend,
                      cuawait::batch_options{.max_batch = 32,
                                             .max_wait = std::chrono::microseconds(5),
                                             .submit_when_idle = false},
                      state.range(0) != 0, static_cast<int>(state.range(1)),
                      static_cast<std::size_t>(state.range(2)), 2000);
}
BENCHMARK(bm_pool_jobs)
    ->ArgNames({"polled", "pipelines", "threads"})
    ->ArgsProduct({{0, 1}, {4, 64}, {2}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

//! A GPU stand-in that runs one batch at a time: a batch finishes `fixed_ns + per_job_ns * n`
//! after the later of its submission and the previous batch's end (8 µs + 1.3 µs per job,
//! about a 64 KiB job's PCIe time on the H200 plus a launch).
struct timed_backend {
  using job_type = int;
  struct ticket {
    std::uint64_t ready_ns;
  };
  static std::uint64_t now_ns() noexcept {
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          std::chrono::steady_clock::now().time_since_epoch())
                                          .count());
  }
  void thread_init() {}
  ticket submit(std::span<int* const> jobs) {
    const std::uint64_t start = std::max(now_ns(), busy_until);
    busy_until = start + fixed_ns + per_job_ns * jobs.size();
    return {busy_until};
  }
  bool done(ticket& t) { return now_ns() >= t.ready_ns; }
  static constexpr std::uint64_t fixed_ns = 8'000;
  static constexpr std::uint64_t per_job_ns = 1'300;
  std::uint64_t busy_until = 0; // submit runs on one thread at a time
};

//! Jobs on a GPU stand-in with a cost per batch and per job (`timed_backend`), waiting for
//! company (`max_wait` 20 µs) or going at once when none of the batcher's batches is in
//! flight (idle 1: `submit_when_idle`). Time per job, all pipelines together; `floor` is the
//! stand-in's per-job time with every batch full.
void bm_gpu_standin(benchmark::State& state) {
  timed_backend backend;
  const cuawait::batch_stats st =
      run_pipelines(state, backend,
                    cuawait::batch_options{.max_batch = 32,
                                           .max_wait = std::chrono::microseconds(20),
                                           .submit_when_idle = state.range(0) != 0},
                    state.range(1) != 0, static_cast<int>(state.range(2)), 2, 1000);
  state.counters["wait_us"] = st.mean_wait_us();
  state.counters["p99_us"] = st.batching_quantile_us(0.99);
  state.counters["flight_us"] = st.mean_flight_us();
  state.counters["floor_us"] =
      static_cast<double>(timed_backend::fixed_ns / 32 + timed_backend::per_job_ns) / 1e3;
}
BENCHMARK(bm_gpu_standin)
    ->ArgNames({"idle", "polled", "pipelines"})
    ->ArgsProduct({{0, 1}, {0, 1}, {1, 4, 16, 64}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

} // namespace

BENCHMARK_MAIN();
