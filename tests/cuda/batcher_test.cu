// SPDX-License-Identifier: Apache-2.0
// Batched submission on the GPU: jobs in adjacent slots of one pinned and one device
// allocation, copied in merged transfers and processed per merged run; every element of
// every job checked against the CPU; each coroutine gets its own job back; errors.

#include "common/detached.hpp"
#include "common/gpu.hpp"

#include <cuawait/cuda/batcher.hpp>
#include <cuawait/cuda/runtime.hpp>
#include <cuawait/task.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <coroutine>
#include <exception>
#include <latch>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

namespace cu = cuawait::cuda;
using namespace std::chrono_literals;

__global__ void affine_inplace(float* p, std::size_t n, float a, float b) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    p[i] = fmaf(p[i], a, b);
  }
}

constexpr std::size_t floats_per_job = 4096 + 64;
constexpr std::size_t job_bytes = floats_per_job * sizeof(float);

//! Slots of one pinned and one device allocation, side by side (what an arena gives).
struct slots {
  float* host = nullptr;
  float* dev = nullptr;
  std::size_t count;
  explicit slots(std::size_t n) : count(n) {
    CUAWAIT_CUDA_CHECK("test", cudaMallocHost(&host, n * job_bytes));
    CUAWAIT_CUDA_CHECK("test", cudaMalloc(&dev, n * job_bytes));
  }
  ~slots() {
    (void)cudaFreeHost(host);
    (void)cudaFree(dev);
  }
  float* h(std::size_t i) const { return host + i * floats_per_job; }
  float* d(std::size_t i) const { return dev + i * floats_per_job; }
};

struct job {
  int id = -1;
  float* host = nullptr;
  float* dev = nullptr;
};

//! The batch shape: merged copies in, one kernel per merged run, merged copies out.
struct shape {
  std::atomic<std::size_t> transfers{0};
  std::atomic<std::size_t> batches{0};
  bool throw_in_enqueue = false;

  void operator()(std::span<job* const> jobs, cu::stream_ref s) {
    if (throw_in_enqueue) {
      throw std::runtime_error("enqueue refused");
    }
    std::vector<cuawait::copy_span> in, out;
    for (job* j : jobs) {
      in.push_back({j->dev, j->host, job_bytes});
      out.push_back({j->host, j->dev, job_bytes});
    }
    transfers += cu::copy_merged(s, in);
    for (const cuawait::copy_span& run : in) {
      affine_inplace<<<16, 256, 0, s.get()>>>(static_cast<float*>(run.dst),
                                              run.bytes / sizeof(float), 1.25f, -0.5f);
    }
    transfers += cu::copy_merged(s, out);
    ++batches;
  }
};

using cuawait::test::detached;

detached run_job(cu::batcher<job>& b, job j, std::vector<int>& returned_ids,
                 std::atomic<int>& failures, std::latch& done) {
  try {
    const job back = co_await b.submit(j);
    returned_ids[static_cast<std::size_t>(j.id)] = back.id;
  } catch (const cu::cuda_error&) {
    ++failures;
  } catch (const std::runtime_error&) {
    ++failures;
  }
  done.count_down();
}

std::vector<float> fill(const slots& sl, std::size_t jobs) {
  std::mt19937 rng(99);
  std::uniform_real_distribution<float> d(-50.0f, 50.0f);
  std::vector<float> expected(jobs * floats_per_job);
  for (std::size_t i = 0; i < expected.size(); ++i) {
    sl.host[i] = d(rng);
    expected[i] = std::fmaf(sl.host[i], 1.25f, -0.5f);
  }
  return expected;
}

TEST(BatcherGpu, BatchesOfAdjacentJobsMatchTheCpuEverywhere) {
  CUAWAIT_REQUIRE_GPU();
  constexpr std::size_t jobs = 64;
  slots sl(jobs);
  const std::vector<float> expected = fill(sl, jobs);
  shape sh;
  std::vector<int> returned(jobs, -1);
  std::atomic<int> failures{0};
  std::latch done(jobs);
  {
    cu::batcher<job> b(
        std::ref(sh),
        cuawait::batch_options{.max_batch = 16, .max_wait = 1h, .submit_when_idle = false});
    for (std::size_t i = 0; i < jobs; ++i) {
      run_job(b, job{static_cast<int>(i), sl.h(i), sl.d(i)}, returned, failures, done);
    }
    done.wait();
    const auto st = b.stats();
    EXPECT_EQ(st.batches, 4u);
    EXPECT_EQ(st.full_batches, 4u);
    EXPECT_EQ(st.jobs, jobs);
  }
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(sh.batches.load(), 4u);
  // Jobs 16k..16k+15 are adjacent: one transfer in, one out per batch.
  EXPECT_EQ(sh.transfers.load(), 8u);
  for (std::size_t i = 0; i < jobs; ++i) {
    EXPECT_EQ(returned[i], static_cast<int>(i));
  }
  for (std::size_t i = 0; i < expected.size(); ++i) {
    ASSERT_EQ(sl.host[i], expected[i]) << "float " << i << " of job " << i / floats_per_job;
  }
}

TEST(BatcherGpu, ScatteredJobsStillWorkWithUnmergedCopies) {
  CUAWAIT_REQUIRE_GPU();
  constexpr std::size_t jobs = 12;
  slots sl(2 * jobs);
  const std::vector<float> expected = fill(sl, 2 * jobs);
  shape sh;
  std::vector<int> returned(2 * jobs, -1);
  std::atomic<int> failures{0};
  std::latch done(jobs);
  {
    cu::batcher<job> b(std::ref(sh), cuawait::batch_options{.max_batch = 4, .max_wait = 50us});
    for (std::size_t i = 0; i < jobs; ++i) {
      const std::size_t slot = 2 * i; // every other slot: nothing is adjacent
      run_job(b, job{static_cast<int>(slot), sl.h(slot), sl.d(slot)}, returned, failures, done);
    }
    done.wait();
  }
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(sh.transfers.load(), 2 * jobs);
  for (std::size_t i = 0; i < jobs; ++i) {
    const std::size_t slot = 2 * i;
    for (std::size_t k = 0; k < floats_per_job; ++k) {
      ASSERT_EQ(sl.h(slot)[k], expected[slot * floats_per_job + k]) << "job " << slot;
    }
  }
}

TEST(BatcherGpu, ALoneJobIsSubmittedAfterMaxWait) {
  CUAWAIT_REQUIRE_GPU();
  slots sl(1);
  const std::vector<float> expected = fill(sl, 1);
  shape sh;
  std::vector<int> returned(1, -1);
  std::atomic<int> failures{0};
  std::latch done(1);
  cu::batcher<job> b(
      std::ref(sh),
      cuawait::batch_options{.max_batch = 32, .max_wait = 5us, .submit_when_idle = false});
  run_job(b, job{0, sl.h(0), sl.d(0)}, returned, failures, done);
  done.wait();
  const auto st = b.stats();
  EXPECT_EQ(st.lone_jobs, 1u);
  EXPECT_EQ(st.timed_batches, 1u);
  EXPECT_GE(st.lone_wait_ns_max, 5000u);
  for (std::size_t k = 0; k < floats_per_job; ++k) {
    ASSERT_EQ(sl.host[k], expected[k]);
  }
}

TEST(BatcherGpu, AnEnqueueErrorFailsEveryJobOfTheBatch) {
  CUAWAIT_REQUIRE_GPU();
  slots sl(3);
  shape sh;
  sh.throw_in_enqueue = true;
  std::vector<int> returned(3, -1);
  std::atomic<int> failures{0};
  std::latch done(3);
  cu::batcher<job> b(std::ref(sh), cuawait::batch_options{
                                       .max_batch = 3, .max_wait = 1h, .submit_when_idle = false});
  for (int i = 0; i < 3; ++i) {
    run_job(b, job{i, sl.h(i), sl.d(i)}, returned, failures, done);
  }
  done.wait();
  EXPECT_EQ(failures.load(), 3);
  EXPECT_EQ(b.stats().failed_batches, 1u);
}

cuawait::task<void> pool_job(cuawait::runtime& rt, cu::batcher<job>& b, job j,
                             std::vector<int>& returned_ids, std::atomic<int>& on_pool) {
  const job back = co_await b.submit(j);
  returned_ids[static_cast<std::size_t>(j.id)] = back.id;
  if (rt.pool().on_worker_thread()) {
    ++on_pool;
  }
}

// Without an engine thread: the runtime's workers submit and watch the batches.
TEST(BatcherGpu, DrivenByTheRuntimesWorkersWithoutAThreadOfItsOwn) {
  CUAWAIT_REQUIRE_GPU();
  constexpr std::size_t jobs = 200;
  slots sl(jobs);
  const std::vector<float> expected = fill(sl, jobs);
  shape sh;
  std::vector<int> returned(jobs, -1);
  std::atomic<int> on_pool{0};
  {
    cuawait::runtime rt(cuawait::runtime_options{.threads = 4});
    cu::batcher<job> b(std::ref(sh), cuawait::batch_options{.max_batch = 16,
                                                            .max_wait = 20us,
                                                            .max_in_flight = 4,
                                                            .engine_thread = false});
    for (std::size_t i = 0; i < jobs; ++i) {
      rt.spawn(pool_job(rt, b, job{static_cast<int>(i), sl.h(i), sl.d(i)}, returned, on_pool));
    }
    rt.join_spawned();
    const auto st = b.stats();
    EXPECT_EQ(st.jobs, jobs);
    EXPECT_EQ(st.failed_batches, 0u);
    EXPECT_EQ(sh.batches.load(), st.batches);
  }
  EXPECT_EQ(on_pool.load(), static_cast<int>(jobs)); // each resumed on the pool
  for (std::size_t i = 0; i < jobs; ++i) {
    EXPECT_EQ(returned[i], static_cast<int>(i));
  }
  for (std::size_t i = 0; i < expected.size(); ++i) {
    ASSERT_EQ(sl.host[i], expected[i]) << "float " << i << " of job " << i / floats_per_job;
  }
}

//! Copies slots 0, 2, 5 and 7 (no two adjacent, sizes differing) to the device and back
//! into slots 8 and up with `copy_batch` on `s`, through `run` (which enqueues and waits),
//! and checks every float landed where it belongs.
template <class Run>
void expect_scattered_round_trip(Run run) {
  slots sl(16);
  (void)fill(sl, 8); // random floats in the host slots
  const std::size_t picked[] = {0, 2, 5, 7};
  const std::size_t floats[] = {floats_per_job, 100, floats_per_job - 1, 1};
  std::vector<cuawait::copy_span> in, out;
  for (std::size_t i = 0; i < 4; ++i) {
    in.push_back({sl.d(picked[i]), sl.h(picked[i]), floats[i] * sizeof(float)});
    out.push_back({sl.h(8 + i), sl.d(picked[i]), floats[i] * sizeof(float)});
  }
  run(in, out);
  for (std::size_t i = 0; i < 4; ++i) {
    for (std::size_t k = 0; k < floats[i]; ++k) {
      ASSERT_EQ(sl.h(8 + i)[k], sl.h(picked[i])[k]) << "copy " << i << " float " << k;
    }
  }
}

TEST(BatcherGpu, CopyBatchMovesScatteredCopiesOnACreatedStream) {
  CUAWAIT_REQUIRE_GPU();
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  expect_scattered_round_trip([&](auto& in, auto& out) {
    cu::copy_batch(s, in);
    cu::copy_batch(s, out); // stream-ordered after the first batch
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  });
  ASSERT_EQ(cudaStreamDestroy(s), cudaSuccess);
}

TEST(BatcherGpu, CopyBatchFallsBackOnTheLegacyStreamAndInACapture) {
  CUAWAIT_REQUIRE_GPU();
  expect_scattered_round_trip([&](auto& in, auto& out) {
    cu::copy_batch(cudaStreamLegacy, in); // batched copies are not tried on this stream
    cu::copy_batch(cudaStreamLegacy, out);
    ASSERT_EQ(cudaStreamSynchronize(cudaStreamLegacy), cudaSuccess);
  });
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  expect_scattered_round_trip([&](auto& in, auto& out) {
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaSuccess);
    cu::copy_batch(s, in);
    cu::copy_batch(s, out);
    cudaGraph_t g = nullptr;
    ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
    cudaGraphExec_t x = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&x, g, 0), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(x, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    (void)cudaGraphExecDestroy(x);
    (void)cudaGraphDestroy(g);
  });
  ASSERT_EQ(cudaStreamDestroy(s), cudaSuccess);
}

TEST(BatcherGpu, CopyBatchNamesABadCopy) {
  CUAWAIT_REQUIRE_GPU();
  slots sl(2);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  // The second copy has no destination.
  const std::vector<cuawait::copy_span> bad{{sl.d(0), sl.h(0), job_bytes},
                                            {nullptr, sl.h(1), job_bytes}};
  try {
    cu::copy_batch(s, bad);
    ADD_FAILURE() << "a copy to a null destination was accepted";
  } catch (const cu::cuda_error& e) {
    EXPECT_NE(std::string(e.what()).find("batched copy"), std::string::npos) << e.what();
  }
  (void)cudaGetLastError();
  ASSERT_EQ(cudaStreamDestroy(s), cudaSuccess);
}

TEST(BatcherGpu, BadOptionsAreRefused) {
  CUAWAIT_REQUIRE_GPU();
  shape sh;
  EXPECT_THROW(cu::batcher<job>(std::ref(sh), {}, 0), std::invalid_argument);
  EXPECT_THROW(cu::batcher<job>(std::ref(sh), cuawait::batch_options{.max_batch = 0}),
               std::invalid_argument);
}

} // namespace
