// SPDX-License-Identifier: Apache-2.0
// cuawait-bench-region [--jobs N] [--kernels K] [--bytes B] [--threads T] [--in-flight C]
//                      [--vary all|first|none] [--quick]
// Jobs made of many small kernels (default 32 kernels over 64 KiB each), submitted four
// ways, one line each:
//   direct          one thread enqueues every job's K launches on C streams, never waits
//   region          one thread (a runtime with one worker) runs C coroutines, each replaying
//                   its job as `co_await cached_region(...)`: one graph launch per job
//   threads_per_job T threads, each with a stream: K launches, then cudaStreamSynchronize
//   region_pool     a runtime with T workers runs C coroutines replaying the cached region
// then the first-use cost (record + build + instantiate + launch) against a replay and a
// direct submission, and the replays after which the first use has paid for itself.
// --vary: which kernel arguments change from job to job (all K, only the first, none);
// pointers change with the stream each job runs on. Every job's result is checked.
// The last line is a summary for scripts/gpu-check.

#include <cuawait/cuda/region.hpp>
#include <cuawait/cuda/stream.hpp>
#include <cuawait/runtime.hpp>
#include <cuawait/task.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace cu = cuawait::cuda;
using clk = std::chrono::steady_clock;
using cuawait::task;

namespace {

__global__ void step(float* x, int n, float a, float b) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    x[i] = fmaf(a, x[i], b);
  }
}

enum class vary { all, first, none };

struct config {
  long jobs = 20000;
  int kernels = 32;
  long bytes = 65536;
  int threads = 16;
  int in_flight = 16;
  vary what = vary::all;
};

//! The job's shape: kernel 0 sets x to v, kernels 1..K-1 add v (or 1).
struct job_math {
  const config* cfg;
  [[nodiscard]] float v(long job) const {
    return cfg->what == vary::none ? 1.0f : static_cast<float>(job % 512 + 1);
  }
  [[nodiscard]] float later_b(long job) const { return cfg->what == vary::all ? v(job) : 1.0f; }
  [[nodiscard]] float expected(long job) const {
    return v(job) + later_b(job) * static_cast<float>(cfg->kernels - 1);
  }
  [[nodiscard]] int n() const { return static_cast<int>(cfg->bytes / sizeof(float)); }
  [[nodiscard]] dim3 grid() const { return dim3(static_cast<unsigned>((n() + 255) / 256)); }

  template <class S>
  void enqueue(const S& s, float* x, long job) const {
    (void)s.launch(step, grid(), dim3(256), x, n(), 0.0f, v(job));
    for (int k = 1; k < cfg->kernels; ++k) {
      (void)s.launch(step, grid(), dim3(256), x, n(), 1.0f, later_b(job));
    }
  }
};

//! One pipeline: a stream, a device buffer, the last job it ran.
struct pipeline {
  cu::stream s;
  float* x = nullptr;
  long last = -1;
  explicit pipeline(long bytes) { CUAWAIT_CUDA_CHECK("bench alloc", cudaMalloc(&x, bytes)); }
  ~pipeline() { (void)cudaFree(x); }
  pipeline(const pipeline&) = delete;
  pipeline& operator=(const pipeline&) = delete;
};

using pipelines = std::vector<std::unique_ptr<pipeline>>;

pipelines make_pipelines(int count, long bytes) {
  pipelines p;
  for (int i = 0; i < count; ++i) {
    p.push_back(std::make_unique<pipeline>(bytes));
  }
  return p;
}

//! Checks each pipeline's buffer against its last job; returns the wrong ones.
int check(const pipelines& ps, const job_math& m) {
  int wrong = 0;
  std::vector<float> h(static_cast<std::size_t>(m.n()));
  for (const auto& p : ps) {
    if (p->last < 0) {
      continue;
    }
    CUAWAIT_CUDA_CHECK("bench check",
                       cudaMemcpy(h.data(), p->x, h.size() * sizeof(float), cudaMemcpyDefault));
    const float want = m.expected(p->last);
    wrong += std::any_of(h.begin(), h.end(), [&](float f) { return f != want; }) ? 1 : 0;
  }
  return wrong;
}

double us_per_job(clk::duration d, long jobs) {
  return std::chrono::duration<double, std::micro>(d).count() / static_cast<double>(jobs);
}

void report(const char* mode, int threads, int in_flight, double us, int wrong) {
  std::printf("%-16s threads %2d in flight %2d: %8.2f us/job%s\n", mode, threads, in_flight, us,
              wrong == 0 ? "" : "  WRONG RESULTS");
  std::fflush(stdout);
}

double run_direct(const config& cfg, const job_math& m) {
  pipelines ps = make_pipelines(cfg.in_flight, cfg.bytes);
  m.enqueue(cu::stream_ref(ps[0]->s), ps[0]->x, 0); // module load and first launch
  CUAWAIT_CUDA_CHECK("bench", cudaDeviceSynchronize());
  const auto t0 = clk::now();
  for (long j = 0; j < cfg.jobs; ++j) {
    pipeline& p = *ps[static_cast<std::size_t>(j % cfg.in_flight)];
    m.enqueue(cu::stream_ref(p.s), p.x, j);
    p.last = j;
  }
  CUAWAIT_CUDA_CHECK("bench", cudaDeviceSynchronize());
  const double us = us_per_job(clk::now() - t0, cfg.jobs);
  report("direct", 1, cfg.in_flight, us, check(ps, m));
  return us;
}

double run_threads_per_job(const config& cfg, const job_math& m) {
  pipelines ps = make_pipelines(cfg.threads, cfg.bytes);
  std::atomic<long> next{0};
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> ts;
  for (int t = 0; t < cfg.threads; ++t) {
    ts.emplace_back([&, t] {
      pipeline& p = *ps[static_cast<std::size_t>(t)];
      m.enqueue(cu::stream_ref(p.s), p.x, 0); // warm up this thread's launches
      (void)cudaStreamSynchronize(p.s.get());
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) {
        std::this_thread::yield();
      }
      for (long j; (j = next.fetch_add(1)) < cfg.jobs;) {
        m.enqueue(cu::stream_ref(p.s), p.x, j);
        CUAWAIT_CUDA_CHECK("bench", cudaStreamSynchronize(p.s.get()));
        p.last = j;
      }
    });
  }
  while (ready.load() < cfg.threads) {
    std::this_thread::yield();
  }
  const auto t0 = clk::now();
  go.store(true, std::memory_order_release);
  for (auto& t : ts) {
    t.join();
  }
  const double us = us_per_job(clk::now() - t0, cfg.jobs);
  report("threads_per_job", cfg.threads, cfg.threads, us, check(ps, m));
  return us;
}

//! A job's region body. A named type, not a lambda: a lambda temporary kept across a
//! co_await in a .cu file's coroutine draws g++'s -Wsubobject-linkage.
struct job_body {
  const job_math* m;
  float* x;
  long job;
  void operator()(cu::region_stream rs) const { m->enqueue(rs, x, job); }
};

task<void> region_worker(const job_math& m, pipeline& p, std::atomic<long>& next, long end) {
  for (long j; (j = next.fetch_add(1)) < end;) {
    (void)co_await cu::cached_region(p.s, "job", job_body{&m, p.x, j});
    p.last = j;
  }
}

struct region_result {
  double us = 0;
  cuawait::graph_cache_stats stats{};
};

region_result run_region(const char* mode, const config& cfg, const job_math& m, int threads) {
  pipelines ps = make_pipelines(cfg.in_flight, cfg.bytes);
  cuawait::runtime_options ro{.threads = static_cast<std::size_t>(threads)};
  ro.regions.replicas = static_cast<std::size_t>(std::max(cfg.in_flight, 1));
  cuawait::runtime rt(ro);
  // Warm-up: one job per pipeline (the executables for C concurrent replays, the reactor's
  // lanes), outside the timed region.
  std::vector<std::atomic<long>> warm(ps.size());
  for (std::size_t i = 0; i < ps.size(); ++i) {
    warm[i].store(static_cast<long>(i));
    rt.spawn(region_worker(m, *ps[i], warm[i], static_cast<long>(i) + 1));
  }
  rt.join_spawned();
  std::atomic<long> next{0};
  const auto before = rt.context().regions().stats();
  const auto t0 = clk::now();
  for (auto& p : ps) {
    rt.spawn(region_worker(m, *p, next, cfg.jobs));
  }
  rt.join_spawned();
  region_result r;
  r.us = us_per_job(clk::now() - t0, cfg.jobs);
  const auto after = rt.context().regions().stats();
  r.stats = after;
  r.stats.hits -= before.hits;
  r.stats.misses -= before.misses;
  r.stats.reused -= before.reused;
  r.stats.updates -= before.updates;
  r.stats.reinstantiations -= before.reinstantiations;
  r.stats.replicas -= before.replicas;
  r.stats.node_updates -= before.node_updates;
  report(mode, threads, cfg.in_flight, r.us, check(ps, m));
  std::printf("  %s cache: %llu hits, %llu misses, %llu updated in place (%llu nodes set), "
              "%llu reused, %llu re-instantiated, %llu replicas; in place %.3f%%; "
              "%zu executables\n",
              mode, static_cast<unsigned long long>(r.stats.hits),
              static_cast<unsigned long long>(r.stats.misses),
              static_cast<unsigned long long>(r.stats.updates),
              static_cast<unsigned long long>(r.stats.node_updates),
              static_cast<unsigned long long>(r.stats.reused),
              static_cast<unsigned long long>(r.stats.reinstantiations),
              static_cast<unsigned long long>(r.stats.replicas),
              100.0 * r.stats.in_place_fraction(), rt.context().regions().executables("job"));
  return r;
}

//! Host time of a first use (fresh key), a replay, a captured replay and a direct
//! submission, each enqueued on one stream without waiting (the stream drains between).
struct first_use {
  double first_us = 0;
  double replay_us = 0;
  double captured_us = 0;
  double direct_us = 0;
};

first_use run_first_use(const config& cfg, const job_math& m, int samples) {
  cu::device_context ctx;
  cu::context_scope here(ctx);
  cu::region_cache& cache = ctx.regions();
  pipeline p(cfg.bytes);
  const cu::stream_ref s(p.s);
  auto time = [&](auto&& f) {
    std::vector<double> v;
    for (int i = 0; i < samples; ++i) {
      s.sync();
      const auto t0 = clk::now();
      f(i);
      v.push_back(std::chrono::duration<double, std::micro>(clk::now() - t0).count());
    }
    s.sync();
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  m.enqueue(s, p.x, 0);
  first_use r;
  r.direct_us = time([&](int i) { m.enqueue(s, p.x, i); });
  r.first_us = time([&](int i) {
    (void)cache.launch(s, "fresh-" + std::to_string(i),
                       [&](cu::region_stream rs) { m.enqueue(rs, p.x, i); });
  });
  r.replay_us = time([&](int i) {
    (void)cache.launch(s, "replayed", [&](cu::region_stream rs) { m.enqueue(rs, p.x, i); });
  });
  r.captured_us = time([&](int i) {
    (void)cache.launch(s, "captured", [&](cu::stream_ref cs) { m.enqueue(cs, p.x, i); });
  });
  return r;
}

bool parse(int argc, char** argv, config& cfg) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--jobs") {
      cfg.jobs = std::atol(value());
    } else if (a == "--kernels") {
      cfg.kernels = std::atoi(value());
    } else if (a == "--bytes") {
      cfg.bytes = std::atol(value());
    } else if (a == "--threads") {
      cfg.threads = std::atoi(value());
    } else if (a == "--in-flight") {
      cfg.in_flight = std::atoi(value());
    } else if (a == "--vary") {
      const std::string v = value();
      cfg.what = v == "none" ? vary::none : v == "first" ? vary::first : vary::all;
      if (v != "none" && v != "first" && v != "all") {
        return false;
      }
    } else if (a == "--quick") {
      cfg.jobs = 2000;
    } else {
      return false;
    }
  }
  return cfg.jobs > 0 && cfg.kernels > 0 && cfg.bytes >= 4 && cfg.threads > 0 && cfg.in_flight > 0;
}

} // namespace

int main(int argc, char** argv) {
  config cfg;
  if (!parse(argc, argv, cfg)) {
    std::fprintf(stderr, "usage: cuawait-bench-region [--jobs N] [--kernels K] [--bytes B] "
                         "[--threads T] [--in-flight C] [--vary all|first|none] [--quick]\n");
    return 2;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: skipped\n");
    return 0;
  }
  const job_math m{&cfg};
  const char* vary_name = cfg.what == vary::all     ? "all"
                          : cfg.what == vary::first ? "first"
                                                    : "none";
  std::printf("region bench: %ld jobs of %d kernels over %ld bytes, arguments varying: %s\n",
              cfg.jobs, cfg.kernels, cfg.bytes, vary_name);
  try {
    const double direct = run_direct(cfg, m);
    const region_result one = run_region("region", cfg, m, 1);
    const double tpj = run_threads_per_job(cfg, m);
    const region_result pool = run_region("region_pool", cfg, m, cfg.threads);
    const first_use f = run_first_use(cfg, m, 21);
    std::printf("host time per submission (median of 21): direct %.1f us, first use (record, "
                "build, instantiate, launch) %.1f us, replay %.1f us, captured replay "
                "(stream_ref body) %.1f us\n",
                f.direct_us, f.first_us, f.replay_us, f.captured_us);
    const double saved = f.direct_us - f.replay_us;
    const double break_even = saved > 0 ? (f.first_us - f.replay_us) / saved : -1;
    if (break_even >= 0) {
      std::printf("first use repaid after %.1f replays\n", break_even);
    } else {
      std::printf("first use never repaid: a replay costs more than a direct submission\n");
    }
    const double in_place =
        100.0 * std::min(one.stats.in_place_fraction(), pool.stats.in_place_fraction());
    std::printf("summary: region/direct %.2fx (goal 5x), region_pool/threads_per_job %.2fx "
                "(goal 2x), in place %.2f%% (goal 99%%), first use repaid after %.0f replays\n",
                direct / one.us, tpj / pool.us, in_place, break_even);
  } catch (const std::exception& e) {
    std::printf("FAILED: %s\n", e.what());
    return 1;
  }
  return 0;
}
