// SPDX-License-Identifier: Apache-2.0
#include "decode_batcher.hpp"

#include <cuawait/cancellation.hpp>
#include <cuawait/deadline.hpp>
#include <cuawait/when_all.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <thread>

namespace cuawait::images {

namespace {

using clock = std::chrono::steady_clock;

// The whole number in `name`, or `fallback` when unset or not a number >= `least`.
std::size_t env_count(const char* name, std::size_t fallback, unsigned long long least) {
  const char* const text = std::getenv(name);
  if (text == nullptr || *text == '\0') {
    return fallback;
  }
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0' || v < least || *text == '-' ||
      v > std::numeric_limits<std::uint32_t>::max()) {
    return fallback;
  }
  return static_cast<std::size_t>(v);
}

// The event's wait with the awaiting coroutine's stop token, so that a deadline can end it.
task<void> wait_set(async_event& e) { co_await e.wait(co_await get_stop_token()); }

} // namespace

decode_batch_settings decode_batch_settings_from_env(bool hardware) {
  decode_batch_settings s;
  // Batches of up to 32 on the hardware backend (10,000 photos, H200: 1,358 images/s
  // against 1,068 with one image per call). The default backend decodes its Huffman part on
  // the calling thread, so a batch would put 32 images' CPU work on one worker: one image
  // per call there.
  s.options.max_batch = env_count("CUAWAIT_IMAGES_NVJPEG_BATCH", hardware ? 32 : 1, 1);
  s.lanes = env_count("CUAWAIT_IMAGES_NVJPEG_LANES", 2, 1);
  s.options.max_wait = std::chrono::microseconds(env_count(
      "CUAWAIT_IMAGES_NVJPEG_WAIT_US", static_cast<std::size_t>(s.options.max_wait.count()), 0));
  return s;
}

// Queues the job once its coroutine is suspended, so that a lane may resume it at once.
class decode_batcher::submit_awaiter {
public:
  submit_awaiter(decode_batcher& b, arrival& a, decode_job& job) noexcept
      : m_batcher(b), m_arrival(a), m_job(job) {}
  [[nodiscard]] bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> h) {
    // The coroutine may run (and end) on another thread before this returns: nothing of
    // this awaiter or the job is touched after `queue`.
    m_batcher.queue(m_job, h, m_arrival);
  }
  void await_resume() const noexcept {}

private:
  decode_batcher& m_batcher;
  arrival& m_arrival;
  decode_job& m_job;
};

void decode_batcher::arrival::drop() noexcept {
  if (decode_batcher* const b = std::exchange(m_batcher, nullptr); b != nullptr) {
    b->arrival_dropped();
  }
}

decode_batcher::decode_batcher(batch_decoder& decoder, thread_pool& pool,
                               decode_batch_options options)
    : m_decoder(decoder), m_pool(pool), m_options(options) {
  if (m_options.max_batch == 0 || m_decoder.lanes() == 0) {
    throw std::invalid_argument("decode_batcher: needs max_batch >= 1 and a decoder with lanes");
  }
  for (std::size_t k = 0; k < m_decoder.lanes(); ++k) {
    m_work.emplace_back();
  }
  m_timers = m_pool.timers();
  if (m_timers == nullptr) {
    m_own_timers.emplace();
    m_timers = &*m_own_timers;
  }
}

decode_batcher::~decode_batcher() = default;

decode_batcher::arrival decode_batcher::announce() {
  const std::lock_guard lock(m_mutex);
  ++m_on_the_way;
  return arrival(this);
}

task<decode_result> decode_batcher::submit(arrival a, decode_job& job) {
  {
    const std::lock_guard lock(m_mutex);
    if (m_closed) {
      throw std::logic_error("decode_batcher: submit after close");
    }
  }
  co_await submit_awaiter(*this, a, job);
  // Resumed on the pool by the lane that served the job.
  if (job.m_error) {
    std::rethrow_exception(job.m_error);
  }
  co_return job.m_result;
}

void decode_batcher::queue(decode_job& job, std::coroutine_handle<> waiter, arrival& a) {
  bool wake = false;
  {
    const std::lock_guard lock(m_mutex);
    if (a.m_batcher == this) {
      a.m_batcher = nullptr;
      --m_on_the_way;
    }
    job.m_waiter = waiter;
    job.m_arrived = clock::now();
    job.m_error = nullptr;
    job.m_result = decode_result::refused;
    m_waiting.push_back(&job);
    // The first job starts a lane's clock; a due batch needs a lane now.
    wake = m_waiting.size() == 1 || due_locked(job.m_arrived);
    if (wake) {
      // Counted before the job is visible: a lane may serve it, its image end and the
      // batcher close before the wake-up below is over; lanes do not end meanwhile.
      m_waking.fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (wake) {
    wake_lanes();
    m_waking.fetch_sub(1, std::memory_order_release); // the batcher is not touched after
  }
}

void decode_batcher::arrival_dropped() noexcept {
  bool wake = false;
  {
    const std::lock_guard lock(m_mutex);
    --m_on_the_way;
    wake = m_on_the_way == 0 && !m_waiting.empty();
  }
  if (wake) {
    wake_lanes();
  }
}

void decode_batcher::close() {
  {
    const std::lock_guard lock(m_mutex);
    m_closed = true;
  }
  wake_lanes();
}

void decode_batcher::wake_lanes() noexcept {
  for (async_event& e : m_work) {
    e.set();
  }
}

bool decode_batcher::due_locked(clock::time_point now) const {
  return !m_waiting.empty() &&
         (m_waiting.size() >= m_options.max_batch || m_on_the_way == 0 || m_closed ||
          now - m_waiting.front()->m_arrived >= m_options.max_wait);
}

decode_batcher::take_status decode_batcher::take(std::vector<decode_job*>& batch,
                                                 clock::time_point& due) {
  bool wake = false;
  {
    const std::lock_guard lock(m_mutex);
    const clock::time_point now = clock::now();
    if (m_waiting.empty()) {
      due = clock::time_point::max();
      return m_closed ? take_status::closed : take_status::wait;
    }
    if (!due_locked(now)) {
      due = m_waiting.front()->m_arrived + m_options.max_wait;
      return take_status::wait;
    }
    const int key = m_waiting.front()->key;
    batch.clear();
    for (auto it = m_waiting.begin();
         it != m_waiting.end() && batch.size() < m_options.max_batch;) {
      if ((*it)->key == key) {
        batch.push_back(*it);
        it = m_waiting.erase(it);
      } else {
        ++it;
      }
    }
    ++m_stats.batches;
    m_stats.jobs += batch.size();
    m_stats.largest = std::max<std::uint64_t>(m_stats.largest, batch.size());
    // Another lane may take what is left now (a lane that looked before this one took).
    wake = due_locked(now);
  }
  if (wake) {
    wake_lanes();
  }
  return take_status::batch;
}

task<void> decode_batcher::run() {
  std::vector<task<void>> lanes;
  for (std::size_t k = 0; k < m_decoder.lanes(); ++k) {
    lanes.push_back(lane(k));
  }
  co_await when_all(std::move(lanes));
}

task<void> decode_batcher::lane(std::size_t index) {
  co_await m_pool.schedule();
  std::vector<decode_job*> batch;
  for (;;) {
    // Reset before looking: a submission after the look sets it again, so none is missed.
    m_work[index].reset();
    clock::time_point due{};
    const take_status status = take(batch, due);
    if (status == take_status::closed) {
      // A submitter may still be waking the lanes after its job was served (see queue).
      while (m_waking.load(std::memory_order_acquire) != 0) {
        std::this_thread::yield();
      }
      co_return;
    }
    if (status == take_status::wait) {
      co_await wait_for_work(index, due);
      co_await m_pool.schedule(); // off the submitter's thread, which set the event
      continue;
    }
    co_await decode(index, batch);
  }
}

task<void> decode_batcher::wait_for_work(std::size_t lane, clock::time_point due) {
  if (due == clock::time_point::max()) {
    co_await m_work[lane].wait();
    co_return;
  }
  try {
    co_await with_deadline(wait_set(m_work[lane]), due, *m_timers);
  } catch (const operation_cancelled&) {
    // The oldest job waited max_wait (operation_timed_out): its batch is due.
  }
}

namespace {

// `finish` as a flag: false when the lane's work failed.
task<bool> finished(batch_decoder& d, std::size_t lane) {
  try {
    co_await d.finish(lane);
  } catch (...) {
    co_return false;
  }
  co_return true;
}

} // namespace

task<void> decode_batcher::decode(std::size_t lane, std::vector<decode_job*>& batch) {
  if (batch.size() == 1) {
    co_await decode_alone(lane, *batch.front());
    complete(*batch.front());
    co_return;
  }
  bool enqueued = false;
  try {
    enqueued = m_decoder.enqueue_batch(lane, batch);
  } catch (...) {
    enqueued = false; // refused as a whole: each file gets its own answer below
  }
  // Awaited whatever the enqueue said: what it left on the lane must be done before the
  // files and outputs may go.
  const bool ok = co_await finished(m_decoder, lane) && enqueued;
  if (ok) {
    try {
      m_decoder.decoded(lane, batch);
    } catch (...) { // bookkeeping only (a timeline span): the images are decoded
    }
    for (decode_job* job : batch) {
      job->m_result = decode_result::decoded;
      complete(*job); // `job` may be gone once this returns
    }
    co_return;
  }
  {
    const std::lock_guard lock(m_mutex);
    ++m_stats.failed_batches;
  }
  for (decode_job* job : batch) {
    co_await decode_alone(lane, *job);
    complete(*job);
  }
}

task<void> decode_batcher::decode_alone(std::size_t lane, decode_job& job) {
  bool enqueued = false;
  std::exception_ptr error;
  try {
    enqueued = m_decoder.enqueue_one(lane, job);
  } catch (...) {
    error = std::current_exception();
  }
  try {
    co_await m_decoder.finish(lane);
  } catch (...) {
    if (!error) {
      error = std::current_exception();
    }
  }
  if (!error && enqueued) {
    job.m_result = decode_result::decoded;
    decode_job* const one[] = {&job};
    try {
      m_decoder.decoded(lane, one);
    } catch (...) {
    }
    co_return;
  }
  job.m_error = error;
  job.m_result = decode_result::refused;
  const std::lock_guard lock(m_mutex);
  ++(error ? m_stats.errors : m_stats.refused);
}

void decode_batcher::complete(decode_job& job) {
  const std::coroutine_handle<> h = job.m_waiter; // the job may end once it is posted
  m_pool.post(h, priority::normal);
}

decode_batch_stats decode_batcher::stats() const {
  const std::lock_guard lock(m_mutex);
  return m_stats;
}

std::string decode_batcher::summary() const {
  const decode_batch_stats s = stats();
  char text[160];
  std::snprintf(text, sizeof text, "%llu images in %llu batches (mean %.1f, largest %llu)",
                static_cast<unsigned long long>(s.jobs), static_cast<unsigned long long>(s.batches),
                s.mean_batch(), static_cast<unsigned long long>(s.largest));
  std::string out = text;
  if (s.failed_batches > 0) {
    out += ", " + std::to_string(s.failed_batches) + " batches retried one image at a time";
  }
  return out;
}

} // namespace cuawait::images
