// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The options and counters of the CUDA layer's pinned pool, graph and region caches and
//! batchers: plain types, CUDA-free, so that the doctor (`doctor.hpp`) reads them without
//! the CUDA layer. The engines that fill them are in `cuda/detail/`.

#include <array>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace cuawait {

//! How a batcher forms batches.
struct batch_options {
  //! A batch is submitted as soon as it holds this many jobs (>= 1).
  std::size_t max_batch = 32;
  //! The longest a job waits for company before its (partial) batch is submitted.
  std::chrono::nanoseconds max_wait = std::chrono::microseconds(5);
  //! Batches submitted and not finished at most; more wait (back-pressure) (>= 1).
  std::size_t max_in_flight = 8;
  //! Who submits batches and watches them. On (the default): a thread of the batcher's
  //! own. Off: no thread; the threads that poll the device's completion reactor do it (the
  //! runtime's idle workers and `run` loops), and a coroutine whose job fills a batch
  //! submits it itself. A batcher made where no device context is current always gets its
  //! thread. The environment variable `CUAWAIT_BATCH_THREAD=0` (or `1`) overrides this.
  bool engine_thread = true;
  //! A partial batch goes at once when none of this batcher's batches is on the GPU,
  //! instead of waiting `max_wait` for company: the GPU would sit idle meanwhile, and the
  //! jobs that come while it runs form the next batch. Under load (a batch always in
  //! flight) nothing changes. Off: a partial batch always waits `max_wait` (batches as
  //! large as the arrival rate allows, at the cost of latency when the GPU is idle). The
  //! environment variable `CUAWAIT_BATCH_IDLE=0` (or `1`) overrides this.
  bool submit_when_idle = true;
};

//! What a batcher did. Waits are from a job's arrival to its batch's submission: the
//! latency batching added. Part of a wait may be back-pressure: time the batch was ready
//! (full, or its oldest job had waited `max_wait`) while `max_in_flight` batches were still
//! on the GPU. That part is counted separately, because it is the GPU being busy, not
//! batching: a job pays it with or without a batcher.
struct batch_stats {
  std::uint64_t jobs = 0;           //!< jobs submitted
  std::uint64_t batches = 0;        //!< submissions
  std::uint64_t full_batches = 0;   //!< submitted because they reached `max_batch`
  std::uint64_t timed_batches = 0;  //!< submitted because the oldest job waited `max_wait`
  std::uint64_t forced_batches = 0; //!< submitted by `flush()` or shutdown
  std::uint64_t idle_batches = 0;   //!< submitted early: none in flight (`submit_when_idle`)
  std::uint64_t lone_jobs = 0;      //!< batches of a single job
  std::uint64_t failed_batches = 0; //!< batches whose submission or work failed
  std::size_t largest_batch = 0;
  std::uint64_t wait_ns_total = 0; //!< sum over jobs of the added latency
  std::uint64_t wait_ns_max = 0;
  std::uint64_t lone_wait_ns_total = 0; //!< sum over lone jobs of the added latency
  std::uint64_t lone_wait_ns_max = 0;
  std::uint64_t backpressure_ns_total = 0;      //!< part of `wait_ns_total` spent waiting for room
  std::uint64_t lone_backpressure_ns_total = 0; //!< part of `lone_wait_ns_total` likewise
  //! Largest wait of a lone job minus its back-pressure: what batching itself cost it.
  std::uint64_t lone_batching_ns_max = 0;
  //! Batches resolved, and the sum of their times from submission to being found finished
  //! (the GPU's time for them, queueing behind earlier batches included).
  std::uint64_t resolved_batches = 0;
  std::uint64_t flight_ns_total = 0;
  //! Every job's batching delay (its wait minus back-pressure), in log-linear buckets: four
  //! per power of two of nanoseconds (bucket `4 * floor(log2 ns) + next two bits`; 0 to 3
  //! ns in buckets 0 to 3, 4 to 7 unused). See `batching_quantile_us`. (The reactor's
  //! resume-latency histogram has one bucket per power of two: too coarse for a p99 goal.)
  std::array<std::uint64_t, 256> batching_hist{};

  //! The bucket of `batching_hist` that `ns` falls in.
  [[nodiscard]] static constexpr std::size_t batching_bucket(std::uint64_t ns) noexcept {
    if (ns < 4) {
      return static_cast<std::size_t>(ns);
    }
    const auto log2 = static_cast<std::size_t>(std::bit_width(ns)) - 1;
    return 4 * log2 + static_cast<std::size_t>((ns >> (log2 - 2)) & 3);
  }
  //! The largest value in bucket `b`, in nanoseconds.
  [[nodiscard]] static constexpr std::uint64_t batching_bucket_top(std::size_t b) noexcept {
    if (b < 8) {
      return b < 4 ? b : 3; // 4..7 hold nothing
    }
    const std::size_t log2 = b / 4;
    const std::uint64_t low = (std::uint64_t{4} | (b & 3)) << (log2 - 2);
    return low + (std::uint64_t{1} << (log2 - 2)) - 1;
  }
  //! The batching delay that a fraction `q` (0..1) of the jobs did not exceed, in
  //! microseconds, rounded up to its bucket's top (at most 25 % above the true value).
  [[nodiscard]] double batching_quantile_us(double q) const noexcept {
    std::uint64_t total = 0;
    for (const std::uint64_t n : batching_hist) {
      total += n;
    }
    if (total == 0) {
      return 0.0;
    }
    const double want = q * static_cast<double>(total);
    std::uint64_t seen = 0;
    for (std::size_t b = 0; b < batching_hist.size(); ++b) {
      seen += batching_hist[b];
      if (seen != 0 && static_cast<double>(seen) >= want) {
        return static_cast<double>(batching_bucket_top(b)) / 1e3;
      }
    }
    return static_cast<double>(batching_bucket_top(batching_hist.size() - 1)) / 1e3;
  }
  //! Mean time of a batch from submission to being found finished, in microseconds.
  [[nodiscard]] double mean_flight_us() const noexcept {
    return resolved_batches == 0
               ? 0.0
               : static_cast<double>(flight_ns_total) / 1e3 / static_cast<double>(resolved_batches);
  }

  //! Mean jobs per submission.
  [[nodiscard]] double mean_batch() const noexcept {
    return batches == 0 ? 0.0 : static_cast<double>(jobs) / static_cast<double>(batches);
  }
  //! Mean latency added by batching, in microseconds.
  [[nodiscard]] double mean_wait_us() const noexcept {
    return jobs == 0 ? 0.0 : static_cast<double>(wait_ns_total) / 1e3 / static_cast<double>(jobs);
  }
  //! Mean latency added to a job that went alone, in microseconds.
  [[nodiscard]] double mean_lone_wait_us() const noexcept {
    return lone_jobs == 0
               ? 0.0
               : static_cast<double>(lone_wait_ns_total) / 1e3 / static_cast<double>(lone_jobs);
  }
  //! Of `mean_lone_wait_us()`, the part spent waiting for room (`max_in_flight`).
  [[nodiscard]] double mean_lone_backpressure_us() const noexcept {
    return lone_jobs == 0 ? 0.0
                          : static_cast<double>(lone_backpressure_ns_total) / 1e3 /
                                static_cast<double>(lone_jobs);
  }
  //! What batching itself cost a lone job, in microseconds: its wait for company (at most
  //! `max_wait`) plus the engine's reaction time; back-pressure excluded.
  [[nodiscard]] double mean_lone_batching_us() const noexcept {
    return mean_lone_wait_us() - mean_lone_backpressure_us();
  }
};

//! What one graph cache lookup did.
enum class graph_cache_outcome : std::uint8_t {
  instantiated,   //!< a miss: the key was new (or evicted), the graph was instantiated
  reused,         //!< a hit with the same parameter fingerprint: launched as cached
  updated,        //!< a hit: parameters were updated in place (no instantiation)
  reinstantiated, //!< a hit whose update was refused (shape changed): instantiated again
  replicated,     //!< a hit whose cached executables were all in flight: one more was
                  //!< instantiated so that replays run concurrently (region caches only)
};

//! Counters of a graph cache. `hits = reused + updates + reinstantiations + replicas`
//! (`replicas` is always 0 for a `graph_cache`). The fraction of hits replayed without
//! instantiating is `in_place_fraction()`.
struct graph_cache_stats {
  std::uint64_t hits = 0;             //!< lookups that found the key
  std::uint64_t misses = 0;           //!< lookups that had to instantiate a new key
  std::uint64_t reused = 0;           //!< hits launched without any update
  std::uint64_t updates = 0;          //!< hits updated in place
  std::uint64_t reinstantiations = 0; //!< hits whose update was refused
  std::uint64_t evictions = 0;        //!< entries dropped to respect the capacity
  std::size_t size = 0;               //!< entries held now
  //! Region caches: hits that instantiated one more executable for a shape, because every
  //! cached one was in flight (concurrent replays of one shape) or because the one it took
  //! had been dropped after a failure.
  std::uint64_t replicas = 0;
  //! Region caches: re-instantiations (counted in `reinstantiations`) caused by CUDA
  //! refusing a node update, as opposed to a shape change.
  std::uint64_t update_failures = 0;
  //! Region caches: node parameters set in place (kernel arguments, copy and memset
  //! addresses); a replay whose parameters did not change sets none.
  std::uint64_t node_updates = 0;
  //! Region caches: replays that went through stream capture (regions that called
  //! `enqueue` or take a `stream_ref`), updated as a whole graph.
  std::uint64_t captures = 0;

  //! `(reused + updates) / hits`: the hits replayed without instantiating anything; 1 when
  //! there were no hits.
  [[nodiscard]] double in_place_fraction() const noexcept {
    return hits == 0 ? 1.0 : static_cast<double>(reused + updates) / static_cast<double>(hits);
  }
};

//! Bounds of a region cache (one per device context: `device_context_options::regions`).
struct region_cache_options {
  //! Region shapes kept in all (least recently used ones are dropped). >= 1.
  std::size_t capacity = 256;
  //! Shapes kept per key (a call site whose shape varies keeps its most recent ones). >= 1.
  std::size_t shapes_per_key = 8;
  //! Executables per shape, for concurrent replays: a replay takes a cached executable that
  //! is not in flight, else instantiates one more, up to this many; beyond, replays share
  //! one (CUDA then runs them one after the other): raise it to the number of replays of
  //! one shape you keep in flight. >= 1.
  std::size_t replicas = 64;
};

//! A snapshot of a size-class pool's counters (the pinned host memory pool's). `bytes_held` =
//! `bytes_in_use` + `bytes_cached`.
struct size_class_pool_stats {
  std::size_t bytes_held = 0;          //!< obtained from the backend and not given back to it
  std::size_t bytes_in_use = 0;        //!< handed out and not yet returned (rounded to classes)
  std::size_t bytes_cached = 0;        //!< returned, kept for reuse (ready or fenced)
  std::size_t bytes_fenced = 0;        //!< part of bytes_cached still waiting for a fence
  std::size_t backend_allocations = 0; //!< calls to the backend's allocate
  std::size_t reuses = 0;              //!< requests served from the cache
  //! Requests the cache could not serve: each called the backend's allocate (for the
  //! pinned pool, `cudaHostAlloc`) in the request path. `reserve` is not counted.
  std::size_t misses = 0;
};

} // namespace cuawait
