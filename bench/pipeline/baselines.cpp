// SPDX-License-Identifier: Apache-2.0
// The baselines of docs/WORKLOAD.md in raw CUDA, as code written without cuawait looks:
//   sync_per_op      one stream, cudaStreamSynchronize after every operation (the traditional
//                    blocking loop);
//   threads_per_op   T threads, each with its own stream and buffers, synchronizing after
//                    every operation, taking jobs from a shared counter;
//   threads_per_job  the same threads, enqueuing a job's four GPU operations and
//                    synchronizing once per job (what a competent thread-pool user writes);
//   handsm           one thread, K streams, a hand-written state machine: enqueue a job's
//                    four GPU operations, record one event, poll the events, do a job's CPU
//                    post-processing when its event completes.

#include "gpu_resources.hpp"
#include "kernels.hpp"
#include "modes.hpp"

#include <atomic>
#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace cuawait::bench {
namespace {

//! handsm gives up when no job completes for this long (a lost event must not hang it).
constexpr std::chrono::seconds stall_limit{30};

void sync(cudaStream_t s, const char* operation) {
  cuda::check(operation, cudaStreamSynchronize(s), "cudaStreamSynchronize");
}

//! Enqueues one job's four GPU operations on `s`: H2D copy, kernel A, kernel B, D2H copy.
void enqueue_job(const mode_context& ctx, const raw_slot& slot, cudaStream_t s) {
  const host_work& work = ctx.work;
  const std::size_t bytes = static_cast<std::size_t>(work.w().bytes);
  CUAWAIT_CUDA_CHECK("copy H2D",
                     cudaMemcpyAsync(slot.d(), slot.h(), bytes, cudaMemcpyHostToDevice, s));
  CUAWAIT_CUDA_CHECK("kernel A",
                     launch_kernel_a(slot.d(), slot.d(), work.n(), work.w().iters, ctx.grid, s));
  CUAWAIT_CUDA_CHECK("kernel B",
                     launch_kernel_b(slot.d(), slot.d(), work.n(), work.w().iters, ctx.grid, s));
  CUAWAIT_CUDA_CHECK("copy D2H",
                     cudaMemcpyAsync(slot.h(), slot.d(), bytes, cudaMemcpyDeviceToHost, s));
}

//! One job, synchronizing after every operation.
void run_job_blocking(const mode_context& ctx, std::int64_t job, const raw_slot& slot) {
  const host_work& work = ctx.work;
  const std::size_t bytes = static_cast<std::size_t>(work.w().bytes);
  const cudaStream_t s = slot.stream.get();
  work.pre(job, slot.h());
  CUAWAIT_CUDA_CHECK("copy H2D",
                     cudaMemcpyAsync(slot.d(), slot.h(), bytes, cudaMemcpyHostToDevice, s));
  sync(s, "copy H2D");
  CUAWAIT_CUDA_CHECK("kernel A",
                     launch_kernel_a(slot.d(), slot.d(), work.n(), work.w().iters, ctx.grid, s));
  sync(s, "kernel A");
  CUAWAIT_CUDA_CHECK("kernel B",
                     launch_kernel_b(slot.d(), slot.d(), work.n(), work.w().iters, ctx.grid, s));
  sync(s, "kernel B");
  CUAWAIT_CUDA_CHECK("copy D2H",
                     cudaMemcpyAsync(slot.h(), slot.d(), bytes, cudaMemcpyDeviceToHost, s));
  sync(s, "copy D2H");
  work.post(job, slot.h());
}

//! One job, enqueuing its four GPU operations and synchronizing once (stream order makes
//! the D2H copy wait for the kernels, and the sync wait for the D2H copy).
void run_job_one_sync(const mode_context& ctx, std::int64_t job, const raw_slot& slot) {
  const cudaStream_t s = slot.stream.get();
  ctx.work.pre(job, slot.h());
  enqueue_job(ctx, slot, s);
  sync(s, "job (H2D, kernel A, kernel B, D2H)");
  ctx.work.post(job, slot.h());
}

void sync_per_op(mode_context& ctx, timed_region& timer) {
  const raw_slot slot(static_cast<std::size_t>(ctx.work.w().bytes));
  timer.start();
  for (std::int64_t job = 0; job < ctx.jobs; ++job) {
    run_job_blocking(ctx, job, slot);
  }
  timer.stop();
}

using job_fn = void (*)(const mode_context& ctx, std::int64_t job, const raw_slot& slot);

//! T = concurrency threads (created before the timer, released together), each with its
//! own stream and buffers, taking jobs from a shared counter and running each with `run_job`.
void run_threads(mode_context& ctx, timed_region& timer, job_fn run_job) {
  const int threads = ctx.concurrency;
  std::vector<std::unique_ptr<raw_slot>> slots;
  for (int t = 0; t < threads; ++t) {
    slots.push_back(std::make_unique<raw_slot>(static_cast<std::size_t>(ctx.work.w().bytes)));
  }
  std::atomic<std::int64_t> next{0};
  std::atomic<bool> go{false};
  std::atomic<bool> abort{false};
  std::mutex error_mutex;
  std::exception_ptr error;
  auto worker = [&](int t) {
    go.wait(false);
    try {
      for (;;) {
        const std::int64_t job = next.fetch_add(1, std::memory_order_relaxed);
        if (job >= ctx.jobs || abort.load(std::memory_order_relaxed)) {
          return;
        }
        run_job(ctx, job, *slots[static_cast<std::size_t>(t)]);
      }
    } catch (...) {
      abort = true;
      const std::lock_guard lock(error_mutex);
      if (!error) {
        error = std::current_exception();
      }
    }
  };
  std::vector<std::jthread> pool;
  pool.reserve(static_cast<std::size_t>(threads));
  try {
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back(worker, t);
    }
  } catch (...) {
    // Release the threads already started so that their joins cannot hang.
    abort = true;
    go = true;
    go.notify_all();
    throw;
  }
  timer.start();
  go = true;
  go.notify_all();
  for (std::jthread& th : pool) {
    th.join();
  }
  timer.stop();
  if (error) {
    std::rethrow_exception(error);
  }
}

void threads_per_op(mode_context& ctx, timed_region& timer) {
  run_threads(ctx, timer, run_job_blocking);
}

void threads_per_job(mode_context& ctx, timed_region& timer) {
  run_threads(ctx, timer, run_job_one_sync);
}

//! One handsm stream: its buffers, its completion event and the job it carries.
struct handsm_slot : raw_slot {
  raw_event done = make_event();
  std::int64_t job = -1;
  explicit handsm_slot(std::size_t bytes) : raw_slot(bytes) {}
};

void handsm_start(const mode_context& ctx, handsm_slot& slot, std::int64_t job) {
  const cudaStream_t s = slot.stream.get();
  slot.job = job;
  ctx.work.pre(job, slot.h());
  enqueue_job(ctx, slot, s);
  CUAWAIT_CUDA_CHECK("event record", cudaEventRecord(slot.done.get(), s));
}

void handsm(mode_context& ctx, timed_region& timer) {
  using clock = std::chrono::steady_clock;
  std::vector<std::unique_ptr<handsm_slot>> slots;
  for (int k = 0; k < ctx.concurrency; ++k) {
    slots.push_back(std::make_unique<handsm_slot>(static_cast<std::size_t>(ctx.work.w().bytes)));
  }
  timer.start();
  std::int64_t next = 0;
  std::int64_t active = 0;
  for (auto& slot : slots) {
    if (next < ctx.jobs) {
      handsm_start(ctx, *slot, next++);
      ++active;
    }
  }
  auto last_progress = clock::now();
  while (active > 0) {
    bool progressed = false;
    for (auto& slot : slots) {
      if (slot->job < 0) {
        continue;
      }
      const cudaError_t e = cudaEventQuery(slot->done.get());
      if (e == cudaErrorNotReady) {
        continue;
      }
      cuda::check("event poll", e, "cudaEventQuery");
      ctx.work.post(slot->job, slot->h());
      slot->job = -1;
      --active;
      progressed = true;
      if (next < ctx.jobs) {
        handsm_start(ctx, *slot, next++);
        ++active;
      }
    }
    if (progressed) {
      last_progress = clock::now();
    } else if (clock::now() - last_progress > stall_limit) {
      throw std::runtime_error("handsm: no job completed for " +
                               std::to_string(stall_limit.count()) + " s");
    }
  }
  timer.stop();
}

int one_thread(int, int) { return 1; }
int thread_per_pipeline(int concurrency, int) { return concurrency; }

} // namespace

void register_baselines(std::vector<mode_entry>& modes) {
  modes.push_back({{"sync_per_op", "baseline",
                    "one stream, cudaStreamSynchronize after every operation (the traditional "
                    "blocking loop); runs once, ignoring --concurrency"},
                   sync_per_op,
                   true,
                   1,
                   one_thread});
  modes.push_back({{"threads_per_op", "baseline",
                    "T = concurrency threads, each with its own stream and buffers, "
                    "synchronizing after every operation (at most 1024)"},
                   threads_per_op,
                   false,
                   1024,
                   thread_per_pipeline});
  modes.push_back({{"threads_per_job", "baseline",
                    "T = concurrency threads, each with its own stream and buffers, enqueuing "
                    "a job's four GPU operations and synchronizing once per job (at most 1024)"},
                   threads_per_job,
                   false,
                   1024,
                   thread_per_pipeline});
  modes.push_back({{"handsm", "baseline",
                    "one thread, K = concurrency streams, hand-written state machine polling "
                    "one event per job (at most 4096)"},
                   handsm,
                   false,
                   4096,
                   one_thread});
}

} // namespace cuawait::bench
