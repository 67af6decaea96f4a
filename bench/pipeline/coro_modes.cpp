// SPDX-License-Identifier: Apache-2.0
// The cuawait modes of the pipeline benchmark, written as a user writes them with the
// public API: `concurrency` pipeline coroutines, each taking jobs from a shared counter and
// running them as sequential code; a stream lease per job from a `stream_pool`; one runtime
// (pool + GPU completion reactor) per mode run.
//
//   coro_per_op[_pool]    co_await after every operation (the traditional blocking loop's
//                         shape, written as coroutines)
//   coro_batched[_pool]   enqueue the job's four GPU operations, co_await once
//   coro_mapped           zero-copy: kernel A reads the job's mapped host buffer, kernel B
//                         writes it back; no copies, one co_await (on the pool)
// Without _pool the coroutines run on the thread that calls `runtime::run` (one driving
// thread does all CPU work); with _pool they move onto the runtime's pool first.
//
// With --devices naming several devices, one runtime serves them all and a
// `device_scheduler` gives each job the device with the fewest jobs in flight; every
// pipeline has a device buffer on each device, and the job leases a stream of its device.

#include "kernels.hpp"
#include "memory_budget.hpp"
#include "modes.hpp"
#include "reactor_warm_up.hpp"
#include "trace_scope.hpp"

#include <cuawait/cuda.hpp>
#include <cuawait/cuda/device_scheduler.hpp>
#include <cuawait/runtime.hpp>
#include <cuawait/when_all.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace cuawait::bench {
namespace {

namespace cc = cuawait::cuda;

//! Streams per mode run: one per pipeline up to this many; more pipelines share them
//! through the pool's leases (the scaling run goes to 100,000 pipelines).
constexpr std::size_t max_streams = 64;

enum class style { per_op, batched, mapped };

//! What every pipeline of one mode run shares.
struct shared_state {
  const mode_context& ctx;
  cc::stream_pool& streams;
  thread_pool* pool = nullptr; // null: stay on the driving thread
  std::atomic<std::int64_t> next{0};
  std::atomic<bool> failed{false};
};

//! One job: CPU pre, H2D, kernel A, kernel B, D2H, CPU post; awaiting every operation.
task<void> job_per_op(const mode_context& ctx, cc::stream_ref s, float* host, float* dev,
                      std::int64_t job) {
  const std::size_t n = ctx.work.n();
  const int iters = ctx.work.w().iters;
  ctx.work.pre(job, host);
  co_await s.copy(dev, host, n);
  co_await s.launch(kernel_a_handle(), dim3(ctx.grid), dim3(kernel_block), dev, dev, n, iters);
  co_await s.launch(kernel_b_handle(), dim3(ctx.grid), dim3(kernel_block), dev, dev, n, iters);
  co_await s.copy(host, dev, n);
  ctx.work.post(job, host);
}

//! One job, enqueuing its GPU work and awaiting once (the last operation: stream order
//! makes it wait for the ones before).
task<void> job_batched(const mode_context& ctx, cc::stream_ref s, float* host, float* dev,
                       std::int64_t job) {
  const std::size_t n = ctx.work.n();
  const int iters = ctx.work.w().iters;
  ctx.work.pre(job, host);
  s.copy(dev, host, n);
  s.launch(kernel_a_handle(), dim3(ctx.grid), dim3(kernel_block), dev, dev, n, iters);
  s.launch(kernel_b_handle(), dim3(ctx.grid), dim3(kernel_block), dev, dev, n, iters);
  co_await s.copy(host, dev, n);
  ctx.work.post(job, host);
}

//! One job on zero-copy memory: kernel A reads the host buffer over the bus (through its
//! device alias), kernel B writes its result back there.
task<void> job_mapped(const mode_context& ctx, cc::stream_ref s, float* host, float* host_on_dev,
                      float* dev, std::int64_t job) {
  const std::size_t n = ctx.work.n();
  const int iters = ctx.work.w().iters;
  ctx.work.pre(job, host);
  s.launch(kernel_a_handle(), dim3(ctx.grid), dim3(kernel_block), host_on_dev, dev, n, iters);
  co_await s.launch(kernel_b_handle(), dim3(ctx.grid), dim3(kernel_block), dev, host_on_dev, n,
                    iters);
  ctx.work.post(job, host);
}

//! One job in the given style.
task<void> run_job(const mode_context& ctx, style st, cc::stream_ref s, float* host,
                   float* host_on_dev, float* dev, std::int64_t job) {
  switch (st) {
  case style::per_op:
    return job_per_op(ctx, s, host, dev, job);
  case style::batched:
    return job_batched(ctx, s, host, dev, job);
  case style::mapped:
    break;
  }
  return job_mapped(ctx, s, host, host_on_dev, dev, job);
}

//! One pipeline: takes jobs until none is left, each on a leased stream.
task<void> pipeline(shared_state& sh, style st, float* host, float* host_on_dev, float* dev) {
  if (sh.pool != nullptr) {
    co_await sh.pool->schedule();
  }
  try {
    for (;;) {
      const std::int64_t job = sh.next.fetch_add(1, std::memory_order_relaxed);
      if (job >= sh.ctx.jobs || sh.failed.load(std::memory_order_relaxed)) {
        co_return;
      }
      const cc::stream_lease s = co_await sh.streams.acquire();
      co_await run_job(sh.ctx, st, s, host, host_on_dev, dev, job);
    }
  } catch (...) {
    sh.failed = true; // the other pipelines stop taking jobs
    throw;
  }
}

//! What every pipeline of a mode run over several devices shares.
struct devices_state {
  const mode_context& ctx;
  cc::device_scheduler& scheduler;
  //! Per device: the device buffers of every pipeline (pipeline i at i * n).
  std::vector<float*> dev;
  thread_pool* pool = nullptr; // null: stay on the driving thread
  std::atomic<std::int64_t> next{0};
  std::atomic<bool> failed{false};
};

//! One pipeline over several devices: each job on the device the scheduler picks, with
//! that device's slice `slot` of the buffers and a stream of that device.
task<void> pipeline_on_devices(devices_state& sh, style st, std::size_t slot, float* host,
                               float* host_on_dev) {
  if (sh.pool != nullptr) {
    co_await sh.pool->schedule();
  }
  const std::size_t n = sh.ctx.work.n();
  try {
    for (;;) {
      const std::int64_t job = sh.next.fetch_add(1, std::memory_order_relaxed);
      if (job >= sh.ctx.jobs || sh.failed.load(std::memory_order_relaxed)) {
        co_return;
      }
      const cc::device_lease d = sh.scheduler.acquire(); // its device current here
      const cc::stream_lease s = co_await d.acquire_stream();
      float* dev = sh.dev[d.index()] + slot * n;
      co_await run_job(sh.ctx, st, s, host, host_on_dev, dev, job);
    }
  } catch (...) {
    sh.failed = true;
    throw;
  }
}

task<void> all_pipelines(std::vector<task<void>> pipelines) {
  co_await when_all(std::move(pipelines));
}

//! As `run_coro` over the several devices of `ctx.devices` (see the file comment).
void run_coro_devices(const char* name, mode_context& ctx, timed_region& timer, style st,
                      bool on_pool) {
  const std::size_t pipelines = static_cast<std::size_t>(ctx.pipelines());
  const std::size_t n = ctx.work.n();
  const double bytes = static_cast<double>(pipelines) * static_cast<double>(n) * sizeof(float);
  require_memory(name, bytes, bytes);
  runtime_options ro;
  ro.threads = on_pool ? static_cast<std::size_t>(ctx.pool_threads) : 1;
  ro.devices = ctx.devices;
  // Each device's streams: as many as one device gets today, shared by its jobs' leases.
  ro.streams.normal = std::min(pipelines, max_streams);
  runtime rt(ro);
  cc::device_scheduler scheduler(rt);
  std::vector<cc::device_buffer<float>> dev;
  std::vector<float*> dev_of;
  std::vector<cc::stream_ref> all_streams;
  for (std::size_t i = 0; i < rt.devices().size(); ++i) {
    cc::device_context& c = rt.context(i);
    const cc::context_scope here(c);
    cc::set_device(c.device());
    const cc::stream_ref setup = c.streams().at(0);
    dev.emplace_back(pipelines * n, setup, c.memory());
    setup.memset(dev.back().data(), 0, dev.back().size());
    setup.sync();
    dev_of.push_back(dev.back().data());
    for (std::size_t k = 0; k < c.streams().size(); ++k) {
      all_streams.push_back(c.streams().at(k));
    }
  }
  cc::set_device(rt.context().device());
  cc::pinned_buffer<float> host;
  cc::mapped_buffer<float> mapped;
  if (st == style::mapped) {
    mapped = cc::mapped_buffer<float>(pipelines * n); // zeroed; portable: every device's
  } else {
    host = cc::pinned_buffer<float>(pipelines * n, rt.context().pinned()); // portable
    std::fill(host.data(), host.data() + host.size(), 0.0f);
  }
  warm_reactor(rt, std::move(all_streams)); // each await goes to its stream's device
  const trace_scope trace(rt, ctx);

  devices_state sh{ctx, scheduler, dev_of, on_pool ? &rt.pool() : nullptr};
  std::vector<task<void>> tasks;
  tasks.reserve(pipelines);
  for (std::size_t i = 0; i < pipelines; ++i) {
    float* h = st == style::mapped ? mapped.host_data() + i * n : host.data() + i * n;
    float* h_dev = st == style::mapped ? mapped.device_data() + i * n : nullptr;
    tasks.push_back(pipeline_on_devices(sh, st, i, h, h_dev));
  }
  timer.start();
  rt.run(all_pipelines(std::move(tasks)));
  timer.stop();
  for (std::size_t i = 0; i < scheduler.size(); ++i) {
    ctx.jobs_per_device.push_back(static_cast<std::int64_t>(scheduler.completed(i)));
  }
  cc::set_device(rt.context().device()); // the run may leave another device current
}

//! Runs `ctx.jobs` jobs in `ctx.pipelines()` pipelines of style `st` (mode `name`).
void run_coro(const char* name, mode_context& ctx, timed_region& timer, style st, bool on_pool) {
  if (ctx.devices.size() > 1) {
    run_coro_devices(name, ctx, timer, st, on_pool);
    return;
  }
  const std::size_t pipelines = static_cast<std::size_t>(ctx.pipelines());
  const std::size_t n = ctx.work.n();
  const double bytes = static_cast<double>(pipelines) * static_cast<double>(n) * sizeof(float);
  require_memory(name, bytes, bytes);
  runtime_options ro;
  ro.threads = on_pool ? static_cast<std::size_t>(ctx.pool_threads) : 1;
  runtime rt(ro);
  cc::stream_pool streams(std::min(pipelines, max_streams));
  // Every pipeline's buffers are slices of one allocation per kind (cheap at 100,000).
  const cc::stream setup;
  cc::device_buffer<float> dev(pipelines * n, setup);
  setup.memset(dev.data(), 0, dev.size());
  cc::pinned_buffer<float> host;
  cc::mapped_buffer<float> mapped;
  if (st == style::mapped) {
    mapped = cc::mapped_buffer<float>(pipelines * n); // zeroed
  } else {
    host = cc::pinned_buffer<float>(pipelines * n);
    std::fill(host.data(), host.data() + host.size(), 0.0f);
  }
  setup.sync();
  std::vector<cc::stream_ref> all_streams;
  for (std::size_t i = 0; i < streams.size(); ++i) {
    all_streams.push_back(streams.at(i));
  }
  warm_reactor(rt, std::move(all_streams));
  const trace_scope trace(rt, ctx);

  shared_state sh{ctx, streams, on_pool ? &rt.pool() : nullptr};
  std::vector<task<void>> tasks;
  tasks.reserve(pipelines);
  for (std::size_t i = 0; i < pipelines; ++i) {
    float* h = st == style::mapped ? mapped.host_data() + i * n : host.data() + i * n;
    float* h_dev = st == style::mapped ? mapped.device_data() + i * n : nullptr;
    tasks.push_back(pipeline(sh, st, h, h_dev, dev.data() + i * n));
  }
  timer.start();
  rt.run(all_pipelines(std::move(tasks)));
  timer.stop();
}

void coro_per_op(mode_context& ctx, timed_region& t) {
  run_coro("coro_per_op", ctx, t, style::per_op, false);
}
void coro_per_op_pool(mode_context& ctx, timed_region& t) {
  run_coro("coro_per_op_pool", ctx, t, style::per_op, true);
}
void coro_batched(mode_context& ctx, timed_region& t) {
  run_coro("coro_batched", ctx, t, style::batched, false);
}
void coro_batched_pool(mode_context& ctx, timed_region& t) {
  run_coro("coro_batched_pool", ctx, t, style::batched, true);
}
void coro_mapped(mode_context& ctx, timed_region& t) {
  run_coro("coro_mapped", ctx, t, style::mapped, true);
}

int driving_thread(int, int) { return 1; }
int pool_threads(int, int pool) { return pool; }

} // namespace

void register_cuawait_modes(std::vector<mode_entry>& modes) {
  constexpr int unbounded = 1 << 30;
  modes.push_back({{"coro_per_op", "cuawait",
                    "concurrency coroutines on one driving thread, co_await after every "
                    "operation (the traditional blocking loop's shape, written as coroutines)"},
                   coro_per_op,
                   false,
                   unbounded,
                   driving_thread});
  modes.push_back({{"coro_per_op_pool", "cuawait",
                    "as coro_per_op, the coroutines running on the runtime's pool (--threads)"},
                   coro_per_op_pool,
                   false,
                   unbounded,
                   pool_threads});
  modes.push_back({{"coro_batched", "cuawait",
                    "concurrency coroutines on one driving thread, each job's four GPU "
                    "operations enqueued and awaited once"},
                   coro_batched,
                   false,
                   unbounded,
                   driving_thread});
  modes.push_back({{"coro_batched_pool", "cuawait",
                    "as coro_batched, the coroutines running on the runtime's pool (--threads)"},
                   coro_batched_pool,
                   false,
                   unbounded,
                   pool_threads});
  modes.push_back({{"coro_mapped", "cuawait",
                    "zero-copy: kernel A reads mapped host memory, kernel B writes it; no "
                    "copies, one co_await per job, on the pool"},
                   coro_mapped,
                   false,
                   unbounded,
                   pool_threads});
}

} // namespace cuawait::bench
