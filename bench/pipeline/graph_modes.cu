// SPDX-License-Identifier: Apache-2.0
// The graph modes of the pipeline benchmark (issue 5), written as a user writes them:
//   coro_graph          C coroutine pipelines on the runtime's pool; each captures its
//                       job's four GPU operations into a graph once, then per job:
//                       pre, co_await exec.launch(stream), post (one launch, one completion).
//   coro_graph_batched  C coroutine pipelines each hold a slot of an arena_pair (pinned +
//                       device at equal offsets); per job: pre, co_await batcher.submit(job),
//                       post. A batch's copies of adjacent slots merge into one transfer, and
//                       kernels A and B run once per merged run.
// Hookup (bench/pipeline is h6's): add graph_modes.cu to add_executable in
// bench/pipeline/CMakeLists.txt, declare `void register_graph_modes(std::vector<mode_entry>&);`
// in modes.hpp and call it in main.cpp after register_cuawait_modes(registry).

#include "kernels.hpp"
#include "modes.hpp"

#include <cuawait/cuda/arena.hpp>
#include <cuawait/cuda/batcher.hpp>
#include <cuawait/cuda/capture.hpp>
#include <cuawait/cuda/graph.hpp>
#include <cuawait/runtime.hpp>
#include <cuawait/task.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <vector>

namespace cuawait::bench {
namespace {

namespace cu = cuawait::cuda;
using clock_type = std::chrono::steady_clock;

double us_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::micro>(clock_type::now() - t0).count();
}

//! One coro_graph pipeline: a stream, buffers, and the job graph over them.
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
      cu::check(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, cs.get()), "copy H2D",
                "cudaMemcpyAsync");
      cu::check(launch_kernel_a(dev, dev, n, iters, grid, cs.get()), "kernel A", "launch");
      cu::check(launch_kernel_b(dev, dev, n, iters, grid, cs.get()), "kernel B", "launch");
      cu::check(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, cs.get()), "copy D2H",
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
  double capture_us = 0;
  double instantiate_us = 0;
  std::vector<std::unique_ptr<graph_pipeline>> pipes;
  for (int i = 0; i < ctx.concurrency; ++i) {
    pipes.push_back(std::make_unique<graph_pipeline>(ctx, capture_us, instantiate_us));
  }
  std::fprintf(stderr, "coro_graph: capture %.1f us, instantiate+upload %.1f us per pipeline\n",
               capture_us / ctx.concurrency, instantiate_us / ctx.concurrency);
  runtime rt(runtime_options{.threads = static_cast<std::size_t>(ctx.pool_threads)});
  std::atomic<std::int64_t> next{0};
  timer.start();
  for (auto& p : pipes) {
    rt.spawn(graph_worker(ctx, *p, next));
  }
  rt.join_spawned();
  timer.stop();
}

//! One job of coro_graph_batched: its id and its arena slot's buffers.
struct batched_job {
  std::int64_t id = -1;
  float* host = nullptr;
  float* dev = nullptr;
};

//! A batch: merged copies in, kernels A and B per merged run, merged copies out.
struct batch_shape {
  const mode_context* ctx;
  void operator()(std::span<batched_job* const> jobs, cu::stream_ref s) const {
    const std::size_t bytes = static_cast<std::size_t>(ctx->work.w().bytes);
    std::vector<copy_span> in, out;
    in.reserve(jobs.size());
    out.reserve(jobs.size());
    for (const batched_job* j : jobs) {
      in.push_back({j->dev, j->host, bytes});
      out.push_back({j->host, j->dev, bytes});
    }
    cu::copy_merged(s, in); // `in` now holds the merged device runs
    const int iters = ctx->work.w().iters;
    for (const copy_span& run : in) {
      float* d = static_cast<float*>(run.dst);
      const std::size_t n = run.bytes / sizeof(float);
      const int grid = kernel_grid(n, ctx->sms);
      cu::check(launch_kernel_a(d, d, n, iters, grid, s.get()), "kernel A", "launch");
      cu::check(launch_kernel_b(d, d, n, iters, grid, s.get()), "kernel B", "launch");
    }
    cu::copy_merged(s, out);
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

void coro_graph_batched(mode_context& ctx, timed_region& timer) {
  const std::size_t bytes = static_cast<std::size_t>(ctx.work.w().bytes);
  const std::size_t pipelines = static_cast<std::size_t>(ctx.concurrency);
  cu::arena_pair arena(bytes, pipelines);
  batch_options opt;
  opt.max_batch = std::max<std::size_t>(1, std::min<std::size_t>(32, pipelines / 2));
  opt.max_wait = std::chrono::microseconds(20);
  opt.max_in_flight = 8;
  runtime rt(runtime_options{.threads = static_cast<std::size_t>(ctx.pool_threads)});
  batch_stats st;
  {
    cu::batcher<batched_job> batch(batch_shape{&ctx}, opt, 4);
    std::atomic<std::int64_t> next{0};
    timer.start();
    for (std::size_t i = 0; i < pipelines; ++i) {
      rt.spawn(batched_worker(ctx, arena, batch, next));
    }
    rt.join_spawned();
    timer.stop();
    st = batch.stats();
  }
  std::fprintf(stderr,
               "coro_graph_batched: %llu batches, mean %.1f jobs (max %zu), added latency mean "
               "%.1f us max %.1f us; lone jobs %llu, their added latency mean %.1f us\n",
               static_cast<unsigned long long>(st.batches), st.mean_batch(), st.largest_batch,
               st.mean_wait_us(), static_cast<double>(st.wait_ns_max) / 1e3,
               static_cast<unsigned long long>(st.lone_jobs), st.mean_lone_wait_us());
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
  modes.push_back({{"coro_graph_batched", "cuawait",
                    "C coroutine pipelines on the pool submitting to a batcher: jobs in adjacent "
                    "arena slots share merged copies and kernel launches"},
                   coro_graph_batched,
                   false,
                   65536,
                   pool_plus_reactor_and_batcher});
}

} // namespace cuawait::bench
