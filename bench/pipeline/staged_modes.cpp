// SPDX-License-Identifier: Apache-2.0
// coro_staged: the pipeline for large jobs (W3), written as a user writes it with the
// public API. All pipelines share three stage streams (stage_streams.hpp): every H2D copy
// goes to one stream, kernels to the compute streams, every D2H copy to one stream, linked
// by events recorded per job, so one copy per direction is in flight at any time and both
// directions of the link stay busy. Each pipeline coroutine, on the runtime's pool:
//
//   pre(job)
//   in.copy(dev, host); in.record(loaded)            } enqueued under one lock, so that
//   compute.wait(loaded); A; B; compute.record(done) } the three streams see the jobs in
//   out.wait(done); d2h = out.copy(host, dev)        } the same order
//   co_await d2h                                     (one completion per job)
//   post(job)
//
// Event reuse: each pipeline owns its two events and re-records them for its next job
// only after this job's D2H completed. That is more than needed: a stream's wait captures
// the event's state when it is enqueued (cudaStreamWaitEvent), so re-recording after the
// wait call would be safe too.

#include "kernels.hpp"
#include "memory_budget.hpp"
#include "modes.hpp"
#include "reactor_warm_up.hpp"
#include "stage_streams.hpp"
#include "trace_scope.hpp"

#include <cuawait/cuda.hpp>
#include <cuawait/runtime.hpp>
#include <cuawait/when_all.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace cuawait::bench {
namespace {

namespace cc = cuawait::cuda;

//! One pipeline's buffers (slices of the run's allocations) and its stage events.
struct staged_pipeline {
  float* host = nullptr;
  float* dev = nullptr;
  cc::event loaded;   //!< recorded on the H2D stream behind this pipeline's copy
  cc::event computed; //!< recorded on its compute stream behind kernel B
};

//! What every pipeline of one run shares.
struct staged_shared {
  const mode_context& ctx;
  thread_pool& pool;
  stage_streams& stages;
  //! Held while a job's stages are enqueued: without it, a job whose H2D is queued later
  //! could get ahead of an earlier one on the compute or D2H stream, and that stream would
  //! stall behind it (by a whole copy) while the earlier job is ready.
  std::mutex order;
  std::atomic<std::int64_t> next{0};
  std::atomic<bool> failed{false};
};

//! Enqueues `job`'s GPU stages on the shared streams; returns the awaitable of its D2H.
cc::operation enqueue_stages(staged_shared& sh, staged_pipeline& p) {
  const mode_context& ctx = sh.ctx;
  const std::size_t n = ctx.work.n();
  const int iters = ctx.work.w().iters;
  const std::lock_guard lock(sh.order);
  const cc::stream_ref in = sh.stages.in();
  const cc::stream_ref compute = sh.stages.next_compute();
  const cc::stream_ref out = sh.stages.out();
  in.copy(p.dev, static_cast<const float*>(p.host), n);
  in.record(p.loaded);
  compute.wait(p.loaded);
  compute.launch(kernel_a_handle(), dim3(ctx.grid), dim3(kernel_block), p.dev, p.dev, n, iters);
  compute.launch(kernel_b_handle(), dim3(ctx.grid), dim3(kernel_block), p.dev, p.dev, n, iters);
  compute.record(p.computed);
  out.wait(p.computed);
  return out.copy(p.host, static_cast<const float*>(p.dev), n);
}

//! One pipeline: takes jobs until none is left.
task<void> staged_worker(staged_shared& sh, staged_pipeline& p) {
  co_await sh.pool.schedule();
  try {
    for (;;) {
      const std::int64_t job = sh.next.fetch_add(1, std::memory_order_relaxed);
      if (job >= sh.ctx.jobs || sh.failed.load(std::memory_order_relaxed)) {
        co_return;
      }
      sh.ctx.work.pre(job, p.host);
      co_await enqueue_stages(sh, p);
      sh.ctx.work.post(job, p.host);
    }
  } catch (...) {
    sh.failed = true; // the other pipelines stop taking jobs
    throw;
  }
}

task<void> all_of(std::vector<task<void>> pipelines) { co_await when_all(std::move(pipelines)); }

void coro_staged(mode_context& ctx, timed_region& timer) {
  const std::size_t pipelines = static_cast<std::size_t>(ctx.pipelines());
  const std::size_t n = ctx.work.n();
  const double bytes = static_cast<double>(pipelines) * static_cast<double>(n) * sizeof(float);
  require_memory("coro_staged", bytes, bytes);
  runtime rt(runtime_options{.threads = static_cast<std::size_t>(ctx.pool_threads)});
  const trace_scope trace(rt, ctx);
  const cc::stream setup;
  cc::device_buffer<float> dev(pipelines * n, setup);
  setup.memset(dev.data(), 0, dev.size());
  cc::pinned_buffer<float> host(pipelines * n);
  std::fill(host.data(), host.data() + host.size(), 0.0f);
  std::vector<staged_pipeline> pipes(pipelines);
  for (std::size_t i = 0; i < pipelines; ++i) {
    pipes[i].host = host.data() + i * n;
    pipes[i].dev = dev.data() + i * n;
  }
  setup.sync();
  // Declared after the buffers: its destructor drains the streams before they are freed.
  stage_streams stages;
  warm_reactor(rt, {stages.out()}); // the only stream awaited
  staged_shared sh{ctx, rt.pool(), stages};
  std::vector<task<void>> tasks;
  tasks.reserve(pipelines);
  for (staged_pipeline& p : pipes) {
    tasks.push_back(staged_worker(sh, p));
  }
  timer.start();
  rt.run(all_of(std::move(tasks)));
  timer.stop();
}

int pool_plus_reactor(int, int pool_threads) { return pool_threads + 1; }

} // namespace

void register_staged_modes(std::vector<mode_entry>& modes) {
  modes.push_back({{"coro_staged", "cuawait",
                    "for large jobs: C coroutine pipelines on the pool share one H2D stream, "
                    "kernel streams and one D2H stream linked by per-job events (no host round "
                    "trip), so one copy per direction is in flight and both stay busy; one "
                    "co_await per job"},
                   coro_staged,
                   false,
                   1 << 30,
                   pool_plus_reactor});
}

} // namespace cuawait::bench
