// SPDX-License-Identifier: Apache-2.0
// cuawait-bench-cancel: what a cancellation costs and saves, one line per figure.
//   skip      100 gated 1 ms kernels, stopped once the first has started: how many ran, and
//             the time from the stop to an idle stream (plain launches for comparison)
//   overhead  host µs per gated unit against a plain launch (empty kernels), GPU time of
//             1,000 gated empty units, and 100 x 1 ms kernels gated-open / plain / raw CUDA
//   when_any  when_any(500 ms of GPU work, sleep_for(10 ms)): p50 / p99 / max over 200 trials
//   stop      10,000 GPU waits pending on a held stream: stop request to all resumed

#include <cuawait/cancellation.hpp>
#include <cuawait/cuda.hpp>
#include <cuawait/runtime.hpp>
#include <cuawait/sync_wait.hpp>
#include <cuawait/task.hpp>
#include <cuawait/timer.hpp>
#include <cuawait/when_any.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <optional>
#include <source_location>
#include <stop_token>
#include <string_view>
#include <thread>
#include <vector>

namespace ca = cuawait;
namespace cu = cuawait::cuda;
using clk = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

//! Marks `flags[i]` started (1), spins `cycles` (or until `*release`), marks it done (2).
__global__ void busy(volatile int* flags, int i, long long cycles, const volatile int* release) {
  flags[i] = 1;
  const long long start = clock64();
  while (clock64() - start < cycles && (release == nullptr || *release == 0)) {
  }
  flags[i] = 2;
}
__global__ void empty_kernel() {}

double ms(clk::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }
double us(clk::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }
double pct(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1))];
}

long long cycles_per_ms() {
  int khz = 0;
  (void)cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0);
  return khz > 0 ? khz : 1'980'000;
}

//! GPU time of what `enqueue()` puts on `s`, measured with events.
template <class F>
double gpu_ms(cu::stream_ref s, F&& enqueue) {
  cudaEvent_t a = nullptr, b = nullptr;
  (void)cudaEventCreate(&a);
  (void)cudaEventCreate(&b);
  (void)cudaEventRecord(a, s.get());
  enqueue();
  (void)cudaEventRecord(b, s.get());
  (void)cudaEventSynchronize(b);
  float t = 0;
  (void)cudaEventElapsedTime(&t, a, b);
  (void)cudaEventDestroy(a);
  (void)cudaEventDestroy(b);
  return t;
}

void bench_skip(long long ms_cycles) {
  constexpr int n = 100;
  cu::stream s;
  cu::mapped_buffer<int> flags(n + 2); // [n]: releases the holding kernel, [n + 1]: its mark
  int* d = flags.device_data();
  for (const bool gated : {true, false}) {
    std::fill(flags.host_data(), flags.host_data() + n + 2, 0);
    std::stop_source stop;
    std::optional<cu::gate> g;
    if (gated) {
      g.emplace(s, stop.get_token());
    }
    // Hold the stream while the queue is built, so the stop lands after the first started.
    (void)s.launch(busy, dim3(1), dim3(1), d, n + 1, 20'000 * ms_cycles, d + n);
    for (int i = 0; i < n; ++i) {
      if (gated) {
        (void)g->launch(busy, dim3(1), dim3(1), d, i, ms_cycles, nullptr);
      } else {
        (void)s.launch(busy, dim3(1), dim3(1), d, i, ms_cycles, nullptr);
      }
    }
    reinterpret_cast<volatile int*>(flags.host_data())[n] = 1; // release the queue
    while (reinterpret_cast<volatile int*>(flags.host_data())[0] == 0) {
    }
    const auto t0 = clk::now();
    stop.request_stop();
    s.sync();
    const double drain = ms(clk::now() - t0);
    int ran = 0;
    for (int i = 0; i < n; ++i) {
      ran += flags.host_data()[i] != 0 ? 1 : 0;
    }
    std::printf("skip %-7s: %d of %d x 1 ms kernels ran after a stop at the first "
                "(%.1f%% skipped); stop -> stream idle %.1f ms\n",
                gated ? "gated" : "plain", ran, n, 100.0 * (n - ran) / n, drain);
  }
}

void bench_overhead(long long ms_cycles) {
  cu::stream s;
  constexpr int units = 1000;
  cu::gate g(s);
  for (int i = 0; i < 50; ++i) { // warm-up
    (void)g.launch(empty_kernel, dim3(1), dim3(1));
  }
  s.sync();
  auto t0 = clk::now();
  for (int i = 0; i < units; ++i) {
    (void)s.launch(empty_kernel, dim3(1), dim3(1));
  }
  const double plain_host = us(clk::now() - t0) / units;
  s.sync();
  t0 = clk::now();
  for (int i = 0; i < units; ++i) {
    (void)g.launch(empty_kernel, dim3(1), dim3(1));
  }
  const double gated_host = us(clk::now() - t0) / units;
  s.sync();
  std::printf("overhead host: plain launch %.2f us, gated unit %.2f us (+%.2f us per op)\n",
              plain_host, gated_host, gated_host - plain_host);
  const double plain_gpu = gpu_ms(s, [&] {
    for (int i = 0; i < units; ++i) {
      (void)s.launch(empty_kernel, dim3(1), dim3(1));
    }
  });
  const double gated_gpu = gpu_ms(s, [&] {
    for (int i = 0; i < units; ++i) {
      (void)g.launch(empty_kernel, dim3(1), dim3(1));
    }
  });
  std::printf("overhead gpu: %d empty kernels plain %.3f ms, gated %.3f ms (+%.2f us per op; "
              "host-bound when the host enqueues slower than the GPU runs)\n",
              units, plain_gpu, gated_gpu, (gated_gpu - plain_gpu) * 1000.0 / units);
  cu::mapped_buffer<int> flags(100);
  int* d = flags.device_data();
  const double raw = gpu_ms(s, [&] {
    for (int i = 0; i < 100; ++i) {
      volatile int* f = d;
      int idx = i;
      long long c = ms_cycles;
      const volatile int* r = nullptr;
      void* args[] = {&f, &idx, &c, &r};
      (void)cudaLaunchKernel(reinterpret_cast<const void*>(&busy), dim3(1), dim3(1), args, 0,
                             s.get());
    }
  });
  const double plain = gpu_ms(s, [&] {
    for (int i = 0; i < 100; ++i) {
      (void)s.launch(busy, dim3(1), dim3(1), d, i, ms_cycles, nullptr);
    }
  });
  const double gated = gpu_ms(s, [&] {
    for (int i = 0; i < 100; ++i) {
      (void)g.launch(busy, dim3(1), dim3(1), d, i, ms_cycles, nullptr);
    }
  });
  std::printf("overhead 100 x 1 ms: raw CUDA %.2f ms, cuawait plain %.2f ms (%+.2f%%, gates off), "
              "gated open %.2f ms (%+.2f%%)\n",
              raw, plain, (plain / raw - 1) * 100, gated, (gated / raw - 1) * 100);
}

void bench_when_any(long long ms_cycles, int trials) {
  cu::device_context ctx;
  const cu::context_scope here(ctx);
  cu::stream s;
  cu::mapped_buffer<int> flags(2); // [0]: started, [1]: release
  std::vector<double> t;
  // One trial more than counted: the first pays one-time costs that are no part of a
  // when_any (the new context's first wait on `s` allocates its timeline counter block with
  // cudaHostAlloc, the first sleep starts the timer thread), which made it 1-2 ms slower.
  for (int i = -1; i < trials; ++i) {
    flags.host_data()[1] = 0;
    const auto t0 = clk::now();
    (void)ca::sync_wait(ca::when_any(s.launch(busy, dim3(1), dim3(1), flags.device_data(), 0,
                                              500 * ms_cycles, flags.device_data() + 1),
                                     ca::sleep_for(10ms)));
    if (i >= 0) {
      t.push_back(ms(clk::now() - t0));
    }
    reinterpret_cast<volatile int*>(flags.host_data())[1] = 1; // end the 500 ms kernel early
    s.sync();
  }
  std::printf("when_any(500 ms GPU, sleep 10 ms): p50 %.2f ms, p99 %.2f ms, max %.2f ms over %d\n",
              pct(t, 0.5), pct(t, 0.99), pct(t, 1.0), trials);
}

void bench_stop(int waits) {
  cu::stream s;
  cu::mapped_buffer<int> flags(2);
  ca::runtime rt(ca::runtime_options{.threads = 16});
  std::stop_source stop;
  std::atomic<int> resumed{0};
  (void)s.launch(busy, dim3(1), dim3(1), flags.device_data(), 0, 20'000 * cycles_per_ms(),
                 flags.device_data() + 1);
  // Every wait awaits one event behind the held kernel: ten thousand awaits of the stream
  // itself would each enqueue a marker, and a stream's queue behind a kernel that does not
  // end holds about a thousand (the enqueue would block until the kernel ends).
  cu::event behind;
  s.record(behind);
  const auto waiter = [&]() -> ca::task<void> {
    try {
      co_await cu::event_wait(behind.get(), std::source_location::current(), stop.get_token());
    } catch (const ca::operation_cancelled&) {
    }
    resumed.fetch_add(1, std::memory_order_relaxed);
  };
  for (int i = 0; i < waits; ++i) {
    rt.spawn(waiter());
  }
  while (rt.reactor().reactor().pending() < static_cast<std::size_t>(waits)) {
    std::this_thread::yield();
  }
  const auto t0 = clk::now();
  stop.request_stop();
  while (resumed.load(std::memory_order_relaxed) < waits) {
  }
  const double t = ms(clk::now() - t0);
  std::printf("stop %d pending GPU waits: all resumed %.3f ms after the stop request\n", waits, t);
  reinterpret_cast<volatile int*>(flags.host_data())[1] = 1;
  rt.join_spawned();
  s.sync();
}

} // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0); // a bench killed by a timeout still shows its lines
  const bool quick = argc > 1 && std::string_view(argv[1]) == "--quick";
  cu::device_context ctx;
  const cu::default_context_scope everywhere(ctx);
  const long long c = cycles_per_ms();
  bench_skip(c);
  bench_overhead(c);
  bench_when_any(c, quick ? 50 : 200);
  bench_stop(10'000);
  return 0;
}
