// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `decode_batcher`: gathers the images that want a GPU decode into batches, so that one
//! decoder call serves tens of images (nvJPEG's hardware backend is built for that), and
//! hands each image its own outcome. CUDA-free: the GPU side is a `batch_decoder`, nvJPEG
//! in the program (cuda/jpeg_lanes.hpp) and a fake in the tests.
//!
//! Each image's coroutine, once it may submit (past the memory gate), takes an `arrival`
//! (`announce()`), reads and plans its file, then either `co_await submit(arrival, job)`
//! or drops the arrival (decoded on the CPU instead). The batcher's lanes, coroutines
//! started by `run()` on the pool, each take a batch when one is due, have the decoder
//! enqueue it on that lane, await it through the library (the lane's coroutine suspends,
//! no thread waits), and resume every image of the batch on the pool.
//!
//! A batch is due when `max_batch` jobs wait, or when no announced image is still on its
//! way (every arrival submitted or dropped: waiting longer gains nothing), or when the
//! oldest job waited `max_wait`, or after `close()`. It takes the oldest job and the next
//! waiting jobs of the same key (the decoder's output format) in arrival order.
//!
//! Errors are the file's, not the batch's: when the decoder refuses a batch as a whole, or
//! its work fails, the batch's images are decoded again one by one on that lane, so that
//! the file at fault is refused (or gets the error) and the others are decoded.

#include <cuawait/async_event.hpp>
#include <cuawait/task.hpp>
#include <cuawait/thread_pool.hpp>
#include <cuawait/timer.hpp>

#include <atomic>
#include <chrono>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace cuawait::images {

//! What became of a submitted job.
enum class decode_result : std::uint8_t {
  decoded, //!< the decoder wrote the image
  refused  //!< the decoder would not take the file: decode it some other way
};

//! The part of a decode request the batcher uses; the program's request derives from it
//! and adds the file, the plan and the output. Lives in the submitting coroutine's frame.
struct decode_job {
  //! Jobs share a batch only with jobs of the same key (the output format).
  int key = 0;

private:
  friend class decode_batcher;
  std::coroutine_handle<> m_waiter;
  std::chrono::steady_clock::time_point m_arrived;
  decode_result m_result = decode_result::refused;
  std::exception_ptr m_error;
};

//! The GPU side of batched decoding: `lanes()` independent decode states (nvJPEG's state,
//! a stream, ...). The batcher uses a lane for one batch at a time: `enqueue_*`, then
//! `finish`, and only then the next `enqueue_*` on that lane.
class batch_decoder {
public:
  virtual ~batch_decoder() = default;
  //! Lanes (>= 1): batches that may be in flight at once.
  [[nodiscard]] virtual std::size_t lanes() const noexcept = 0;
  //! Enqueues the decode of `jobs` (one key, at least two) as one call on `lane`. False
  //! when the decoder refused the batch as a whole. May throw (then: refused as a whole).
  [[nodiscard]] virtual bool enqueue_batch(std::size_t lane, std::span<decode_job* const> jobs) = 0;
  //! Enqueues the decode of `job` alone on `lane`. False when the decoder refused it.
  //! What it throws is the job's error.
  [[nodiscard]] virtual bool enqueue_one(std::size_t lane, decode_job& job) = 0;
  //! Completes when everything enqueued on `lane` has finished; throws when that work
  //! failed. Awaited after every `enqueue_*`, whatever it returned or threw.
  [[nodiscard]] virtual task<void> finish(std::size_t lane) = 0;
  //! After `finish`: `jobs` were decoded on `lane` by one call (e.g. to record its span).
  virtual void decoded(std::size_t /*lane*/, std::span<decode_job* const> /*jobs*/) {}
};

//! How batches form.
struct decode_batch_options {
  std::size_t max_batch = 32;               //!< jobs per decoder call at most (>= 1)
  std::chrono::microseconds max_wait{2000}; //!< the longest a job waits for company
};

//! The batched GPU decode's settings.
struct decode_batch_settings {
  decode_batch_options options;
  std::size_t lanes = 2; //!< batches in flight at once (one decodes while the next gathers)
};

//! The settings from the environment: `CUAWAIT_IMAGES_NVJPEG_BATCH` (jobs per batch at
//! most; default 1, each image through the per-image path: batching, e.g. 32, is opt-in
//! and used only with the hardware backend), `CUAWAIT_IMAGES_NVJPEG_LANES` (default 2) and
//! `CUAWAIT_IMAGES_NVJPEG_WAIT_US` (max_wait, default 2000). A value that is not a whole
//! number of at least 1 (0 for the wait) is ignored. `max_batch` 1 means no batching.
[[nodiscard]] decode_batch_settings decode_batch_settings_from_env(bool hardware);

//! What the batcher did.
struct decode_batch_stats {
  std::uint64_t batches = 0;        //!< decoder calls for several jobs, plus lone jobs
  std::uint64_t jobs = 0;           //!< jobs submitted
  std::uint64_t largest = 0;        //!< jobs of the largest batch
  std::uint64_t failed_batches = 0; //!< batches refused or failed, retried one by one
  std::uint64_t refused = 0;        //!< jobs refused in the end
  std::uint64_t errors = 0;         //!< jobs that got an error
  //! Mean jobs per batch (0 without batches).
  [[nodiscard]] double mean_batch() const noexcept {
    return batches == 0 ? 0.0 : static_cast<double>(jobs) / static_cast<double>(batches);
  }
};

//! The batcher. Thread-safe. Lifetime: `run()` must have completed (after `close()`)
//! before the batcher is destroyed; the decoder and the pool must outlive it.
class decode_batcher {
public:
  //! One announced image: counted as on its way until it is submitted or dropped.
  //! Move-only; dropping it (destruction) says the image will not submit.
  class arrival {
  public:
    arrival() = default;
    arrival(arrival&& o) noexcept : m_batcher(std::exchange(o.m_batcher, nullptr)) {}
    arrival& operator=(arrival&& o) noexcept {
      if (this != &o) {
        drop();
        m_batcher = std::exchange(o.m_batcher, nullptr);
      }
      return *this;
    }
    arrival(const arrival&) = delete;
    arrival& operator=(const arrival&) = delete;
    ~arrival() { drop(); }
    //! The image will not submit (done by the destructor too).
    void drop() noexcept;
    //! True while it counts.
    [[nodiscard]] bool counted() const noexcept { return m_batcher != nullptr; }

  private:
    friend class decode_batcher;
    explicit arrival(decode_batcher* b) noexcept : m_batcher(b) {}
    decode_batcher* m_batcher = nullptr;
  };

  //! A batcher over `decoder`, resuming images and running lanes on `pool`.
  //! @throws std::invalid_argument for a zero `max_batch` or a decoder without lanes.
  decode_batcher(batch_decoder& decoder, thread_pool& pool, decode_batch_options options = {});
  decode_batcher(const decode_batcher&) = delete;
  decode_batcher& operator=(const decode_batcher&) = delete;
  ~decode_batcher();

  //! An image that may submit (announce before reading the file: a batch waits for
  //! announced images only while some are on their way).
  [[nodiscard]] arrival announce();

  //! `co_await submit(std::move(a), job)`: queues `job` (which must stay alive until this
  //! completes), suspends, and resumes on the pool once its batch is done.
  //! @throws the job's error (the decoder's or its work's, for this file alone).
  [[nodiscard]] task<decode_result> submit(arrival a, decode_job& job);

  //! The lanes: completes after `close()` once every submitted job was served. Start it
  //! before or alongside the images (e.g. in a `when_all` with them). Never throws.
  [[nodiscard]] task<void> run();

  //! No more submissions: the lanes serve what waits, then `run()` completes.
  void close();

  //! A snapshot of the counters.
  [[nodiscard]] decode_batch_stats stats() const;

  //! "N images in M batches (mean X, largest Y)" and, when any, the retried batches.
  [[nodiscard]] std::string summary() const;

private:
  class submit_awaiter;
  enum class take_status { batch, wait, closed };

  task<void> lane(std::size_t index);
  task<void> wait_for_work(std::size_t lane, std::chrono::steady_clock::time_point due);
  take_status take(std::vector<decode_job*>& batch, std::chrono::steady_clock::time_point& due);
  [[nodiscard]] bool due_locked(std::chrono::steady_clock::time_point now) const;
  task<void> decode(std::size_t lane, std::vector<decode_job*>& batch);
  task<void> decode_alone(std::size_t lane, decode_job& job);
  void queue(decode_job& job, std::coroutine_handle<> waiter, arrival& a);
  void arrival_dropped() noexcept;
  void complete(decode_job& job);
  void wake_lanes() noexcept;

  batch_decoder& m_decoder;
  thread_pool& m_pool;
  decode_batch_options m_options;
  mutable std::mutex m_mutex; // guards the queue, the counts and the stats
  std::deque<decode_job*> m_waiting;
  std::size_t m_on_the_way = 0; // announced, not yet submitted or dropped
  bool m_closed = false;
  decode_batch_stats m_stats;
  // One per lane, all set when a batch may have become due; a lane resets its own before
  // it looks (one event for all would let a lane's reset swallow a wake-up another lane
  // has not yet waited for).
  std::deque<async_event> m_work;
  std::atomic<int> m_waking{0}; // submitters still in wake_lanes() (see queue)
  // max_wait: the pool's timer service when it has one (a runtime's, polled by its idle
  // workers: no thread), else one of our own, made after the pool and gone before it.
  std::optional<timer_service> m_own_timers;
  timer_service* m_timers = nullptr;
};

} // namespace cuawait::images
