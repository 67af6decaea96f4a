// SPDX-License-Identifier: Apache-2.0
// The batched GPU decode's CPU side (decode_batcher.hpp) against a fake decoder: how
// batches form, that a lane is never reused before its work finished, and that a batch's
// failure becomes the failing file's alone.

#include "decode_batcher.hpp"

#include <cuawait/async_scope.hpp>
#include <cuawait/idle_source.hpp>
#include <cuawait/sync_wait.hpp>
#include <cuawait/thread_pool.hpp>
#include <cuawait/timer.hpp>
#include <cuawait/when_all.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ci = cuawait::images;
using namespace std::chrono_literals;

namespace {

struct fake_job : ci::decode_job {
  int id = 0;
  bool bad = false;    // refused by the decoder, in a batch (as a whole) or alone
  bool poison = false; // accepted, but the lane's work then fails
};

// Completes each lane's work on the pool, later, as a GPU would.
class fake_decoder final : public ci::batch_decoder {
public:
  fake_decoder(cuawait::thread_pool& pool, std::size_t lanes)
      : m_pool(pool), m_busy(lanes), m_fail(lanes, false) {}

  [[nodiscard]] std::size_t lanes() const noexcept override { return m_busy.size(); }

  bool enqueue_batch(std::size_t lane, std::span<ci::decode_job* const> jobs) override {
    start(lane);
    std::vector<int> keys;
    bool refused = false;
    for (ci::decode_job* j : jobs) {
      keys.push_back(j->key);
      refused = refused || static_cast<fake_job*>(j)->bad;
      m_fail[lane] = m_fail[lane] || static_cast<fake_job*>(j)->poison;
    }
    const std::lock_guard lock(m_mutex);
    batches.push_back(std::move(keys));
    return !refused;
  }

  bool enqueue_one(std::size_t lane, ci::decode_job& job) override {
    start(lane);
    const auto& j = static_cast<fake_job&>(job);
    m_fail[lane] = j.poison;
    const std::lock_guard lock(m_mutex);
    ++singles;
    return !j.bad;
  }

  cuawait::task<void> finish(std::size_t lane) override {
    co_await m_pool.schedule();
    const bool fail = std::exchange(m_fail[lane], false);
    m_busy[lane].store(false);
    if (fail) {
      throw std::runtime_error("the lane's work failed");
    }
  }

  void decoded(std::size_t /*lane*/, std::span<ci::decode_job* const> jobs) override {
    const std::lock_guard lock(m_mutex);
    for (ci::decode_job* j : jobs) {
      decoded_ids.push_back(static_cast<fake_job*>(j)->id);
    }
  }

  std::mutex m_mutex;
  std::vector<std::vector<int>> batches; // the keys of each batch call
  std::vector<int> decoded_ids;
  int singles = 0;
  std::atomic<int> overlaps{0}; // a lane enqueued on before its work finished

private:
  void start(std::size_t lane) {
    if (m_busy[lane].exchange(true)) {
      ++overlaps;
    }
  }

  cuawait::thread_pool& m_pool;
  std::deque<std::atomic<bool>> m_busy;
  std::vector<char> m_fail; // one lane's own: touched by that lane's batch only
};

struct outcome {
  std::vector<ci::decode_result> results;
  std::vector<std::string> errors;
  ci::decode_batch_stats stats;
};

// Every job announced first, then submitted from its own coroutine on the pool.
outcome run_jobs(std::vector<fake_job>& jobs, ci::decode_batch_options options,
                 std::size_t lanes = 2, std::size_t threads = 4) {
  cuawait::thread_pool pool(threads);
  fake_decoder decoder(pool, lanes);
  outcome out;
  out.results.assign(jobs.size(), ci::decode_result::refused);
  out.errors.resize(jobs.size());
  {
    ci::decode_batcher batcher(decoder, pool, options);
    auto one = [&](std::size_t i, ci::decode_batcher::arrival a) -> cuawait::task<void> {
      co_await pool.schedule();
      try {
        out.results[i] = co_await batcher.submit(std::move(a), jobs[i]);
      } catch (const std::exception& e) {
        out.errors[i] = e.what();
      }
    };
    auto images = [&]() -> cuawait::task<void> {
      std::vector<ci::decode_batcher::arrival> arrivals;
      for (std::size_t i = 0; i < jobs.size(); ++i) {
        arrivals.push_back(batcher.announce());
      }
      cuawait::async_scope scope;
      for (std::size_t i = 0; i < jobs.size(); ++i) {
        scope.spawn(one(i, std::move(arrivals[i])));
      }
      co_await scope.join();
      batcher.close();
    };
    cuawait::sync_wait(cuawait::when_all(batcher.run(), images()));
    out.stats = batcher.stats();
  }
  EXPECT_EQ(decoder.overlaps.load(), 0) << "a lane was reused before its work finished";
  for (const std::vector<int>& keys : decoder.batches) {
    EXPECT_LE(keys.size(), options.max_batch);
    for (int k : keys) {
      EXPECT_EQ(k, keys.front()) << "a batch mixed keys";
    }
  }
  return out;
}

std::vector<fake_job> make_jobs(std::size_t n) {
  std::vector<fake_job> jobs(n);
  for (std::size_t i = 0; i < n; ++i) {
    jobs[i].id = static_cast<int>(i);
  }
  return jobs;
}

} // namespace

// While announced images are on their way, a batch goes only when full; once none is, the
// rest goes at once (a long max_wait never comes into play).
TEST(DecodeBatcher, FullBatchesThenTheRestOnceNoImageIsOnItsWay) {
  std::vector<fake_job> jobs = make_jobs(100);
  const outcome out = run_jobs(jobs, {.max_batch = 8, .max_wait = 1h});
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    EXPECT_EQ(out.results[i], ci::decode_result::decoded) << i;
    EXPECT_EQ(out.errors[i], "") << i;
  }
  EXPECT_EQ(out.stats.jobs, 100U);
  EXPECT_EQ(out.stats.batches, 13U); // 12 full ones and the 4 left
  EXPECT_EQ(out.stats.largest, 8U);
  EXPECT_EQ(out.stats.failed_batches, 0U);
  EXPECT_DOUBLE_EQ(out.stats.mean_batch(), 100.0 / 13.0);
}

TEST(DecodeBatcher, JobsOfDifferentKeysNeverShareABatch) {
  std::vector<fake_job> jobs = make_jobs(200);
  std::mt19937 random(7);
  for (fake_job& j : jobs) {
    j.key = static_cast<int>(random() % 3);
  }
  const outcome out = run_jobs(jobs, {.max_batch = 16, .max_wait = 1h}, 3);
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    EXPECT_EQ(out.results[i], ci::decode_result::decoded) << i;
  }
  EXPECT_EQ(out.stats.jobs, 200U);
}

// A batch the decoder refuses as a whole is decoded again one file at a time: the bad file
// is refused (the program then decodes it on the CPU, which names the problem), the others
// are decoded.
TEST(DecodeBatcher, ARefusedBatchIsRetriedOneByOneAndOnlyTheBadFileIsRefused) {
  std::vector<fake_job> jobs = make_jobs(20);
  jobs[7].bad = true;
  const outcome out = run_jobs(jobs, {.max_batch = 20, .max_wait = 1h});
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    EXPECT_EQ(out.results[i], i == 7 ? ci::decode_result::refused : ci::decode_result::decoded)
        << i;
    EXPECT_EQ(out.errors[i], "") << i;
  }
  EXPECT_EQ(out.stats.batches, 1U);
  EXPECT_EQ(out.stats.failed_batches, 1U);
  EXPECT_EQ(out.stats.refused, 1U);
}

// Work that fails after it was accepted (an error the GPU reports) is the failing file's
// error alone once the batch is retried one by one.
TEST(DecodeBatcher, FailedWorkBecomesTheErrorOfTheFailingFileAlone) {
  std::vector<fake_job> jobs = make_jobs(20);
  jobs[5].poison = true;
  const outcome out = run_jobs(jobs, {.max_batch = 20, .max_wait = 1h});
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    if (i == 5) {
      EXPECT_EQ(out.errors[i], "the lane's work failed");
    } else {
      EXPECT_EQ(out.results[i], ci::decode_result::decoded) << i;
      EXPECT_EQ(out.errors[i], "") << i;
    }
  }
  EXPECT_EQ(out.stats.failed_batches, 1U);
  EXPECT_EQ(out.stats.errors, 1U);
}

// An image announced but never submitted (still on its way) holds a batch back for
// max_wait at most: without the timer this test would hang until its timeout.
//! One job submitted while another is announced and never comes: the batch goes after
//! max_wait (1 ms), decoded, alone.
void expect_a_lone_job_goes_after_max_wait(cuawait::thread_pool& pool,
                                           std::chrono::microseconds max_wait = 1ms) {
  fake_decoder decoder(pool, 2);
  ci::decode_batcher batcher(decoder, pool, {.max_batch = 8, .max_wait = max_wait});
  fake_job job;
  ci::decode_result result = ci::decode_result::refused;
  auto images = [&]() -> cuawait::task<void> {
    ci::decode_batcher::arrival later = batcher.announce(); // never comes
    result = co_await batcher.submit(batcher.announce(), job);
    later.drop();
    batcher.close();
  };
  cuawait::sync_wait(cuawait::when_all(batcher.run(), images()));
  EXPECT_EQ(result, ci::decode_result::decoded);
  EXPECT_EQ(batcher.stats().batches, 1U);
}

TEST(DecodeBatcher, AJobWaitsForCompanyNoLongerThanMaxWait) {
  cuawait::thread_pool pool(2);
  expect_a_lone_job_goes_after_max_wait(pool);
}

// On a pool with a polled timer service (as a runtime's pool has), max_wait is served by it,
// with no timer thread of the batcher's: the resolutions are counted through a wrapper.
TEST(DecodeBatcher, MaxWaitUsesThePoolsPolledTimers) {
  struct counting final : cuawait::idle_source {
    explicit counting(cuawait::timer_service& t) : inner(t) {}
    std::size_t poll_idle() noexcept override {
      const std::size_t n = inner.poll_idle();
      resolved.fetch_add(n);
      return n;
    }
    bool idle_keep_spinning() const noexcept override { return inner.idle_keep_spinning(); }
    bool idle_pending() const noexcept override { return inner.idle_pending(); }
    bool idle_due() const noexcept override { return inner.idle_due(); }
    std::size_t idle_spinners_wanted() const noexcept override {
      return inner.idle_spinners_wanted();
    }
    std::chrono::nanoseconds idle_park_period() const noexcept override {
      return inner.idle_park_period();
    }
    cuawait::timer_service& inner;
    std::atomic<std::size_t> resolved{0};
  };
  cuawait::timer_service timers{cuawait::timer_service::polled};
  counting polled(timers);
  cuawait::thread_pool pool(2);
  timers.set_idle_waker(
      [](void* p) noexcept { static_cast<cuawait::thread_pool*>(p)->wake_parked_poller(); }, &pool);
  pool.set_idle_source(&polled);
  pool.set_timer_service(&timers);
  // A deadline already past when the batcher sleeps is served without a poll (the sleep does
  // not suspend), which a loaded CI machine under ASan made happen once with 1 ms: 50 ms
  // leaves the sleep ahead of its deadline.
  expect_a_lone_job_goes_after_max_wait(pool, 50ms);
  EXPECT_GE(polled.resolved.load(), 1U) << "max_wait did not go through the pool's timers";
  pool.set_idle_source(nullptr);
  timers.set_idle_waker(nullptr, nullptr);
}

// Dropping the last arrival on its way lets the waiting jobs go as one batch.
TEST(DecodeBatcher, ADroppedArrivalLetsTheWaitingBatchGo) {
  cuawait::thread_pool pool(2);
  fake_decoder decoder(pool, 2);
  ci::decode_batcher batcher(decoder, pool, {.max_batch = 8, .max_wait = 1h});
  std::vector<fake_job> jobs = make_jobs(2);
  std::vector<ci::decode_result> results(2, ci::decode_result::refused);
  auto one = [&](std::size_t i, ci::decode_batcher::arrival a) -> cuawait::task<void> {
    co_await pool.schedule();
    results[i] = co_await batcher.submit(std::move(a), jobs[i]);
  };
  auto images = [&]() -> cuawait::task<void> {
    ci::decode_batcher::arrival a0 = batcher.announce();
    ci::decode_batcher::arrival a1 = batcher.announce();
    ci::decode_batcher::arrival cpu = batcher.announce(); // will be decoded on the CPU
    cuawait::async_scope scope;
    scope.spawn(one(0, std::move(a0)));
    scope.spawn(one(1, std::move(a1)));
    cpu.drop();
    co_await scope.join();
    batcher.close();
  };
  cuawait::sync_wait(cuawait::when_all(batcher.run(), images()));
  EXPECT_EQ(results[0], ci::decode_result::decoded);
  EXPECT_EQ(results[1], ci::decode_result::decoded);
  EXPECT_EQ(batcher.stats().batches, 1U);
  EXPECT_EQ(batcher.stats().largest, 2U);
}

TEST(DecodeBatcher, AnIdleBatcherEndsOnClose) {
  cuawait::thread_pool pool(1);
  fake_decoder decoder(pool, 2);
  ci::decode_batcher batcher(decoder, pool);
  auto closer = [&]() -> cuawait::task<void> {
    co_await pool.schedule();
    batcher.close();
  };
  cuawait::sync_wait(cuawait::when_all(batcher.run(), closer()));
  EXPECT_EQ(batcher.stats().batches, 0U);
}

// Many jobs, mixed keys, bad and failing files scattered, short waits, three lanes: each
// job gets its own outcome, exactly once.
TEST(DecodeBatcher, StressEveryJobGetsItsOwnOutcome) {
  std::vector<fake_job> jobs = make_jobs(3000);
  std::mt19937 random(11);
  for (fake_job& j : jobs) {
    j.key = static_cast<int>(random() % 2);
    const unsigned r = random() % 100;
    j.bad = r == 0;
    j.poison = r == 1;
  }
  const outcome out = run_jobs(jobs, {.max_batch = 16, .max_wait = 200us}, 3, 4);
  std::uint64_t decoded = 0;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    if (jobs[i].poison) {
      EXPECT_EQ(out.errors[i], "the lane's work failed") << i;
    } else if (jobs[i].bad) {
      EXPECT_EQ(out.results[i], ci::decode_result::refused) << i;
      EXPECT_EQ(out.errors[i], "") << i;
    } else {
      EXPECT_EQ(out.results[i], ci::decode_result::decoded) << i;
      EXPECT_EQ(out.errors[i], "") << i;
      ++decoded;
    }
  }
  EXPECT_EQ(out.stats.jobs, jobs.size());
  EXPECT_EQ(out.stats.refused + out.stats.errors + decoded, jobs.size());
}

TEST(DecodeBatcher, SettingsComeFromTheEnvironment) {
  ::unsetenv("CUAWAIT_IMAGES_NVJPEG_BATCH");
  ::unsetenv("CUAWAIT_IMAGES_NVJPEG_LANES");
  ::unsetenv("CUAWAIT_IMAGES_NVJPEG_WAIT_US");
  // Batches of up to 32 on the hardware backend; one image per call on the default backend
  // (its Huffman decoding runs on the calling thread).
  EXPECT_EQ(ci::decode_batch_settings_from_env(true).options.max_batch, 32U);
  EXPECT_EQ(ci::decode_batch_settings_from_env(false).options.max_batch, 1U);
  EXPECT_EQ(ci::decode_batch_settings_from_env(true).lanes, 2U);
  ::setenv("CUAWAIT_IMAGES_NVJPEG_BATCH", "64", 1);
  ::setenv("CUAWAIT_IMAGES_NVJPEG_LANES", "3", 1);
  ::setenv("CUAWAIT_IMAGES_NVJPEG_WAIT_US", "0", 1);
  const ci::decode_batch_settings s = ci::decode_batch_settings_from_env(false);
  EXPECT_EQ(s.options.max_batch, 64U);
  EXPECT_EQ(s.lanes, 3U);
  EXPECT_EQ(s.options.max_wait.count(), 0);
  for (const char* bad : {"0", "-3", "x", "12x", ""}) {
    ::setenv("CUAWAIT_IMAGES_NVJPEG_BATCH", bad, 1);
    EXPECT_EQ(ci::decode_batch_settings_from_env(true).options.max_batch, 32U) << bad;
    EXPECT_EQ(ci::decode_batch_settings_from_env(false).options.max_batch, 1U) << bad;
  }
  ::unsetenv("CUAWAIT_IMAGES_NVJPEG_BATCH");
  ::unsetenv("CUAWAIT_IMAGES_NVJPEG_LANES");
  ::unsetenv("CUAWAIT_IMAGES_NVJPEG_WAIT_US");
}
