// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `batcher<Job>`: many coroutines submit small jobs of the same shape; one submission
//! carries many of them, and each coroutine resumes when its own job's batch is done.
//!
//! @code
//! struct job { float* host; float* dev; std::size_t n; };
//! cuda::batcher<job> batch([](std::span<job* const> jobs, cuda::stream_ref s) {
//!   std::vector<copy_span> in, out;
//!   for (job* j : jobs) {
//!     in.push_back({j->dev, j->host, j->n * sizeof(float)});
//!     out.push_back({j->host, j->dev, j->n * sizeof(float)});
//!   }
//!   cuda::copy_merged(s, in);        // adjacent arena slots: one transfer per run
//!   for (const copy_span& r : in) {  // after merging, `in` holds the runs
//!     launch_elementwise(static_cast<float*>(r.dst), r.bytes / sizeof(float), s);
//!   }
//!   cuda::copy_merged(s, out);
//! });
//! task<void> pipeline(job j) {
//!   pre(j);
//!   j = co_await batch.submit(j);     // suspends; resumes when its batch finished
//!   post(j);
//! }
//! @endcode
//!
//! How batches form (see detail/batch_engine.hpp): a batch goes when it holds `max_batch`
//! jobs, or when its oldest job waited `max_wait` (default 5 µs: a job alone waits no
//! longer for company), or at `flush()`; and, by default (`batch_options::submit_when_idle`;
//! `CUAWAIT_BATCH_IDLE=0` turns it off), a partial batch goes at once when none of the
//! batcher's batches is on the GPU. `stats()` reports the batches and the latency
//! batching added (overall and for jobs that went alone).
//!
//! Threads: by default one engine thread per batcher calls the enqueue function (so it
//! runs on that thread, serialised: no locking needed in it), polls the batches'
//! completion events, and hands each coroutine back to the executor it suspended on, those
//! of one batch in bulk (a coroutine awaiting from a plain thread resumes on the engine
//! thread). The engine thread spins while batches are pending or in flight, and sleeps when
//! idle. With `batch_options::engine_thread = false` (or `CUAWAIT_BATCH_THREAD=0`) the
//! batcher has no thread: it rides on the completion reactor of the device context current
//! where it is made, so the threads that poll that reactor for GPU work (the runtime's idle
//! workers, `run` loops) submit due batches and poll the finished ones, and a coroutine
//! whose job fills a batch submits it on its own thread before it suspends (first
//! resolving finished batches when `max_in_flight` are out). The enqueue function then
//! runs on those threads, still one call at a time, with the batcher's device current.

#include "cuawait/cuda/detail/batch_coalesce.hpp"
#include "cuawait/cuda/detail/batch_engine.hpp"
#include "cuawait/cuda/device_context.hpp"
#include "cuawait/cuda/error.hpp"
#include "cuawait/cuda/event_pool.hpp"
#include "cuawait/cuda/stream.hpp"

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <exception>
#include <functional>
#include <optional>
#include <span>
#include <stdexcept>
#include <stop_token>
#include <utility>
#include <vector>

namespace cuawait::cuda {

namespace detail {
//! Whether `cudaMemcpyBatchAsync` may carry copies on `s`: not on the legacy default stream
//! (the driver refuses it there), not while `s` is being captured into a graph (plain copies
//! are captured as copy nodes everywhere; batched ones are not relied on), and not once the
//! driver refused them where the same copies went one by one.
inline std::atomic<bool>& batch_copies_unsupported() noexcept {
  static std::atomic<bool> v{false};
  return v;
}
inline bool batch_copies_usable(stream_ref s) noexcept {
#if CUDART_VERSION >= 13000
  if (batch_copies_unsupported().load(std::memory_order_relaxed) || s.get() == nullptr ||
      s.get() == cudaStreamLegacy) {
    return false;
  }
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s.get(), &capture) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return capture == cudaStreamCaptureStatusNone;
#else
  (void)s;
  return false;
#endif
}
} // namespace detail

//! Enqueues `copies` on `s` in one driver call where the driver allows it
//! (`cudaMemcpyBatchAsync`): a batch of N scattered copies costs the host one submission
//! instead of N. The copies must not overlap one another (they may run in any order among
//! themselves); the batch as a whole is stream-ordered like any copy. Falls back to one
//! `cudaMemcpyAsync` per copy on the legacy default stream, while `s` is capturing, and where
//! the driver refuses batched copies (then for good, once the same copies went one by one);
//! a bad copy is named by the error of its own `cudaMemcpyAsync`. Host memory should be
//! pinned, as for any async copy.
//! @throws cuda_error ("batched copy") naming the call that failed
inline void copy_batch(stream_ref s, std::span<const copy_span> copies) {
  if (copies.empty()) {
    return;
  }
  std::size_t total = 0;
  for (const copy_span& c : copies) {
    total += c.bytes;
  }
  bool batch_refused = false;
#if CUDART_VERSION >= 13000
  if (copies.size() > 1 && detail::batch_copies_usable(s)) {
    std::vector<void*> dsts(copies.size());
    std::vector<const void*> srcs(copies.size());
    std::vector<std::size_t> sizes(copies.size());
    for (std::size_t i = 0; i < copies.size(); ++i) {
      dsts[i] = copies[i].dst;
      srcs[i] = copies[i].src;
      sizes[i] = copies[i].bytes;
    }
    cudaMemcpyAttributes attr{};
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    std::size_t first = 0;
    if (cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), copies.size(), &attr, &first,
                             1, s.get()) == cudaSuccess) {
      detail::note_copy(total);
      return;
    }
    // Refused: the copies go one by one below, which names a bad copy with the error of its
    // own call. (Each copy is idempotent, so one the driver may have enqueued before refusing
    // the rest is harmless to repeat.)
    (void)cudaGetLastError();
    batch_refused = true;
  }
#endif
  for (const copy_span& c : copies) {
    check("batched copy", cudaMemcpyAsync(c.dst, c.src, c.bytes, cudaMemcpyDefault, s.get()),
          "cudaMemcpyAsync");
  }
  if (batch_refused) {
    // Every copy was accepted alone: batched copies are what this driver refuses.
    detail::batch_copies_unsupported().store(true, std::memory_order_relaxed);
  }
  detail::note_copy(total);
}

//! Merges the runs of adjacent copies in `copies` (sources and destinations both contiguous,
//! as with slots of an `arena_pair`) and enqueues the runs on `s` with `copy_batch` (one
//! driver call for all of them where the driver allows it). On return `copies` holds the
//! merged runs (sorted by source), e.g. to launch a kernel over them. Returns the number of
//! runs (transfers). Buffers not from an arena still work: each is a run of its own.
//! @throws cuda_error ("batched copy")
inline std::size_t copy_merged(stream_ref s, std::vector<copy_span>& copies) {
  ::cuawait::cuda::detail::coalesce_copies(copies);
  copy_batch(s, copies);
  return copies.size();
}

//! Batched submission of jobs of type `Job` (copied or moved into the batcher while in
//! flight and handed back by `co_await submit(job)`).
//!
//! Lifetime: destroy the batcher only after every coroutine that submitted to it has
//! resumed, and before the runtime (the device context) it was made in; the destructor
//! submits what is pending and waits for batches in flight. Never destroy it from a
//! coroutine it resumed inline (one that awaited from a plain thread) before that
//! coroutine next suspends.
template <class Job>
class batcher {
  class backend;

public:
  //! Enqueues the GPU work of one batch on `s`, without waiting. Runs on the thread that
  //! submits the batch (see the file's comment), one call at a time.
  using enqueue_fn = std::function<void(std::span<Job* const> jobs, stream_ref s)>;

  //! A batcher on the current device with `streams` streams used in turn (so one batch's
  //! device-to-host copies overlap the next one's host-to-device copies).
  //! @throws cuda_error creating streams; std::invalid_argument for bad options or 0 streams.
  explicit batcher(enqueue_fn enqueue, batch_options options = {}, std::size_t streams = 4)
      : m_backend(std::move(enqueue), streams),
        m_engine(m_backend, with_environment(options), m_backend.driver(options)) {}
  batcher(const batcher&) = delete;
  batcher& operator=(const batcher&) = delete;

  //! `co_await submit(job)`: queues `job`, suspends, resumes once its batch finished on
  //! the GPU, and yields the job back.
  //! @throws cuda_error (from `co_await`) naming "batch" when the batch's enqueue function
  //! threw or its work failed; every job of that batch gets the error.
  //! Cancellation: `token`, else the awaiting coroutine's. A stop request while the job
  //! waits for its batch withdraws it (never submitted) and throws `operation_cancelled` at
  //! once; after submission the job resumes when its batch finishes (the enqueue function
  //! handed its buffers to the GPU).
  [[nodiscard]] ::cuawait::cuda::detail::batch_awaiter<backend> submit(Job job,
                                                                       std::stop_token token = {}) {
    return ::cuawait::cuda::detail::batch_awaiter<backend>(m_engine, std::move(job),
                                                           std::move(token));
  }

  //! Submits what is pending now, without waiting for company.
  void flush() { m_engine.flush(); }

  //! Batches formed, jobs, and the latency batching added.
  [[nodiscard]] batch_stats stats() const { return m_engine.stats(); }

  //! True when a thread of the batcher's own drives it; false when the threads polling
  //! the device's completion reactor do (see `batch_options::engine_thread`).
  [[nodiscard]] bool has_engine_thread() const noexcept { return !m_engine.polled(); }

private:
  //! `options` with `CUAWAIT_BATCH_IDLE=1` (or `0`) applied.
  static batch_options with_environment(batch_options options) noexcept {
    if (const char* v = std::getenv("CUAWAIT_BATCH_IDLE"); v != nullptr && *v != '\0') {
      options.submit_when_idle = *v != '0';
    }
    return options;
  }

  class backend {
  public:
    using job_type = Job;
    //! A submitted batch: an event behind its work (or none: then the stream is queried),
    //! and the error to give its jobs once that work has finished.
    struct ticket {
      cudaEvent_t event = nullptr;
      stream_ref stream;
      std::exception_ptr error;
    };

    backend(enqueue_fn enqueue, std::size_t streams) : m_enqueue(std::move(enqueue)) {
      if (streams == 0) {
        throw std::invalid_argument("cuawait::cuda::batcher needs at least one stream");
      }
      if (!m_enqueue) {
        throw std::invalid_argument("cuawait::cuda::batcher needs an enqueue function");
      }
      check("batcher", cudaGetDevice(&m_device), "cudaGetDevice");
      m_context = current_context_or_null();
      m_streams.reserve(streams);
      for (std::size_t i = 0; i < streams; ++i) {
        m_streams.emplace_back();
      }
    }

    //! The reactor that drives the engine: the made-in context's when no thread of its own
    //! is asked for; nullptr (a thread) otherwise, or when there is no context.
    [[nodiscard]] completion_reactor* driver(const batch_options& o) const noexcept {
      bool thread = o.engine_thread;
      if (const char* v = std::getenv("CUAWAIT_BATCH_THREAD"); v != nullptr && *v != '\0') {
        thread = *v != '0';
      }
      return m_context != nullptr && !thread ? &m_context->reactor().reactor() : nullptr;
    }

    //! The engine thread gets the device, and the device context of the thread that made
    //! the batcher (a coroutine resumed there may await GPU work again).
    void thread_init() {
      check_noexcept("batcher", cudaSetDevice(m_device), "cudaSetDevice");
      if (m_context != nullptr) {
        ::cuawait::cuda::detail::set_thread_context(m_context);
      }
    }

    // A failure never blocks this thread (coroutines resume on it): part of the batch may
    // be enqueued, so the ticket carries the error and the jobs' owners resume with it only
    // once that part has finished (they reuse their buffers then).
    ticket submit(std::span<Job* const> jobs) {
      ticket t{nullptr, m_streams[m_next++ % m_streams.size()], nullptr};
      // A pool worker may serve several devices: the batcher's is current while it submits.
      int current = m_device;
      (void)cudaGetDevice(&current);
      if (current != m_device) {
        (void)cudaSetDevice(m_device);
      }
      try {
        m_enqueue(jobs, t.stream);
      } catch (...) {
        t.error = std::current_exception();
      }
      record(t);
      if (current != m_device) {
        (void)cudaSetDevice(current);
      }
      return t;
    }

    void record(ticket& t) {
      try {
        t.event = m_events.acquire();
      } catch (...) { // no event: done() queries the stream instead
        return;
      }
      const cudaError_t rec = cudaEventRecord(t.event, t.stream.get());
      if (rec != cudaSuccess) {
        m_events.release(t.event);
        t.event = nullptr; // done() queries the stream instead
        if (!t.error) {
          try {
            check("batch", rec, "cudaEventRecord");
          } catch (...) {
            t.error = std::current_exception();
          }
        }
      }
    }

    bool done(ticket& t) {
      const cudaError_t q =
          t.event != nullptr ? cudaEventQuery(t.event) : cudaStreamQuery(t.stream.get());
      if (q == cudaErrorNotReady) {
        (void)cudaGetLastError();
        return false;
      }
      const char* api = t.event != nullptr ? "cudaEventQuery" : "cudaStreamQuery";
      if (t.event != nullptr) {
        m_events.release(t.event);
        t.event = nullptr;
      }
      if (t.error) {
        std::rethrow_exception(t.error);
      }
      check("batch", q, api);
      return true;
    }

  private:
    enqueue_fn m_enqueue;
    device_context* m_context = nullptr;
    int m_device = 0;
    std::vector<stream> m_streams;
    std::size_t m_next = 0;
    event_pool m_events;
  };

  backend m_backend;                                       // before the engine: outlives its thread
  ::cuawait::cuda::detail::batch_engine<backend> m_engine; // last: its thread uses the above
};

} // namespace cuawait::cuda
