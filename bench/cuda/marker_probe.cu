// SPDX-License-Identifier: Apache-2.0
// What a completion marker costs, measured with the raw CUDA API (no cuawait), to choose
// the marker per await by measurement: for each way of learning that a stream's work is
// done, T threads (each with its own stream) run `iters` rounds of "64 KiB H2D copy, empty
// kernel, marker, wait until the host sees it done", and the probe prints µs per round
// (aggregate over the threads: wall time / total rounds) and per round per thread, and how
// a round splits between enqueueing (copy + kernel) and waiting (marker + wait). The last
// way is cuawait itself: T coroutines on a runtime of --pool workers, each round
// `s.copy(...)`, `s.launch(...)`, `co_await s`, the same split measured inside the coroutine.
//
//   cuawait-marker-probe [--threads 1,4,16] [--iters 4000] [--bytes 65536] [--pool 16]
//                        [--only-cuawait 1] [--split 1]
//
// --split 1 also splits cuawait's wait, through the reactor's trace hooks: arm (from the
// `co_await` to the suspension: marker enqueued), found (suspension to the reactor seeing
// the work done), handed (seen done to the coroutine running again), and the share of
// resumptions on another thread than the one that suspended.

#include <cuawait/cuda.hpp>
#include <cuawait/runtime.hpp>
#include <cuawait/when_all.hpp>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

__global__ void empty_kernel() {}

//! A one-thread marker kernel: makes the stream's earlier writes visible, then the ticket.
__global__ void write_ticket(volatile std::uint64_t* word, std::uint64_t v) {
  __threadfence_system();
  *word = v;
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "marker-probe: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

using write_value64_fn = CUresult (*)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);

write_value64_fn load_write_value64() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  check(cudaGetDriverEntryPointByVersion("cuStreamWriteValue64", &fn, 12000, cudaEnableDefault,
                                         &found),
        "entry point");
  return reinterpret_cast<write_value64_fn>(fn);
}

enum class way {
  sync,
  event_spin,
  stream_query_spin,
  timeline_spin,
  timeline_no_barrier_spin,
  kernel_write_spin,
  none_enqueue_only,
  cuawait_pool,
  cuawait_driving
};
const char* name(way w) {
  switch (w) {
  case way::sync:
    return "cudaStreamSynchronize";
  case way::event_spin:
    return "event record + cudaEventQuery spin";
  case way::stream_query_spin:
    return "no marker + cudaStreamQuery spin";
  case way::timeline_spin:
    return "cuStreamWriteValue64 + word spin";
  case way::timeline_no_barrier_spin:
    return "cuStreamWriteValue64 no-barrier + spin";
  case way::kernel_write_spin:
    return "marker kernel write + word spin";
  case way::none_enqueue_only:
    return "enqueue only, one sync at the end";
  case way::cuawait_pool:
    return "cuawait: co_await s on the pool";
  case way::cuawait_driving:
    return "cuawait: co_await s, one driving thread";
  }
  return "?";
}

struct per_thread {
  cudaStream_t s{};
  cudaEvent_t e{};
  void* host = nullptr;
  void* dev = nullptr;
  std::uint64_t* word = nullptr;
  CUdeviceptr dword = 0;
  double enqueue_us = 0; //!< summed over the rounds: copy + kernel enqueued
  double wait_us = 0;    //!< summed: marker + wait until the host sees the round done
};

//! A split of one probe run: µs per round (aggregate), and per round of one thread.
struct result {
  double cpu = 0; //!< process CPU time / wall time over the run (threads busy on average)
  double agg = 0;
  double enqueue = 0;
  double wait = 0;
};

using probe_clock = std::chrono::steady_clock;

std::uint64_t steady_ns() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(probe_clock::now().time_since_epoch())
          .count());
}

//! The --split figures, summed over every suspended wait of a run.
struct split_sums {
  std::atomic<std::uint64_t> waits{0}, arm_ns{0}, found_ns{0}, handed_ns{0}, moved{0};
  void reset() {
    waits = 0;
    arm_ns = 0;
    found_ns = 0;
    handed_ns = 0;
    moved = 0;
  }
};
split_sums g_split;
thread_local std::uint64_t tl_await_ns = 0; //!< set by the probe just before `co_await`
std::uint64_t thread_tag() {
  static std::atomic<std::uint64_t> next{1};
  thread_local const std::uint64_t tag = next.fetch_add(1);
  return tag;
}

void split_on_suspend(void*, const cuawait::detail::wait_node& w) {
  w.trace.suspend_ns = steady_ns();
  w.trace.range = thread_tag();
  w.trace.id = tl_await_ns;
}
void split_on_resume(void*, const cuawait::detail::wait_node& w) {
  if (w.resolved_ns == 0 || w.trace.suspend_ns == 0) {
    return; // finished before it suspended
  }
  const std::uint64_t now = steady_ns();
  g_split.waits.fetch_add(1, std::memory_order_relaxed);
  if (w.trace.id != 0 && w.trace.suspend_ns > w.trace.id) {
    g_split.arm_ns.fetch_add(w.trace.suspend_ns - w.trace.id, std::memory_order_relaxed);
  }
  if (w.resolved_ns > w.trace.suspend_ns) {
    g_split.found_ns.fetch_add(w.resolved_ns - w.trace.suspend_ns, std::memory_order_relaxed);
  }
  if (now > w.resolved_ns) {
    g_split.handed_ns.fetch_add(now - w.resolved_ns, std::memory_order_relaxed);
  }
  if (w.trace.range != thread_tag()) {
    g_split.moved.fetch_add(1, std::memory_order_relaxed);
  }
}
bool g_split_on = false;
double us_between(probe_clock::time_point a, probe_clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

//! One cuawait pipeline: `iters` rounds on its own stream, on the runtime's pool.
cuawait::task<void> cuawait_rounds(cuawait::thread_pool* pool, per_thread& p, int iters,
                                   std::size_t bytes) {
  if (pool != nullptr) {
    co_await pool->schedule();
  }
  const cuawait::cuda::stream_ref s(p.s);
  for (int i = 1; i <= iters; ++i) {
    const auto t0 = probe_clock::now();
    s.copy(static_cast<std::byte*>(p.dev), static_cast<const std::byte*>(p.host), bytes);
    s.launch(empty_kernel, dim3(1), dim3(1));
    const auto t1 = probe_clock::now();
    tl_await_ns = g_split_on ? steady_ns() : 0;
    co_await s;
    const auto t2 = probe_clock::now();
    p.enqueue_us += us_between(t0, t1);
    p.wait_us += us_between(t1, t2);
  }
}

cuawait::task<void> all_of(std::vector<cuawait::task<void>> ts) {
  co_await cuawait::when_all(std::move(ts));
}

result run(way w, int threads, int iters, std::size_t bytes, write_value64_fn wv, int pool) {
  std::vector<per_thread> pt(threads);
  for (auto& p : pt) {
    check(cudaStreamCreateWithFlags(&p.s, cudaStreamNonBlocking), "stream");
    check(cudaEventCreateWithFlags(&p.e, cudaEventDisableTiming), "event");
    check(cudaHostAlloc(&p.host, bytes, cudaHostAllocDefault), "host");
    check(cudaMalloc(&p.dev, bytes), "dev");
    check(cudaHostAlloc(reinterpret_cast<void**>(&p.word), 64, cudaHostAllocMapped), "word");
    *p.word = 0;
    void* d = nullptr;
    check(cudaHostGetDevicePointer(&d, p.word, 0), "word ptr");
    p.dword = reinterpret_cast<CUdeviceptr>(d);
  }
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::atomic<bool> unsupported{false};
  auto body = [&](per_thread& p) {
    ready.fetch_add(1);
    while (!go.load()) {
    }
    for (int i = 1; i <= iters; ++i) {
      const auto t0 = probe_clock::now();
      check(cudaMemcpyAsync(p.dev, p.host, bytes, cudaMemcpyHostToDevice, p.s), "copy");
      empty_kernel<<<1, 1, 0, p.s>>>();
      const auto t1 = probe_clock::now();
      switch (w) {
      case way::sync:
        check(cudaStreamSynchronize(p.s), "sync");
        break;
      case way::event_spin:
        check(cudaEventRecord(p.e, p.s), "record");
        while (cudaEventQuery(p.e) == cudaErrorNotReady) {
        }
        break;
      case way::stream_query_spin:
        while (cudaStreamQuery(p.s) == cudaErrorNotReady) {
        }
        break;
      case way::timeline_spin:
        if (wv(p.s, p.dword, static_cast<cuuint64_t>(i), 0) != CUDA_SUCCESS) {
          std::fprintf(stderr, "write value failed\n");
          std::exit(1);
        }
        while (std::atomic_ref<std::uint64_t>(*p.word).load(std::memory_order_acquire) <
               static_cast<std::uint64_t>(i)) {
        }
        break;
      case way::timeline_no_barrier_spin:
        if (wv(p.s, p.dword, static_cast<cuuint64_t>(i), 1 /* NO_MEMORY_BARRIER */) !=
            CUDA_SUCCESS) {
          unsupported.store(true); // refused on the H200 (CUDA 13.0): reported, not fatal
          i = iters;
          break;
        }
        while (std::atomic_ref<std::uint64_t>(*p.word).load(std::memory_order_acquire) <
               static_cast<std::uint64_t>(i)) {
        }
        break;
      case way::kernel_write_spin:
        write_ticket<<<1, 1, 0, p.s>>>(reinterpret_cast<volatile std::uint64_t*>(p.dword),
                                       static_cast<std::uint64_t>(i));
        while (std::atomic_ref<std::uint64_t>(*p.word).load(std::memory_order_acquire) <
               static_cast<std::uint64_t>(i)) {
        }
        break;
      case way::none_enqueue_only:
      case way::cuawait_pool:
      case way::cuawait_driving:
        break;
      }
      const auto t2 = probe_clock::now();
      p.enqueue_us += us_between(t0, t1);
      p.wait_us += us_between(t1, t2);
    }
    check(cudaStreamSynchronize(p.s), "final sync");
  };
  double us = 0;
  rusage ru0{};
  getrusage(RUSAGE_SELF, &ru0);
  if (w == way::cuawait_pool || w == way::cuawait_driving) {
    cuawait::runtime rt(cuawait::runtime_options{.threads = static_cast<std::size_t>(pool)});
    if (g_split_on) {
      cuawait::reactor_trace hooks;
      hooks.on_suspend = &split_on_suspend;
      hooks.on_resume = &split_on_resume;
      rt.reactor().reactor().set_trace(hooks);
      g_split.reset();
    }
    std::vector<cuawait::task<void>> ts;
    for (auto& p : pt) {
      ts.push_back(cuawait_rounds(w == way::cuawait_pool ? &rt.pool() : nullptr, p, iters, bytes));
    }
    const auto t0 = probe_clock::now();
    rt.run(all_of(std::move(ts)));
    us = us_between(t0, probe_clock::now());
  } else {
    std::vector<std::thread> ts;
    for (auto& p : pt) {
      ts.emplace_back(body, std::ref(p));
    }
    while (ready.load() != threads) {
    }
    const auto t0 = probe_clock::now();
    go = true;
    for (auto& t : ts) {
      t.join();
    }
    us = us_between(t0, probe_clock::now());
  }
  rusage ru1{};
  getrusage(RUSAGE_SELF, &ru1);
  const auto tv_us = [](const timeval& t) { return t.tv_sec * 1e6 + t.tv_usec; };
  const double cpu_us =
      tv_us(ru1.ru_utime) - tv_us(ru0.ru_utime) + tv_us(ru1.ru_stime) - tv_us(ru0.ru_stime);
  double enqueue = 0;
  double wait = 0;
  for (const auto& p : pt) {
    enqueue += p.enqueue_us;
    wait += p.wait_us;
  }
  for (auto& p : pt) {
    cudaStreamDestroy(p.s);
    cudaEventDestroy(p.e);
    cudaFreeHost(p.host);
    cudaFree(p.dev);
    cudaFreeHost(p.word);
  }
  if (unsupported.load()) {
    return {0, -1.0, 0, 0};
  }
  const double rounds = static_cast<double>(iters) * threads;
  return {cpu_us / us, us / rounds, enqueue / rounds, wait / rounds};
}

} // namespace

int main(int argc, char** argv) {
  std::vector<int> thread_counts{1, 4, 16};
  int iters = 4000;
  std::size_t bytes = 65536;
  int pool = 16;
  bool only_cuawait = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--threads") == 0) {
      thread_counts.clear();
      for (std::string s = argv[i + 1]; !s.empty();) {
        const auto c = s.find(',');
        thread_counts.push_back(std::stoi(s.substr(0, c)));
        s = c == std::string::npos ? "" : s.substr(c + 1);
      }
    } else if (std::strcmp(argv[i], "--iters") == 0) {
      iters = std::atoi(argv[i + 1]);
    } else if (std::strcmp(argv[i], "--only-cuawait") == 0) {
      only_cuawait = std::atoi(argv[i + 1]) != 0;
    } else if (std::strcmp(argv[i], "--split") == 0) {
      g_split_on = std::atoi(argv[i + 1]) != 0;
    } else if (std::strcmp(argv[i], "--pool") == 0) {
      pool = std::atoi(argv[i + 1]);
    } else if (std::strcmp(argv[i], "--bytes") == 0) {
      bytes = static_cast<std::size_t>(std::atoll(argv[i + 1]));
    }
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("marker-probe: no CUDA device, nothing measured\n");
    return 0;
  }
  check(cudaFree(nullptr), "init");
  const write_value64_fn wv = load_write_value64();
  std::printf("marker probe: %zu-byte H2D + empty kernel + marker + wait, %d rounds per thread\n",
              bytes, iters);
  std::printf("%-40s %8s %14s %16s %12s %12s %8s\n", "way", "threads", "us/round(agg)",
              "us/round/thread", "enqueue us", "wait us", "cpus");
  for (const way w : {way::none_enqueue_only, way::sync, way::event_spin, way::stream_query_spin,
                      way::timeline_spin, way::timeline_no_barrier_spin, way::kernel_write_spin,
                      way::cuawait_pool, way::cuawait_driving}) {
    if (only_cuawait && w != way::cuawait_pool && w != way::cuawait_driving) {
      continue;
    }
    for (const int t : thread_counts) {
      (void)run(w, t, iters / 10, bytes, wv, pool); // warm-up
      const result r = run(w, t, iters, bytes, wv, pool);
      if (r.agg < 0) {
        std::printf("%-40s %8d %14s %16s\n", name(w), t, "unsupported", "-");
        continue;
      }
      std::printf("%-40s %8d %14.2f %16.2f %12.2f %12.2f %8.2f\n", name(w), t, r.agg, r.agg * t,
                  r.enqueue, r.wait, r.cpu);
      if (g_split_on && (w == way::cuawait_pool || w == way::cuawait_driving)) {
        const double n = std::max<double>(1.0, static_cast<double>(g_split.waits.load()));
        std::printf("  split (pool %d, busy threads %.2f): waits %llu, arm %.2f us, found %.2f us, "
                    "handed %.2f us, "
                    "resumed on another thread %.1f %%\n",
                    pool, r.cpu, static_cast<unsigned long long>(g_split.waits.load()),
                    static_cast<double>(g_split.arm_ns.load()) / n / 1000.0,
                    static_cast<double>(g_split.found_ns.load()) / n / 1000.0,
                    static_cast<double>(g_split.handed_ns.load()) / n / 1000.0,
                    100.0 * static_cast<double>(g_split.moved.load()) / n);
      }
    }
  }
  return 0;
}
