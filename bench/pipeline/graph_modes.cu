// SPDX-License-Identifier: Apache-2.0
// The graph modes of the pipeline benchmark, written as a user writes them:
//   coro_graph          C coroutine pipelines on the runtime's pool; each captures its
//                       job's four GPU operations into a graph once, then per job:
//                       pre, co_await exec.launch(stream), post (one launch, one completion).
//   coro_region         as coro_graph, written with the region cache: per job, pre,
//                       co_await cached_region(stream, "w1", body), post; the body records
//                       the four operations; the cache instantiates once per pipeline (one
//                       executable per stream) and replays with unchanged parameters.
//   coro_graph_batched  C coroutine pipelines each hold a slot of an arena_pair (pinned +
//                       device at equal offsets); per job: pre, co_await batcher.submit(job),
//                       post. A batch's copies of adjacent slots merge into one transfer, the
//                       transfers of a batch go in one driver call each way (copy_merged),
//                       and kernels A and B run in one launch each over all its runs. The
//                       batcher's knobs come from the command line (--batch,
//                       --batch-wait-us, --batch-in-flight, --batch-streams).
//   coro_staged_batched the same batches, their stages on the shared stage streams of
//                       coro_staged (stage_streams.hpp) instead of the batcher's streams.
// Every run uses min(concurrency, jobs) pipelines; setup (allocations, captures, the
// batcher's streams and thread, the coroutine frames) happens before the timed region.

#include "kernels.hpp"
#include "memory_budget.hpp"
#include "modes.hpp"
#include "reactor_warm_up.hpp"
#include "stage_streams.hpp"
#include "trace_scope.hpp"

#include <cuawait/cuda/arena.hpp>
#include <cuawait/cuda/batcher.hpp>
#include <cuawait/cuda/capture.hpp>
#include <cuawait/cuda/graph.hpp>
#include <cuawait/cuda/region.hpp>
#include <cuawait/runtime.hpp>
#include <cuawait/task.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <vector>

namespace cuawait::bench {
namespace {

namespace cu = cuawait::cuda;
using clock_type = std::chrono::steady_clock;

double us_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::micro>(clock_type::now() - t0).count();
}

//! One coro_graph pipeline: a stream, buffers, and the job graph over them.
//! Runs one worker coroutine per pipeline on `rt`'s pool (its streams warmed first), timed,
//! with the trace of `ctx`; the workers share one job counter.
template <class Pipeline, class MakeWorker>
void run_pipelines(runtime& rt, const mode_context& ctx, timed_region& timer,
                   std::vector<std::unique_ptr<Pipeline>>& pipes, MakeWorker make_worker) {
  std::vector<cu::stream_ref> streams;
  for (const auto& p : pipes) {
    streams.push_back(p->s);
  }
  warm_reactor(rt, std::move(streams));
  const trace_scope trace(rt, ctx);
  std::atomic<std::int64_t> next{0};
  std::vector<task<void>> tasks;
  tasks.reserve(pipes.size());
  for (auto& p : pipes) {
    tasks.push_back(make_worker(*p, next));
  }
  timer.start();
  for (task<void>& t : tasks) {
    rt.spawn(std::move(t));
  }
  rt.join_spawned();
  timer.stop();
}

struct graph_pipeline {
  cu::stream s;
  float* host = nullptr;
  float* dev = nullptr;
  cu::graph_exec exec;

  explicit graph_pipeline(const mode_context& ctx, double& capture_us, double& instantiate_us) {
    const std::size_t bytes = static_cast<std::size_t>(ctx.work.w().bytes);
    CUAWAIT_CUDA_CHECK("pinned alloc", cudaMallocHost(&host, bytes));
    CUAWAIT_CUDA_CHECK("device alloc", cudaMalloc(&dev, bytes));
    const std::size_t n = ctx.work.n();
    const int iters = ctx.work.w().iters;
    const int grid = ctx.grid;
    auto t0 = clock_type::now();
    cu::graph g = cu::capture(s, [&](cu::stream_ref cs) {
      cu::check("copy H2D", cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, cs.get()),
                "cudaMemcpyAsync");
      cu::check("kernel A", launch_kernel_a(dev, dev, n, iters, grid, cs.get()), "launch");
      cu::check("kernel B", launch_kernel_b(dev, dev, n, iters, grid, cs.get()), "launch");
      cu::check("copy D2H", cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, cs.get()),
                "cudaMemcpyAsync");
    });
    capture_us += us_since(t0);
    t0 = clock_type::now();
    exec = g.instantiate();
    exec.upload(s);
    instantiate_us += us_since(t0);
  }
  ~graph_pipeline() {
    (void)cudaFreeHost(host);
    (void)cudaFree(dev);
  }
  graph_pipeline(const graph_pipeline&) = delete;
  graph_pipeline& operator=(const graph_pipeline&) = delete;
};

task<void> graph_worker(const mode_context& ctx, graph_pipeline& p,
                        std::atomic<std::int64_t>& next) {
  for (;;) {
    const std::int64_t job = next.fetch_add(1, std::memory_order_relaxed);
    if (job >= ctx.jobs) {
      co_return;
    }
    ctx.work.pre(job, p.host);
    co_await p.exec.launch(p.s);
    ctx.work.post(job, p.host);
  }
}

void coro_graph(mode_context& ctx, timed_region& timer) {
  const std::int64_t pipelines = ctx.pipelines();
  const double total = static_cast<double>(ctx.work.w().bytes) * static_cast<double>(pipelines);
  require_memory("coro_graph", total, total);
  double capture_us = 0;
  double instantiate_us = 0;
  std::vector<std::unique_ptr<graph_pipeline>> pipes;
  for (std::int64_t i = 0; i < pipelines; ++i) {
    pipes.push_back(std::make_unique<graph_pipeline>(ctx, capture_us, instantiate_us));
  }
  std::fprintf(stderr, "coro_graph: capture %.1f us, instantiate+upload %.1f us per pipeline\n",
               capture_us / static_cast<double>(pipelines),
               instantiate_us / static_cast<double>(pipelines));
  runtime rt(runtime_options{.threads = static_cast<std::size_t>(ctx.pool_threads)});
  run_pipelines(rt, ctx, timer, pipes, [&](graph_pipeline& p, std::atomic<std::int64_t>& next) {
    return graph_worker(ctx, p, next);
  });
}

//! coro_region's job: H2D copy, kernels A and B, D2H copy, recorded into the region. A
//! named type: a lambda kept across a co_await in a .cu coroutine draws -Wsubobject-linkage.
struct w1_region {
  const mode_context* ctx;
  float* host;
  float* dev;
  void operator()(cu::region_stream rs) const {
    const std::size_t n = ctx->work.n();
    const int iters = ctx->work.w().iters;
    const dim3 grid(static_cast<unsigned>(ctx->grid));
    (void)rs.copy(dev, host, n);
    (void)rs.launch(kernel_a_handle(), grid, dim3(kernel_block), dev, dev, n, iters);
    (void)rs.launch(kernel_b_handle(), grid, dim3(kernel_block), dev, dev, n, iters);
    (void)rs.copy(host, dev, n);
  }
};

//! One coro_region pipeline: a stream and its buffers.
struct region_pipeline {
  cu::stream s;
  float* host = nullptr;
  float* dev = nullptr;
  explicit region_pipeline(std::size_t bytes) {
    CUAWAIT_CUDA_CHECK("pinned alloc", cudaMallocHost(&host, bytes));
    CUAWAIT_CUDA_CHECK("device alloc", cudaMalloc(&dev, bytes));
  }
  ~region_pipeline() {
    (void)cudaFreeHost(host);
    (void)cudaFree(dev);
  }
  region_pipeline(const region_pipeline&) = delete;
  region_pipeline& operator=(const region_pipeline&) = delete;
};

task<void> region_worker(const mode_context& ctx, region_pipeline& p,
                         std::atomic<std::int64_t>& next, std::int64_t end) {
  for (;;) {
    const std::int64_t job = next.fetch_add(1, std::memory_order_relaxed);
    if (job >= end) {
      co_return;
    }
    ctx.work.pre(job, p.host);
    (void)co_await cu::cached_region(p.s, "w1", w1_region{&ctx, p.host, p.dev});
    ctx.work.post(job, p.host);
  }
}

void coro_region(mode_context& ctx, timed_region& timer) {
  const std::int64_t pipelines = ctx.pipelines();
  const std::size_t bytes = static_cast<std::size_t>(ctx.work.w().bytes);
  const double total = static_cast<double>(bytes) * static_cast<double>(pipelines);
  require_memory("coro_region", total, total);
  std::vector<std::unique_ptr<region_pipeline>> pipes;
  for (std::int64_t i = 0; i < pipelines; ++i) {
    pipes.push_back(std::make_unique<region_pipeline>(bytes));
  }
  runtime_options ro{.threads = static_cast<std::size_t>(ctx.pool_threads)};
  ro.regions.replicas = static_cast<std::size_t>(pipelines); // one executable per pipeline
  runtime rt(ro);
  run_pipelines(rt, ctx, timer, pipes, [&](region_pipeline& p, std::atomic<std::int64_t>& next) {
    return region_worker(ctx, p, next, ctx.jobs);
  });
  const graph_cache_stats st = rt.context().regions().stats();
  std::fprintf(
      stderr,
      "coro_region: %llu misses, %llu replicas, %llu updated, %llu reused, %llu "
      "re-instantiated\n",
      static_cast<unsigned long long>(st.misses), static_cast<unsigned long long>(st.replicas),
      static_cast<unsigned long long>(st.updates), static_cast<unsigned long long>(st.reused),
      static_cast<unsigned long long>(st.reinstantiations));
}

//! One job of the batched modes: its id and its arena slot's buffers.
struct batched_job {
  std::int64_t id = -1;
  float* host = nullptr;
  float* dev = nullptr;
};

//! The stage streams of coro_staged_batched and one event per stage boundary. One set of
//! events serves every batch: the enqueue function runs on the batcher's engine thread
//! only, and each stream's wait captures the event's state when it is enqueued, so the next
//! batch may re-record the events at once.
struct batch_stages {
  stage_streams stages;
  cu::event loaded;   //!< behind a batch's H2D copies
  cu::event computed; //!< behind its kernels
  cu::event unloaded; //!< behind its D2H copies
};

//! A batch: merged copies in, kernels A and B over all merged runs, merged copies out. All on
//! the batcher's stream `s`, or, with `staged`, on the stage streams (one merged H2D and one
//! merged D2H in flight at a time), after which `s` waits for the D2H so that the batcher's
//! completion event stands for the whole batch.
struct batch_shape {
  const mode_context* ctx;
  batch_stages* staged = nullptr;
  //! H2D transfers enqueued after merging (engine thread only; read after the batcher died).
  std::uint64_t* transfers = nullptr;

  void operator()(std::span<batched_job* const> jobs, cu::stream_ref s) const {
    const std::size_t bytes = static_cast<std::size_t>(ctx->work.w().bytes);
    std::vector<copy_span> in, out;
    in.reserve(jobs.size());
    out.reserve(jobs.size());
    for (const batched_job* j : jobs) {
      in.push_back({j->dev, j->host, bytes});
      out.push_back({j->host, j->dev, bytes});
    }
    const cu::stream_ref h2d = staged != nullptr ? staged->stages.in() : s;
    const cu::stream_ref kernels = staged != nullptr ? staged->stages.next_compute() : s;
    const cu::stream_ref d2h = staged != nullptr ? staged->stages.out() : s;
    *transfers += cu::copy_merged(h2d, in); // `in` now holds the merged device runs
    if (staged != nullptr) {
      h2d.record(staged->loaded);
      kernels.wait(staged->loaded);
    }
    // Kernels A and B over every merged run in one launch each (up to 64 runs a launch).
    std::vector<kernel_run> runs;
    runs.reserve(in.size());
    for (const copy_span& run : in) {
      runs.push_back({static_cast<float*>(run.dst), run.bytes / sizeof(float)});
    }
    const int iters = ctx->work.w().iters;
    cu::check("kernel A",
              launch_kernel_a_runs(runs.data(), runs.size(), iters, ctx->sms, kernels.get()),
              "launch");
    cu::check("kernel B",
              launch_kernel_b_runs(runs.data(), runs.size(), iters, ctx->sms, kernels.get()),
              "launch");
    if (staged != nullptr) {
      kernels.record(staged->computed);
      d2h.wait(staged->computed);
    }
    cu::copy_merged(d2h, out);
    if (staged != nullptr) {
      d2h.record(staged->unloaded);
      s.wait(staged->unloaded);
    }
  }
};

task<void> batched_worker(const mode_context& ctx, cu::arena_pair& arena,
                          cu::batcher<batched_job>& batch, std::atomic<std::int64_t>& next) {
  cu::arena_slot slot = co_await arena.acquire();
  float* host = slot.host_as<float>().data();
  float* dev = slot.device_as<float>().data();
  for (;;) {
    const std::int64_t job = next.fetch_add(1, std::memory_order_relaxed);
    if (job >= ctx.jobs) {
      co_return;
    }
    ctx.work.pre(job, host);
    (void)co_await batch.submit(batched_job{job, host, dev});
    ctx.work.post(job, host);
  }
}

//! The batcher's options from the command line's knobs (batch_knobs) for `pipelines`
//! pipelines of `bytes`-byte jobs.
batch_options batching_for(const batch_knobs& k, std::int64_t pipelines, std::int64_t bytes) {
  batch_options opt;
  opt.max_batch =
      static_cast<std::size_t>(k.max_batch > 0 ? k.max_batch : auto_max_batch(pipelines, bytes));
  opt.max_wait = std::chrono::nanoseconds(static_cast<std::int64_t>(k.wait_us * 1e3));
  opt.max_in_flight = static_cast<std::size_t>(k.in_flight);
  return opt;
}

void run_batched(const char* name, mode_context& ctx, timed_region& timer, bool staged) {
  const std::size_t bytes = static_cast<std::size_t>(ctx.work.w().bytes);
  const std::size_t pipelines = static_cast<std::size_t>(ctx.pipelines());
  const double total = static_cast<double>(bytes) * static_cast<double>(pipelines);
  require_memory(name, total, total);
  cu::arena_pair arena(bytes, pipelines);
  const batch_options opt = batching_for(ctx.batch, ctx.pipelines(), ctx.work.w().bytes);
  runtime rt(runtime_options{.threads = static_cast<std::size_t>(ctx.pool_threads)});
  const trace_scope trace(rt, ctx);
  std::optional<batch_stages> stages; // after the arena: drained before it is freed
  if (staged) {
    stages.emplace();
  }
  batch_stats st;
  std::uint64_t transfers = 0;
  bool engine_thread = true;
  {
    cu::batcher<batched_job> batch(batch_shape{&ctx, stages ? &*stages : nullptr, &transfers}, opt,
                                   static_cast<std::size_t>(ctx.batch.streams));
    std::atomic<std::int64_t> next{0};
    std::vector<task<void>> tasks;
    tasks.reserve(pipelines);
    for (std::size_t i = 0; i < pipelines; ++i) {
      tasks.push_back(batched_worker(ctx, arena, batch, next));
    }
    timer.start();
    for (task<void>& t : tasks) {
      rt.spawn(std::move(t));
    }
    rt.join_spawned();
    timer.stop();
    st = batch.stats();
    engine_thread = batch.has_engine_thread();
  } // the batcher's engine is done here: `transfers` is final
  std::fprintf(
      stderr,
      "%s (%s): max_batch %zu, wait %.1f us, in flight %zu, %d streams: %llu batches (%llu "
      "full, %llu timed, %llu at once with none in flight), mean %.1f jobs (max %zu), %.2f merged "
      "transfers per batch each way; added latency "
      "mean %.1f us max %.1f us; lone jobs %llu, their added latency mean %.1f us, of "
      "which %.1f us back-pressure (max_in_flight batches on the GPU) and %.1f us "
      "batching (max %.1f us); every job's batching delay (back-pressure apart) p50 %.1f us "
      "p99 %.1f us, against max_wait + 2x a batch's mean time in flight (%.1f us) = %.1f us\n",
      name, engine_thread ? "engine thread" : "driven by the reactor's pollers", opt.max_batch,
      ctx.batch.wait_us, opt.max_in_flight, ctx.batch.streams,
      static_cast<unsigned long long>(st.batches), static_cast<unsigned long long>(st.full_batches),
      static_cast<unsigned long long>(st.timed_batches),
      static_cast<unsigned long long>(st.idle_batches), st.mean_batch(), st.largest_batch,
      st.batches == 0 ? 0.0 : static_cast<double>(transfers) / static_cast<double>(st.batches),
      st.mean_wait_us(), static_cast<double>(st.wait_ns_max) / 1e3,
      static_cast<unsigned long long>(st.lone_jobs), st.mean_lone_wait_us(),
      st.mean_lone_backpressure_us(), st.mean_lone_batching_us(),
      static_cast<double>(st.lone_batching_ns_max) / 1e3, st.batching_quantile_us(0.5),
      st.batching_quantile_us(0.99), st.mean_flight_us(),
      ctx.batch.wait_us + 2.0 * st.mean_flight_us());
}

void coro_graph_batched(mode_context& ctx, timed_region& timer) {
  run_batched("coro_graph_batched", ctx, timer, false);
}
void coro_staged_batched(mode_context& ctx, timed_region& timer) {
  run_batched("coro_staged_batched", ctx, timer, true);
}

int pool_plus_reactor(int, int pool_threads) { return pool_threads + 1; }
int pool_plus_reactor_and_batcher(int, int pool_threads) { return pool_threads + 2; }

} // namespace

void register_graph_modes(std::vector<mode_entry>& modes) {
  modes.push_back({{"coro_graph", "cuawait",
                    "C coroutine pipelines on the pool, each replaying its job as one captured "
                    "CUDA graph (one launch, one completion per job)"},
                   coro_graph,
                   false,
                   4096,
                   pool_plus_reactor});
  modes.push_back({{"coro_region", "cuawait",
                    "as coro_graph through the region cache: co_await cached_region(...) per "
                    "job, instantiated on first use per pipeline, replayed after"},
                   coro_region,
                   false,
                   4096,
                   pool_plus_reactor});
  modes.push_back({{"coro_graph_batched", "cuawait",
                    "C coroutine pipelines on the pool submitting to a batcher (--batch, "
                    "--batch-wait-us, --batch-in-flight, --batch-streams): jobs in adjacent "
                    "arena slots share merged copies and kernel launches"},
                   coro_graph_batched,
                   false,
                   65536,
                   pool_plus_reactor_and_batcher});
  modes.push_back({{"coro_staged_batched", "cuawait",
                    "as coro_graph_batched, each batch's merged H2D copies, kernels and merged "
                    "D2H copies on the shared stage streams of coro_staged (one merged copy per "
                    "direction in flight)"},
                   coro_staged_batched,
                   false,
                   65536,
                   pool_plus_reactor_and_batcher});
}

} // namespace cuawait::bench
