// SPDX-License-Identifier: Apache-2.0
// Core runtime benchmarks: the cost of awaiting a task, of a task's whole life, of a hop
// onto the thread pool, and the memory a suspended task holds. docs/PERFORMANCE.md
// records the figures with the command that produced them.

#include "common/detached.hpp"
#include <cuawait/detail/trampoline.hpp>
#include <cuawait/sync_wait.hpp>
#include <cuawait/task.hpp>
#include <cuawait/thread_pool.hpp>
#include <cuawait/timer.hpp>

#include <benchmark/benchmark.h>

#include <malloc.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <latch>
#include <optional>
#include <stop_token>
#include <thread>
#include <vector>

namespace ca = cuawait;
using clock_type = std::chrono::steady_clock;

namespace {

ca::task<int> trivial(int i) { co_return i; }

//! Runs a task to completion on this thread; valid for tasks that never truly suspend.
template <class T>
void run_inline(ca::task<T>& t) {
  ca::detail::resume(t.handle());
  if (!t.is_ready()) {
    std::terminate();
  }
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// --- co_await of a task that completes synchronously, frames allocated beforehand ------------

ca::task<std::int64_t> await_all(std::vector<ca::task<int>>& tasks) {
  std::int64_t sum = 0;
  for (ca::task<int>& t : tasks) {
    sum += co_await std::move(t);
  }
  co_return sum;
}

void bm_await_ready_made_task(benchmark::State& state) {
  const auto batch = static_cast<std::size_t>(state.range(0));
  std::vector<ca::task<int>> tasks;
  tasks.reserve(batch);
  for (auto _ : state) {
    for (std::size_t i = 0; i < batch; ++i) {
      tasks.push_back(trivial(static_cast<int>(i)));
    }
    auto driver = await_all(tasks);
    // Thread CPU time, so that a shared machine's preemptions do not count.
    const double start = thread_cpu_seconds();
    run_inline(driver); // only the awaits are timed
    const double stop = thread_cpu_seconds();
    benchmark::DoNotOptimize(driver.handle().promise().result());
    state.SetIterationTime(stop - start);
    tasks.clear(); // frees the frames, untimed
  }
  state.counters["per_await"] =
      benchmark::Counter(static_cast<double>(batch), benchmark::Counter::kIsIterationInvariantRate |
                                                         benchmark::Counter::kInvert);
}
BENCHMARK(bm_await_ready_made_task)->Arg(1024)->UseManualTime();

// --- create + run + destroy, frame allocation included --------------------------------------

ca::task<std::int64_t> create_and_await(int n) {
  std::int64_t sum = 0;
  for (int i = 0; i < n; ++i) {
    sum += co_await trivial(i);
  }
  co_return sum;
}

void bm_task_create_run_destroy(benchmark::State& state) {
  const auto n = static_cast<int>(state.range(0));
  for (auto _ : state) {
    auto driver = create_and_await(n);
    run_inline(driver);
    benchmark::DoNotOptimize(driver.handle().promise().result());
  }
  state.counters["per_task"] = benchmark::Counter(n, benchmark::Counter::kIsIterationInvariantRate |
                                                         benchmark::Counter::kInvert);
}
BENCHMARK(bm_task_create_run_destroy)->Arg(1024);

// The same with a live stop token (as under when_any): each child copies the token.
void bm_task_create_run_destroy_with_stop_token(benchmark::State& state) {
  const auto n = static_cast<int>(state.range(0));
  std::stop_source source;
  for (auto _ : state) {
    auto driver = create_and_await(n).with_stop_token(source.get_token());
    run_inline(driver);
    benchmark::DoNotOptimize(driver.handle().promise().result());
  }
  state.counters["per_task"] = benchmark::Counter(n, benchmark::Counter::kIsIterationInvariantRate |
                                                         benchmark::Counter::kInvert);
}
BENCHMARK(bm_task_create_run_destroy_with_stop_token)->Arg(1024);

// The allocator's share of the above: one malloc + free of a frame-sized block.
void bm_frame_sized_malloc_free(benchmark::State& state) {
  const auto size = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    void* p = ::operator new(size);
    benchmark::DoNotOptimize(p);
    ::operator delete(p);
  }
}
BENCHMARK(bm_frame_sized_malloc_free)->Arg(64)->Arg(128);

// --- hop onto the pool with every worker busy hopping ----------------------------------------

using cuawait::test::detached; // frees its frame when it ends

//! Hops `hops` times, recording each hop's latency (clock read to clock read, so one
//! clock read, ~20 ns, is included in every sample).
detached hopper(ca::thread_pool& pool, std::vector<std::int64_t>& samples, int hops,
                std::latch& done) {
  co_await pool.schedule();
  for (int i = 0; i < hops; ++i) {
    const auto t0 = clock_type::now();
    co_await pool.schedule();
    samples.push_back(
        std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now() - t0).count());
  }
  done.count_down();
}

void report_percentiles(benchmark::State& state, std::vector<std::int64_t>& all) {
  if (all.empty()) {
    return;
  }
  auto at = [&](double q) {
    auto it = all.begin() + static_cast<std::ptrdiff_t>(q * static_cast<double>(all.size() - 1));
    std::nth_element(all.begin(), it, all.end());
    return static_cast<double>(*it);
  };
  state.counters["median_ns"] = at(0.50);
  state.counters["p99_ns"] = at(0.99);
  state.counters["p999_ns"] = at(0.999);
}

void bm_pool_hop_all_workers_busy(benchmark::State& state) {
  const auto workers = static_cast<std::size_t>(state.range(0));
  const auto coroutines = workers * static_cast<std::size_t>(state.range(1));
  constexpr int hops = 10'000;
  ca::thread_pool pool(workers);
  // One cache line per sample vector: hoppers on different workers must not share one.
  struct alignas(64) padded_samples {
    std::vector<std::int64_t> v;
  };
  std::vector<padded_samples> samples(coroutines);
  for (auto& s : samples) {
    s.v.reserve(hops);
  }
  for (auto _ : state) {
    for (auto& s : samples) {
      s.v.clear(); // the last iteration's samples are reported
    }
    std::latch done(static_cast<std::ptrdiff_t>(coroutines));
    const auto start = clock_type::now();
    for (auto& s : samples) {
      hopper(pool, s.v, hops, done);
    }
    done.wait();
    state.SetIterationTime(std::chrono::duration<double>(clock_type::now() - start).count());
  }
  std::vector<std::int64_t> all;
  for (auto& s : samples) {
    all.insert(all.end(), s.v.begin(), s.v.end());
  }
  report_percentiles(state, all);
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(coroutines) * hops);
}
// Args: workers, hopping coroutines per worker. 0 workers = hardware_concurrency.
void hop_args(benchmark::internal::Benchmark* b) {
  const auto hw = static_cast<std::int64_t>(std::max(1U, std::thread::hardware_concurrency()));
  b->ArgNames({"workers", "per_worker"});
  b->Args({1, 1})->Args({hw, 1})->Args({hw, 4});
}
BENCHMARK(bm_pool_hop_all_workers_busy)->Apply(hop_args)->UseManualTime();

// --- timer lateness: a threaded timer_service against a polled one ------------------------

//! One coroutine on a pool of 2 sleeps `sleeps` times for 200 us; each sample is how late it
//! ran after its deadline (clock read to clock read). Arg 0: the service has its own thread;
//! 1: the pool's idle workers poll it (as in a runtime).
void bm_sleep_lateness(benchmark::State& state) {
  const bool polled = state.range(0) != 0;
  constexpr int sleeps = 200;
  std::optional<ca::timer_service> timers;
  if (polled) {
    timers.emplace(ca::timer_service::polled);
  } else {
    timers.emplace();
  }
  ca::thread_pool pool(2);
  if (polled) {
    timers->set_idle_waker(
        [](void* p) noexcept { static_cast<ca::thread_pool*>(p)->wake_parked_poller(); }, &pool);
    pool.set_idle_source(&*timers);
  }
  std::vector<std::int64_t> late;
  late.reserve(sleeps);
  for (auto _ : state) {
    late.clear();
    const auto start = clock_type::now();
    ca::sync_wait([&]() -> ca::task<void> {
      co_await pool.schedule();
      for (int i = 0; i < sleeps; ++i) {
        const auto deadline = clock_type::now() + std::chrono::microseconds(200);
        co_await timers->sleep_until(deadline);
        late.push_back(
            std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now() - deadline)
                .count());
      }
    }());
    state.SetIterationTime(std::chrono::duration<double>(clock_type::now() - start).count());
  }
  pool.set_idle_source(nullptr);
  report_percentiles(state, late);
}
BENCHMARK(bm_sleep_lateness)->ArgName("polled")->Arg(0)->Arg(1)->UseManualTime()->Iterations(3);

// --- memory held by suspended tasks ----------------------------------------------------------

struct parking_lot {
  std::vector<std::coroutine_handle<>> waiting;
};

struct parking_awaiter {
  parking_lot& lot;
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> h) { lot.waiting.push_back(h); }
  void await_resume() const noexcept {}
};

ca::task<void> suspended(parking_lot& lot) { co_await parking_awaiter{lot}; }

std::int64_t resident_bytes() {
  long pages = 0;
  long resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) {
      resident = 0;
    }
    std::fclose(f);
  }
  return static_cast<std::int64_t>(resident) * sysconf(_SC_PAGESIZE);
}

void bm_suspended_tasks_memory(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  double rss_per_task = 0;
  double heap_per_task = 0;
  for (auto _ : state) {
    parking_lot lot;
    lot.waiting.reserve(n);
    std::vector<ca::task<void>> tasks;
    tasks.reserve(n);
    // Touch the bookkeeping vectors so that only the frames show in the delta.
    std::fill_n(std::back_inserter(lot.waiting), n, std::coroutine_handle<>{});
    lot.waiting.clear();
    const std::int64_t rss0 = resident_bytes();
    const auto heap0 = static_cast<std::int64_t>(mallinfo2().uordblks);
    for (std::size_t i = 0; i < n; ++i) {
      tasks.push_back(suspended(lot));
      ca::detail::resume(tasks.back().handle()); // runs to the parking awaiter
    }
    const std::int64_t rss1 = resident_bytes();
    const auto heap1 = static_cast<std::int64_t>(mallinfo2().uordblks);
    // Tasks' own handles: 8 bytes each, reserved and touched by push_back, so counted.
    rss_per_task = static_cast<double>(rss1 - rss0) / static_cast<double>(n);
    heap_per_task = static_cast<double>(heap1 - heap0) / static_cast<double>(n);
    for (std::coroutine_handle<> h : lot.waiting) {
      ca::detail::resume(h);
    }
    tasks.clear();
  }
  state.counters["rss_bytes_per_task"] = rss_per_task;
  state.counters["heap_bytes_per_task"] = heap_per_task;
  state.counters["rss_MB_total"] = rss_per_task * static_cast<double>(n) / 1e6;
}
BENCHMARK(bm_suspended_tasks_memory)->Arg(1'000'000)->Iterations(1)->Unit(benchmark::kMillisecond);

} // namespace

BENCHMARK_MAIN();
