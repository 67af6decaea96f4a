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
// And three probes (family "probe", never counted as a baseline): threads_per_job with the
// one synchronize replaced by each way cuawait's strategies learn that the job is done, so
// that a run can tell the cost of the way from the cost of cuawait's own path:
//   threads_event_spin  record an event, spin on cudaEventQuery;
//   threads_query_spin  no marker, spin on cudaStreamQuery;
//   threads_query_paced the same, at most one query every 5 µs (CUAWAIT_PROBE_PACE_US);
//   threads_word_spin   cuStreamWriteValue64 of the job's ticket into a mapped host word,
//                       spin reading the word (the timeline strategy's marker).
// And the same three ways after every operation instead of once per job (threads_per_op
// with its four synchronizes replaced): threads_op_event_spin, threads_op_query_spin,
// threads_op_word_spin.

#include "gpu_resources.hpp"
#include "kernels.hpp"
#include "modes.hpp"

#include <cuda.h> // types only: libcuda is reached through cudaGetDriverEntryPointByVersion

#include <atomic>
#include <chrono>
#include <cstdlib>
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

//! One job, calling `after(s, operation)` after each of its four operations.
template <class Slot, class After>
void run_job_each_op(const mode_context& ctx, std::int64_t job, Slot& slot, After after) {
  const host_work& work = ctx.work;
  const std::size_t bytes = static_cast<std::size_t>(work.w().bytes);
  const cudaStream_t s = slot.stream.get();
  work.pre(job, slot.h());
  CUAWAIT_CUDA_CHECK("copy H2D",
                     cudaMemcpyAsync(slot.d(), slot.h(), bytes, cudaMemcpyHostToDevice, s));
  after(s, "copy H2D");
  CUAWAIT_CUDA_CHECK("kernel A",
                     launch_kernel_a(slot.d(), slot.d(), work.n(), work.w().iters, ctx.grid, s));
  after(s, "kernel A");
  CUAWAIT_CUDA_CHECK("kernel B",
                     launch_kernel_b(slot.d(), slot.d(), work.n(), work.w().iters, ctx.grid, s));
  after(s, "kernel B");
  CUAWAIT_CUDA_CHECK("copy D2H",
                     cudaMemcpyAsync(slot.h(), slot.d(), bytes, cudaMemcpyDeviceToHost, s));
  after(s, "copy D2H");
  work.post(job, slot.h());
}

//! One job, synchronizing after every operation.
void run_job_blocking(const mode_context& ctx, std::int64_t job, raw_slot& slot) {
  run_job_each_op(ctx, job, slot, sync);
}

//! One job, enqueuing its four GPU operations and synchronizing once (stream order makes
//! the D2H copy wait for the kernels, and the sync wait for the D2H copy).
void run_job_one_sync(const mode_context& ctx, std::int64_t job, raw_slot& slot) {
  const cudaStream_t s = slot.stream.get();
  ctx.work.pre(job, slot.h());
  enqueue_job(ctx, slot, s);
  sync(s, "job (H2D, kernel A, kernel B, D2H)");
  ctx.work.post(job, slot.h());
}

void sync_per_op(mode_context& ctx, timed_region& timer) {
  raw_slot slot(static_cast<std::size_t>(ctx.work.w().bytes));
  timer.start();
  for (std::int64_t job = 0; job < ctx.jobs; ++job) {
    run_job_blocking(ctx, job, slot);
  }
  timer.stop();
}

//! T = concurrency threads (created before the timer, released together), each with its
//! own stream and buffers (a `Slot`), taking jobs from a shared counter and running each
//! with `run_job`.
template <class Slot>
void run_threads(mode_context& ctx, timed_region& timer,
                 void (*run_job)(const mode_context&, std::int64_t, Slot&)) {
  const int threads = ctx.concurrency;
  std::vector<std::unique_ptr<Slot>> slots;
  for (int t = 0; t < threads; ++t) {
    slots.push_back(std::make_unique<Slot>(static_cast<std::size_t>(ctx.work.w().bytes)));
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

//! One probe thread's slot: a baseline slot with an event and a mapped host word that the
//! stream writes each job's ticket into.
struct probe_slot : raw_slot {
  raw_event done = make_event();
  host_ptr word_block = make_pinned(sizeof(std::uint64_t), cudaHostAllocMapped);
  CUdeviceptr word_on_device = 0;
  std::uint64_t ticket = 0;
  explicit probe_slot(std::size_t bytes) : raw_slot(bytes) {
    void* d = nullptr;
    CUAWAIT_CUDA_CHECK("mapped word", cudaHostGetDevicePointer(&d, word_block.get(), 0));
    word_on_device = reinterpret_cast<CUdeviceptr>(d);
  }
  [[nodiscard]] std::uint64_t word() const noexcept {
    return std::atomic_ref<std::uint64_t>(*static_cast<std::uint64_t*>(word_block.get()))
        .load(std::memory_order_acquire);
  }
};

using write_value64_fn = CUresult (*)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);

write_value64_fn write_value64() {
  static const write_value64_fn fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    CUAWAIT_CUDA_CHECK("cuStreamWriteValue64 entry point",
                       cudaGetDriverEntryPointByVersion("cuStreamWriteValue64", &f, 12000,
                                                        cudaEnableDefault, &found));
    if (f == nullptr || found != cudaDriverEntryPointSuccess) {
      throw mode_skipped("threads_word_spin: the driver has no cuStreamWriteValue64");
    }
    return reinterpret_cast<write_value64_fn>(f);
  }();
  return fn;
}

//! Spins until `query` stops answering cudaErrorNotReady; throws on an error or a stall.
template <class Query>
void spin_until_done(Query query, const char* operation) {
  const auto since = std::chrono::steady_clock::now();
  for (std::uint32_t n = 0;; ++n) {
    const cudaError_t e = query();
    if (e != cudaErrorNotReady) {
      cuda::check(operation, e, operation);
      return;
    }
    if ((n & 0xfffu) == 0 && std::chrono::steady_clock::now() - since > stall_limit) {
      throw std::runtime_error(std::string(operation) + ": job not done after " +
                               std::to_string(stall_limit.count()) + " s");
    }
  }
}

// How each probe learns that the job it enqueued on `s` is done (marker, then wait).
void finish_event_spin(probe_slot& slot, cudaStream_t s) {
  CUAWAIT_CUDA_CHECK("event record", cudaEventRecord(slot.done.get(), s));
  spin_until_done([&] { return cudaEventQuery(slot.done.get()); }, "cudaEventQuery");
}

void finish_query_spin(probe_slot&, cudaStream_t s) {
  spin_until_done([&] { return cudaStreamQuery(s); }, "cudaStreamQuery");
}

//! The pace of threads_query_paced: CUAWAIT_PROBE_PACE_US, default 5 µs.
std::chrono::microseconds probe_pace() {
  static const std::chrono::microseconds pace{[] {
    const char* e = std::getenv("CUAWAIT_PROBE_PACE_US");
    return e == nullptr ? 5L : std::strtol(e, nullptr, 10);
  }()};
  return pace;
}

//! As finish_query_spin, one query every `probe_pace()` at most (fewer driver calls from
//! the spinners).
void finish_query_paced(probe_slot&, cudaStream_t s) {
  const auto pace = probe_pace();
  spin_until_done(
      [&] {
        const cudaError_t e = cudaStreamQuery(s);
        if (e == cudaErrorNotReady) {
          const auto until = std::chrono::steady_clock::now() + pace;
          while (std::chrono::steady_clock::now() < until) {
          }
        }
        return e;
      },
      "cudaStreamQuery");
}

void finish_word_spin(probe_slot& slot, cudaStream_t s) {
  const std::uint64_t ticket = ++slot.ticket;
  if (write_value64()(reinterpret_cast<CUstream>(s), slot.word_on_device, ticket, 0) !=
      CUDA_SUCCESS) {
    throw cuda::cuda_error(cudaErrorLaunchFailure, "threads_word_spin", "cuStreamWriteValue64");
  }
  spin_until_done([&] { return slot.word() >= ticket ? cudaSuccess : cudaErrorNotReady; },
                  "word spin");
}

//! One job of a probe: as run_job_one_sync, with `Finish` in place of the synchronize.
template <void (*Finish)(probe_slot&, cudaStream_t)>
void run_job_probe(const mode_context& ctx, std::int64_t job, probe_slot& slot) {
  const cudaStream_t s = slot.stream.get();
  ctx.work.pre(job, slot.h());
  enqueue_job(ctx, slot, s);
  Finish(slot, s);
  ctx.work.post(job, slot.h());
}

//! One job of a per-operation probe: as run_job_blocking, with `Finish` after each operation.
template <void (*Finish)(probe_slot&, cudaStream_t)>
void run_job_op_probe(const mode_context& ctx, std::int64_t job, probe_slot& slot) {
  run_job_each_op(ctx, job, slot, [&slot](cudaStream_t s, const char*) { Finish(slot, s); });
}

template <void (*Finish)(probe_slot&, cudaStream_t), bool PerOp = false>
void threads_probe(mode_context& ctx, timed_region& timer) {
  if constexpr (Finish == &finish_word_spin) {
    (void)write_value64(); // a driver without it skips the mode before its threads start
  }
  run_threads(ctx, timer, PerOp ? run_job_op_probe<Finish> : run_job_probe<Finish>);
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
  modes.push_back({{"threads_event_spin", "probe",
                    "threads_per_job with an event record and a cudaEventQuery spin in place "
                    "of the synchronize (at most 1024)"},
                   threads_probe<finish_event_spin>,
                   false,
                   1024,
                   thread_per_pipeline});
  modes.push_back({{"threads_query_spin", "probe",
                    "threads_per_job with a cudaStreamQuery spin in place of the synchronize "
                    "(at most 1024)"},
                   threads_probe<finish_query_spin>,
                   false,
                   1024,
                   thread_per_pipeline});
  modes.push_back({{"threads_query_paced", "probe",
                    "threads_query_spin with at most one query every CUAWAIT_PROBE_PACE_US "
                    "(default 5 us; at most 1024)"},
                   threads_probe<finish_query_paced>,
                   false,
                   1024,
                   thread_per_pipeline});
  modes.push_back({{"threads_word_spin", "probe",
                    "threads_per_job with cuStreamWriteValue64 into a mapped host word and a "
                    "spin on the word in place of the synchronize (at most 1024)"},
                   threads_probe<finish_word_spin>,
                   false,
                   1024,
                   thread_per_pipeline});
  modes.push_back({{"threads_op_event_spin", "probe",
                    "threads_per_op with an event record and a cudaEventQuery spin in place of "
                    "each synchronize (at most 1024)"},
                   threads_probe<finish_event_spin, true>,
                   false,
                   1024,
                   thread_per_pipeline});
  modes.push_back({{"threads_op_query_spin", "probe",
                    "threads_per_op with a cudaStreamQuery spin in place of each synchronize "
                    "(at most 1024)"},
                   threads_probe<finish_query_spin, true>,
                   false,
                   1024,
                   thread_per_pipeline});
  modes.push_back({{"threads_op_word_spin", "probe",
                    "threads_per_op with cuStreamWriteValue64 and a word spin in place of each "
                    "synchronize (at most 1024)"},
                   threads_probe<finish_word_spin, true>,
                   false,
                   1024,
                   thread_per_pipeline});
}

} // namespace cuawait::bench
