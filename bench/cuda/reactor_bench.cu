// SPDX-License-Identifier: Apache-2.0
// cuawait-bench-reactor [--quick] [--strategy NAME] [--scaling CYCLES] [--idle COUNTS]
// Launch -> coroutine resumed, per strategy, against raw cudaEventQuery spinning and
// cudaStreamSynchronize; long kernels; reactor CPU per completion with 10,000 waits over
// 100 streams; co_await of finished work; idle CPU with 1,000 waiters on a 1 s kernel.
// --scaling N: instead, the reactor's scaling over 100 to 10,000 streams and N create /
// await / destroy cycles of streams and of events (see `scaling`).
// --idle N,M,...: instead, only the stalled-stream figures at those stream counts (`idle_poll`).

#include <cuawait/cuda.hpp>

#include <cuda.h>

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

namespace cu = cuawait::cuda;
using clk = std::chrono::steady_clock;

namespace {

__global__ void empty_kernel() {}
__global__ void sleep_kernel(long long ns) {
  const long long start = clock64();
  // ~1.98 GHz on H200; good enough for "about this long".
  while (clock64() - start < ns * 2) {
  }
}
double us(clk::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}
double pct(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[static_cast<std::size_t>(q * (v.size() - 1))];
}
double cpu_seconds() {
  rusage r{};
  getrusage(RUSAGE_SELF, &r);
  return r.ru_utime.tv_sec + r.ru_stime.tv_sec + (r.ru_utime.tv_usec + r.ru_stime.tv_usec) * 1e-6;
}
double thread_cpu_ns() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

//! Eager fire-and-forget coroutine.
struct detached {
  struct promise_type {
    detached get_return_object() { return {}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() {}
    void unhandled_exception() { std::terminate(); }
  };
};

void raw_baselines(int iters) {
  cu::stream s;
  cu::event e;
  std::vector<double> spin, sync;
  for (int i = 0; i < iters; ++i) {
    auto t0 = clk::now();
    empty_kernel<<<1, 1, 0, s.get()>>>();
    (void)cudaEventRecord(e.get(), s.get());
    while (cudaEventQuery(e.get()) == cudaErrorNotReady) {
    }
    spin.push_back(us(clk::now() - t0));
    t0 = clk::now();
    empty_kernel<<<1, 1, 0, s.get()>>>();
    (void)cudaStreamSynchronize(s.get());
    sync.push_back(us(clk::now() - t0));
  }
  std::printf("raw  empty kernel, spin cudaEventQuery: median %.2f us p90 %.2f us\n", median(spin),
              pct(spin, 0.9));
  std::printf("raw  empty kernel, cudaStreamSynchronize: median %.2f us p90 %.2f us\n",
              median(sync), pct(sync, 0.9));
}

//! 10,000 waits over `streams` streams finishing together: host time per completion on a
//! reactor without a thread, polled here only once the GPU finished everything (the
//! reactor's work: queries, resolution, inline resumption; not time spent spinning while the
//! GPU works). The waits are launched while nothing polls, so all of them are pending when
//! the first poll runs; no gate holds the GPU (a gate in front of thousands of streams fills
//! the GPU's queues and blocks the launching thread).
void completions_together(cu::strategy st, int streams) {
  constexpr int waits = 10000;
  cuawait::reactor_options manual;
  manual.start_thread = false;
  cu::device_context ctx(cu::device_context_options{.completion = st, .reactor = manual});
  const cu::context_scope here(ctx);
  cu::gpu_reactor& polled = ctx.reactor();
  std::vector<cu::stream> ss(streams);
  std::atomic<int> done{0};
  for (int i = 0; i < waits; ++i) {
    [](cu::stream_ref x, std::atomic<int>& d) -> detached {
      co_await x.launch(empty_kernel, dim3(1), dim3(1));
      d.fetch_add(1);
    }(ss[i % streams], done);
  }
  (void)cudaDeviceSynchronize();
  const int early = done.load();
  const auto before = polled.stats();
  const double c0 = thread_cpu_ns();
  while (done.load() < waits) {
    polled.reactor().poll();
  }
  const double c1 = thread_cpu_ns();
  const auto after = polled.stats();
  const int resolved = waits - early;
  std::printf("%-13s %d waits finished together over %d streams: %.3f us host time per "
              "completion, %.2f queries per completion (%d resolved by the polls)\n",
              cu::to_string(st), waits, streams, (c1 - c0) / 1000.0 / std::max(resolved, 1),
              double(after.queries - before.queries) / std::max(resolved, 1), resolved);
  std::fflush(stdout);
}

using wait_value32_fn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

//! cuStreamWaitValue32 from the driver (the runtime has no such call).
wait_value32_fn load_wait_value32() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &fn, 12000, cudaEnableDefault,
                                       &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    return nullptr;
  }
  return reinterpret_cast<wait_value32_fn>(fn);
}

//! The cost of a poll while `streams` streams each hold one wait that cannot finish yet, and
//! while they finish one at a time. Stream i waits (cuStreamWaitValue32, "at least i + 1")
//! for a host-mapped counter that the host raises; one coroutine per stream awaits the
//! stream. First every stream awaits once with nothing to wait for (the steady state of a
//! program that uses that many streams: the strategy knows them all). Then:
//! - idle: the counter stays at 0; host time and source queries per poll, polling back to
//!   back for 200 ms (mean with probes, median without);
//! - one at a time: the host raises the counter by one and polls until that stream's wait
//!   resumes, 500 times; host time and queries per poll, host time per completion.
//! Waits that the GPU cannot start do not hold a kernel slot (a gate kernel per stream
//! would), but the GPU's queues still fill at some thousands of streams (on the H100 the
//! 5,000-stream set-up never returned without the watchdog): the stream at which the launching
//! thread blocked is reported (a watchdog raises the counter to let it go on).
void idle_poll(cu::strategy st, int streams) {
  static const wait_value32_fn wait_value = load_wait_value32();
  if (wait_value == nullptr) {
    std::printf("%-13s idle poll: cuStreamWaitValue32 not available\n", cu::to_string(st));
    return;
  }
  cuawait::reactor_options manual;
  manual.start_thread = false;
  cu::device_context ctx(cu::device_context_options{.completion = st, .reactor = manual});
  const cu::context_scope here(ctx);
  cu::gpu_reactor& polled = ctx.reactor();
  const auto t_start = clk::now();
  std::vector<cu::stream> ss(streams);
  std::atomic<int> done{0};
  const auto await_each = [&] {
    for (int i = 0; i < streams; ++i) {
      [](cu::stream_ref y, std::atomic<int>& d) -> detached {
        co_await y;
        d.fetch_add(1);
      }(ss[i], done);
    }
  };
  await_each(); // the warm-up round: nothing to wait for
  while (done.load() < streams) {
    polled.reactor().poll();
  }
  done.store(0);
  std::uint32_t* counter = nullptr;
  std::uint32_t* counter_dev = nullptr;
  (void)cudaHostAlloc(reinterpret_cast<void**>(&counter), sizeof(std::uint32_t),
                      cudaHostAllocMapped);
  std::atomic_ref<std::uint32_t> raised(*counter);
  raised.store(0);
  (void)cudaHostGetDevicePointer(reinterpret_cast<void**>(&counter_dev), counter, 0);
  // A full GPU queue blocks the launching thread until the GPU makes room, which it never
  // does while the counter stays at 0: a watchdog raises it when the set-up stalls for 1 s.
  std::atomic<int> next{0};
  std::atomic<int> blocked_at{-1}; // the stream whose set-up waited for the GPU's queue
  std::jthread watchdog([&](std::stop_token stop) {
    int seen = -1;
    auto since = clk::now();
    while (!stop.stop_requested() && blocked_at.load() < 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      const int now = next.load();
      if (now != seen) {
        seen = now;
        since = clk::now();
      } else if (now < streams && clk::now() - since > std::chrono::seconds(1)) {
        blocked_at.store(now);
        raised.store(static_cast<std::uint32_t>(streams)); // let the rest go on
      }
    }
  });
  for (int i = 0; i < streams; ++i) {
    (void)wait_value(ss[i].get(), reinterpret_cast<CUdeviceptr>(counter_dev),
                     static_cast<cuuint32_t>(i + 1), 0 /* CU_STREAM_WAIT_VALUE_GEQ */);
    [](cu::stream_ref y, std::atomic<int>& d) -> detached {
      co_await y;
      d.fetch_add(1);
    }(ss[i], done);
    next.store(i + 1);
  }
  watchdog.request_stop();
  watchdog.join();
  const double setup_s = std::chrono::duration<double>(clk::now() - t_start).count();
  const char* what = st == cu::strategy::timeline
                         ? "memory reads (doorbells past 512 streams), plus probes after a stall"
                         : "driver calls";
  if (blocked_at.load() >= 0) {
    std::printf("%-13s %d streams: not measured, the launching thread blocked on a full GPU "
                "queue at stream %d (set-up %.2f s)\n",
                cu::to_string(st), streams, blocked_at.load(), setup_s);
  } else {
    // Polls back to back for 200 ms: long enough to hold many probe periods (a probe, a
    // driver call per lane, comes after a stall and then at most a tenth of the time), so
    // the mean carries probes at their real rate; the median is a poll without one.
    int polls = 0;
    auto q0 = polled.stats().queries;
    double c0 = thread_cpu_ns();
    std::vector<double> each;
    each.reserve(1 << 20);
    for (const auto p0 = clk::now(); clk::now() - p0 < std::chrono::milliseconds(200); ++polls) {
      const auto t0 = clk::now();
      polled.reactor().poll();
      if (each.size() < each.capacity()) {
        each.push_back(std::chrono::duration<double, std::micro>(clk::now() - t0).count());
      }
    }
    double c1 = thread_cpu_ns();
    std::sort(each.begin(), each.end());
    const double median_us = each.empty() ? 0.0 : each[each.size() / 2];
    const double max_us = each.empty() ? 0.0 : each.back();
    std::printf("%-13s %d streams, one wait each, none finished: %.3f us host time per poll "
                "(mean over 200 ms, probes included), median %.3f us, longest %.1f us, %.2f "
                "queries per poll (%s; %d polls, set-up %.2f s)%s\n",
                cu::to_string(st), streams, (c1 - c0) / 1000.0 / polls, median_us, max_us,
                double(polled.stats().queries - q0) / polls, what, polls, setup_s,
                done.load() == 0 ? "" : " INVALID: a wait finished");
    const int ones = std::min(500, streams);
    polls = 0;
    q0 = polled.stats().queries;
    c0 = thread_cpu_ns();
    const auto p0 = clk::now();
    for (int k = 1; k <= ones && clk::now() - p0 < std::chrono::seconds(5); ++k) {
      raised.store(static_cast<std::uint32_t>(k));
      while (done.load() < k && clk::now() - p0 < std::chrono::seconds(5)) {
        polled.reactor().poll();
        ++polls;
      }
    }
    c1 = thread_cpu_ns();
    std::printf("%-13s %d streams stalled, finishing one at a time (%d): %.2f us host time "
                "per poll, %.1f queries per poll, %.2f us per completion (%d polls)%s\n",
                cu::to_string(st), streams, ones, (c1 - c0) / 1000.0 / std::max(polls, 1),
                double(polled.stats().queries - q0) / std::max(polls, 1),
                (c1 - c0) / 1000.0 / std::max(done.load(), 1), polls,
                done.load() == ones ? "" : " INVALID: not all finished, or more than raised");
  }
  std::fflush(stdout);
  raised.store(static_cast<std::uint32_t>(streams));
  while (done.load() < streams) {
    polled.reactor().poll();
  }
  (void)cudaDeviceSynchronize();
  (void)cudaFreeHost(counter);
}

void latency(cu::strategy st, int iters, bool quick) {
  cu::device_context ctx(cu::device_context_options{.completion = st});
  const cu::context_scope here(ctx);
  cu::gpu_reactor& r = ctx.reactor();
  cu::stream s;
  std::vector<double> lat;
  cuawait::sync_wait([&]() -> cuawait::task<void> {
    for (int i = 0; i < iters; ++i) {
      const auto t0 = clk::now();
      co_await s.launch(empty_kernel, dim3(1), dim3(1));
      lat.push_back(us(clk::now() - t0));
    }
  }());
  std::printf("%-13s empty kernel launch->resume: median %.2f us p90 %.2f us\n", cu::to_string(st),
              median(lat), pct(lat, 0.9));
  // Long kernels: resumption vs a raw cudaStreamSynchronize of the same kernel.
  for (const long long ns : {100'000LL, 1'000'000LL, 10'000'000LL}) {
    std::vector<double> extra;
    const int reps = quick ? 3 : 9;
    for (int i = 0; i < reps; ++i) {
      auto t0 = clk::now();
      sleep_kernel<<<1, 1, 0, s.get()>>>(ns);
      (void)cudaStreamSynchronize(s.get());
      const double raw = us(clk::now() - t0);
      double co = 0;
      cuawait::sync_wait([&]() -> cuawait::task<void> {
        const auto t1 = clk::now();
        co_await s.launch(sleep_kernel, dim3(1), dim3(1), ns);
        co = us(clk::now() - t1);
      }());
      extra.push_back(co - raw);
    }
    std::printf("%-13s %lld us kernel: resumed median %+.2f us vs raw cudaStreamSynchronize\n",
                cu::to_string(st), ns / 1000, median(extra));
  }
  // co_await of work that finished already.
  {
    (void)cudaStreamSynchronize(s.get());
    cu::event ev;
    s.record(ev);
    ev.sync();
    const int n = quick ? 2000 : 20000;
    double stream_us = 0, event_us = 0;
    cuawait::sync_wait([&]() -> cuawait::task<void> {
      auto t0 = clk::now();
      for (int i = 0; i < n; ++i) {
        co_await s;
      }
      stream_us = us(clk::now() - t0) / n;
      t0 = clk::now();
      for (int i = 0; i < n; ++i) {
        co_await ev;
      }
      event_us = us(clk::now() - t0) / n;
    }());
    std::printf("%-13s co_await idle stream: %.3f us; co_await finished event: %.3f us\n",
                cu::to_string(st), stream_us, event_us);
  }
  // Reactor CPU per completion: 10,000 waits pending over 100 streams.
  completions_together(st, 100);
  // Idle: 1,000 coroutines awaiting one 1 s kernel.
  {
    std::atomic<int> done{0};
    sleep_kernel<<<1, 1, 0, s.get()>>>(quick ? 300'000'000LL : 1'000'000'000LL);
    for (int i = 0; i < 1000; ++i) {
      [](cu::stream_ref x, std::atomic<int>& d) -> detached {
        co_await x;
        d.fetch_add(1);
        d.notify_all();
      }(s, done);
    }
    const double c0 = cpu_seconds();
    const auto t0 = clk::now();
    for (int seen = done.load(); seen < 1000; seen = done.load()) {
      done.wait(seen); // blocks in the kernel: this thread costs nothing
    }
    const double wall = std::chrono::duration<double>(clk::now() - t0).count();
    std::printf("%-13s idle, 1000 waiters on a %s kernel: %.2f%% of a core (process)\n",
                cu::to_string(st), quick ? "0.3 s" : "1 s", 100.0 * (cpu_seconds() - c0) / wall);
  }
  const auto stats = r.stats();
  std::printf("%-13s stats: completions %llu, queries %llu, sweeps %llu, parks %llu, resume p50 < "
              "%llu ns\n",
              cu::to_string(st), (unsigned long long)stats.completions,
              (unsigned long long)stats.queries, (unsigned long long)stats.sweeps,
              (unsigned long long)stats.parks,
              (unsigned long long)stats.resume_latency_quantile(0.5) * 2);
}

long rss_kib() {
  rusage r{};
  getrusage(RUSAGE_SELF, &r);
  return r.ru_maxrss; // peak, in KiB: flat memory keeps it from growing
}

//! `cycles` create / await / destroy cycles of streams, then of events, on a context of its
//! own: the time per cycle over the first and the last tenth (a cost that grows per cycle
//! shows as a difference), the peak RSS and the reactor's lane count along the way.
void cycles_run(cu::strategy st, long cycles) {
  cu::device_context ctx(cu::device_context_options{.completion = st});
  const cu::context_scope here(ctx);
  const long tenth = std::max(1L, cycles / 10);
  for (const bool events : {false, true}) {
    const long rss0 = rss_kib();
    long rss_half = 0;
    std::size_t lanes_half = 0;
    double first_tenth_us = 0, last_tenth_us = 0;
    const auto t0 = clk::now();
    auto slice0 = t0;
    cuawait::sync_wait([&]() -> cuawait::task<void> {
      cu::stream keep;
      for (long i = 0; i < cycles; ++i) {
        if (events) {
          cu::event e;
          keep.launch(empty_kernel, dim3(1), dim3(1));
          keep.record(e);
          co_await e;
        } else {
          cu::stream x;
          co_await x.launch(empty_kernel, dim3(1), dim3(1));
        }
        if (i == cycles / 2) {
          rss_half = rss_kib();
          lanes_half = ctx.reactor().reactor().lane_count();
        }
        if (i + 1 == tenth) {
          first_tenth_us = us(clk::now() - t0) / tenth;
        }
        if (i + 1 == cycles - tenth) {
          slice0 = clk::now();
        }
      }
      last_tenth_us = us(clk::now() - slice0) / tenth;
    }());
    const double secs = std::chrono::duration<double>(clk::now() - t0).count();
    std::printf("%-13s %ld create/await/destroy cycles of %s: %.1f us each (first tenth %.1f, "
                "last tenth %.1f); peak RSS %ld -> %ld (half-way) -> %ld KiB (end); reactor "
                "lanes half-way %zu, end %zu\n",
                cu::to_string(st), cycles, events ? "events" : "streams", secs * 1e6 / cycles,
                first_tenth_us, last_tenth_us, rss0, rss_half, rss_kib(), lanes_half,
                ctx.reactor().reactor().lane_count());
    std::fflush(stdout);
  }
}

//! Reactor scaling (`--scaling`): host time per completion when 10,000 waits finish
//! together over 100 and over 10,000 streams; create / await / destroy cycles of streams and
//! of events (flat memory: neither the peak RSS nor the lane count grows); host time and
//! source queries per poll while 100 to 10,000 streams each hold a wait that does not finish
//! (the cost an idle lane adds to a poll) and while they finish one at a time (`idle_poll`);
//! the cycles again, fewer, after those phases.
void scaling(cu::strategy st, long cycles) {
  completions_together(st, 100);
  completions_together(st, 10000);
  cycles_run(st, cycles);
  for (const int n : {100, 1000, 2000, 5000, 8000, 10000}) {
    idle_poll(st, n);
  }
  // Again after the many-stream phases: a per-cycle cost that grew would show here.
  cycles_run(st, std::max(1L, cycles / 5));
}

} // namespace

int main(int argc, char** argv) {
  bool quick = false;
  long scaling_cycles = 0;      // --scaling N: only the scaling figures, with N cycles
  std::vector<int> idle_counts; // --idle N,M,...: only the stalled-stream figures at those counts
  std::vector<cu::strategy> which = {cu::strategy::event_poll, cu::strategy::timeline,
                                     cu::strategy::stream_poll, cu::strategy::host_callback,
                                     cu::strategy::blocking_sync};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--scaling") == 0 && i + 1 < argc) {
      scaling_cycles = std::atol(argv[++i]);
    } else if (std::strcmp(argv[i], "--idle") == 0 && i + 1 < argc) {
      for (const char* p = argv[++i]; *p != '\0';) {
        char* end = nullptr;
        const long n = std::strtol(p, &end, 10);
        if (end == p || n <= 0) {
          std::fprintf(stderr, "--idle: expected stream counts such as 5000,10000\n");
          return 2;
        }
        idle_counts.push_back(static_cast<int>(n));
        p = *end == ',' ? end + 1 : end;
      }
    } else if (std::strcmp(argv[i], "--strategy") == 0 && i + 1 < argc) {
      which = {cu::parse_strategy(argv[++i]).value_or(cu::default_strategy)};
    }
  }
  if (cu::device_count() == 0) {
    std::printf("no CUDA device: skipping\n");
    return 0;
  }
  if (!idle_counts.empty()) {
    for (const auto st : which.size() == 1 ? which : std::vector{cu::default_strategy}) {
      for (const int n : idle_counts) {
        idle_poll(st, n);
      }
    }
    return 0;
  }
  if (scaling_cycles > 0) {
    for (const auto st : which.size() == 1 ? which : std::vector{cu::default_strategy}) {
      scaling(st, scaling_cycles);
    }
    return 0;
  }
  const int iters = quick ? 2000 : 20000;
  raw_baselines(iters);
  for (const auto st : which) {
    try {
      latency(st, iters, quick);
    } catch (const std::exception& e) {
      std::printf("%-13s failed: %s\n", cu::to_string(st), e.what());
    }
    std::fflush(stdout);
  }
}
