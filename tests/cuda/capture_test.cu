// SPDX-License-Identifier: Apache-2.0
// Capture regions: captured graphs against direct execution (every element), the coroutine
// form (also across a thread hop), errors inside a region (named, stream usable after),
// and the graph cache (hits, misses, updates, re-instantiation with a reason).

#include "common/gpu.hpp"

#include <cuawait/cuda/capture.hpp>
#include <cuawait/cuda/graph_cache.hpp>
#include <cuawait/cuda/stream.hpp>
#include <cuawait/sync_wait.hpp>
#include <cuawait/task.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <coroutine>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace cu = cuawait::cuda;
using cuawait::task;

__global__ void affine(const float* in, float* out, int n, float a, float b) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    out[i] = fmaf(in[i], a, b);
  }
}

constexpr int n = 65'537;
constexpr std::size_t bytes = n * sizeof(float);

//! One job's buffers: pinned input and output, device input and output.
struct job_buffers {
  float* h_in = nullptr;
  float* h_out = nullptr;
  float* d_in = nullptr;
  float* d_out = nullptr;
  explicit job_buffers(unsigned seed) {
    CUAWAIT_CUDA_CHECK("test", cudaMallocHost(&h_in, bytes));
    CUAWAIT_CUDA_CHECK("test", cudaMallocHost(&h_out, bytes));
    CUAWAIT_CUDA_CHECK("test", cudaMalloc(&d_in, bytes));
    CUAWAIT_CUDA_CHECK("test", cudaMalloc(&d_out, bytes));
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(-10.0f, 10.0f);
    for (int i = 0; i < n; ++i) {
      h_in[i] = d(rng);
      h_out[i] = std::nanf("");
    }
  }
  ~job_buffers() {
    (void)cudaFreeHost(h_in);
    (void)cudaFreeHost(h_out);
    (void)cudaFree(d_in);
    (void)cudaFree(d_out);
  }
  job_buffers(const job_buffers&) = delete;
  job_buffers& operator=(const job_buffers&) = delete;

  void enqueue(cu::stream_ref s, float a, float b) const {
    CUAWAIT_CUDA_CHECK("test", cudaMemcpyAsync(d_in, h_in, bytes, cudaMemcpyDefault, s.get()));
    affine<<<32, 256, 0, s.get()>>>(d_in, d_out, n, a, b);
    CUAWAIT_CUDA_CHECK("test", cudaMemcpyAsync(h_out, d_out, bytes, cudaMemcpyDefault, s.get()));
  }
  void expect(float a, float b) const {
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(h_out[i], std::fmaf(h_in[i], a, b)) << "element " << i;
    }
  }
};

TEST(Capture, RecordsInsteadOfRunningAndReplaysLikeDirectExecution) {
  CUAWAIT_REQUIRE_GPU();
  cu::stream s;
  job_buffers graph_job(1), direct_job(1);
  cu::graph g = cu::capture(s, [&](cu::stream_ref cs) { graph_job.enqueue(cs, 2.0f, 3.0f); });
  s.sync();
  EXPECT_TRUE(std::isnan(graph_job.h_out[0])) << "work inside the region ran";
  EXPECT_EQ(g.node_count(), 3u);
  cu::graph_exec exec = g.instantiate();
  exec.launch(s);
  direct_job.enqueue(s, 2.0f, 3.0f);
  s.sync();
  graph_job.expect(2.0f, 3.0f);
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(graph_job.h_out[i], direct_job.h_out[i]);
  }
}

TEST(Capture, CoroutineRegionMaySuspendAndChangeThreads) {
  CUAWAIT_REQUIRE_GPU();
  cu::stream s;
  job_buffers job(2);
  // Resumes the region's coroutine on a new thread, in the middle of the region.
  struct hop_thread {
    std::jthread* t;
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h) {
      *t = std::jthread([h] { cuawait::detail::resume(h); });
    }
    void await_resume() const noexcept {}
  };
  std::jthread other;
  const auto begin_thread = std::this_thread::get_id();
  std::thread::id end_thread;
  cu::graph g = cuawait::sync_wait(cu::capture(s, [&](cu::stream_ref cs) -> task<void> {
    CUAWAIT_CUDA_CHECK("test",
                       cudaMemcpyAsync(job.d_in, job.h_in, bytes, cudaMemcpyDefault, cs.get()));
    co_await hop_thread{&other};
    end_thread = std::this_thread::get_id();
    affine<<<32, 256, 0, cs.get()>>>(job.d_in, job.d_out, n, -1.0f, 0.5f);
    CUAWAIT_CUDA_CHECK("test",
                       cudaMemcpyAsync(job.h_out, job.d_out, bytes, cudaMemcpyDefault, cs.get()));
  }));
  other.join();
  EXPECT_NE(begin_thread, end_thread);
  EXPECT_EQ(g.node_count(), 3u);
  cu::graph_exec exec = g.instantiate();
  exec.launch(s);
  s.sync();
  job.expect(-1.0f, 0.5f);
}

TEST(Capture, AwaitingAnOperationInsideARegionFailsAndNamesIt) {
  CUAWAIT_REQUIRE_GPU();
  cu::stream s;
  job_buffers job(3);
  try {
    (void)cuawait::sync_wait(cu::capture(
        s, [&](cu::stream_ref cs) -> task<void> { co_await cs.copy(job.d_in, job.h_in, n); }));
    ADD_FAILURE() << "awaiting inside a capture region did not fail";
  } catch (const cu::cuda_error& e) {
    EXPECT_NE(std::string(e.what()).find("capture region"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("copy"), std::string::npos) << e.what();
  }
  job.enqueue(s, 1.0f, 1.0f); // the stream is usable again
  s.sync();
  job.expect(1.0f, 1.0f);
}

TEST(Capture, TheGuardThrowsInsideARegionOnlyAndLeavesTheCaptureIntact) {
  CUAWAIT_REQUIRE_GPU();
  cu::stream s;
  EXPECT_NO_THROW(cuawait::cuda::detail::throw_if_capturing(s.get(), "copy"));
  job_buffers job(4);
  cu::capture_region region(s);
  job.enqueue(s, 2.0f, 2.0f);
  try {
    cuawait::cuda::detail::throw_if_capturing(s.get(), "kernel launch");
    ADD_FAILURE() << "no error inside a region";
  } catch (const cu::cuda_error& e) {
    EXPECT_EQ(e.code(), cudaErrorStreamCaptureUnsupported);
    EXPECT_NE(e.operation().find("co_await kernel launch inside a graph capture region"),
              std::string::npos)
        << e.what();
  }
  cu::graph g = region.end();
  EXPECT_EQ(g.node_count(), 3u);
  cu::graph_exec exec = g.instantiate();
  exec.launch(s);
  s.sync();
  job.expect(2.0f, 2.0f);
}

TEST(Capture, ASynchronizingCallIsNamedAndTheStreamStaysUsable) {
  CUAWAIT_REQUIRE_GPU();
  cu::stream s;
  job_buffers job(5);
  try {
    (void)cu::capture(s, [&](cu::stream_ref cs) {
      job.enqueue(cs, 1.0f, 0.0f);
      cs.sync(); // not allowed while capturing
    });
    ADD_FAILURE() << "a stream sync inside a region was accepted";
  } catch (const cu::cuda_error& e) {
    EXPECT_EQ(e.operation(), "stream sync") << e.what();
  }
  EXPECT_FALSE(cuawait::cuda::detail::stream_is_capturing(s.get()));
  job.enqueue(s, 4.0f, -1.0f);
  s.sync();
  job.expect(4.0f, -1.0f);
}

TEST(Capture, AnInvalidatedCaptureFailsAtTheEndNamingTheRegion) {
  CUAWAIT_REQUIRE_GPU();
  cu::stream s;
  job_buffers job(6);
  cu::capture_region region(s);
  job.enqueue(s, 1.0f, 0.0f);
  (void)cudaStreamQuery(s.get()); // invalidates the capture; its error is ignored here
  (void)cudaGetLastError();
  try {
    (void)region.end();
    ADD_FAILURE() << "an invalidated capture ended cleanly";
  } catch (const cu::cuda_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("graph capture end"), std::string::npos) << what;
    EXPECT_NE(what.find("capture_test.cu"), std::string::npos) << what;
  }
  EXPECT_FALSE(region.active());
  job.enqueue(s, 3.0f, 0.0f);
  s.sync();
  job.expect(3.0f, 0.0f);
}

TEST(Capture, TheLegacyStreamCannotBeCaptured) {
  CUAWAIT_REQUIRE_GPU();
  try {
    cu::capture_region region(cu::stream_ref(cudaStream_t{}));
    ADD_FAILURE() << "captured the legacy default stream";
  } catch (const cu::cuda_error& e) {
    EXPECT_EQ(e.operation(), "graph capture begin");
  }
}

TEST(Capture, AnAbandonedRegionLeavesTheStreamUsable) {
  CUAWAIT_REQUIRE_GPU();
  cu::stream s;
  job_buffers job(7);
  {
    cu::capture_region region(s);
    job.enqueue(s, 9.0f, 9.0f);
  } // discarded
  EXPECT_TRUE(std::isnan(job.h_out[0]));
  job.enqueue(s, 0.5f, 0.5f);
  s.sync();
  job.expect(0.5f, 0.5f);
}

// --- graph cache ------------------------------------------------------------------------

TEST(GraphCacheGpu, ReplaysTheSameShapeUpdatingAddressesAndArguments) {
  CUAWAIT_REQUIRE_GPU();
  cu::stream s;
  cu::graph_cache cache;
  std::vector<std::unique_ptr<job_buffers>> jobs;
  for (unsigned i = 0; i < 5; ++i) {
    jobs.push_back(std::make_unique<job_buffers>(10 + i));
  }
  std::vector<cuawait::graph_cache_outcome> outcomes;
  for (unsigned i = 0; i < jobs.size(); ++i) {
    const float a = 1.0f + static_cast<float>(i);
    outcomes.push_back(cache.launch(
        s, "job", [&](cu::stream_ref cs) { jobs[i]->enqueue(cs, a, -static_cast<float>(i)); }));
  }
  s.sync();
  for (unsigned i = 0; i < jobs.size(); ++i) {
    jobs[i]->expect(1.0f + static_cast<float>(i), -static_cast<float>(i));
  }
  EXPECT_EQ(outcomes[0], cuawait::graph_cache_outcome::instantiated);
  for (unsigned i = 1; i < jobs.size(); ++i) {
    EXPECT_EQ(outcomes[i], cuawait::graph_cache_outcome::updated);
  }
  const auto st = cache.stats();
  EXPECT_EQ(st.misses, 1u);
  EXPECT_EQ(st.hits, 4u);
  EXPECT_EQ(st.updates, 4u);
  EXPECT_EQ(st.reinstantiations, 0u);
}

TEST(GraphCacheGpu, AChangedTopologyReinstantiatesWithAReason) {
  CUAWAIT_REQUIRE_GPU();
  cu::stream s;
  cu::graph_cache cache;
  job_buffers a(20), b(21);
  EXPECT_EQ(cache.launch(s, "k", [&](cu::stream_ref cs) { a.enqueue(cs, 2.0f, 0.0f); }),
            cuawait::graph_cache_outcome::instantiated);
  // Same key, one more kernel: a different topology.
  EXPECT_EQ(cache.launch(s, "k",
                         [&](cu::stream_ref cs) {
                           b.enqueue(cs, 1.0f, 1.0f);
                           affine<<<8, 256, 0, cs.get()>>>(b.d_in, b.d_in, n, 1.0f, 0.0f);
                         }),
            cuawait::graph_cache_outcome::reinstantiated);
  s.sync();
  a.expect(2.0f, 0.0f);
  b.expect(1.0f, 1.0f);
  EXPECT_NE(cache.last_reinstantiation_reason().find("\"k\""), std::string::npos);
  EXPECT_EQ(cache.stats().reinstantiations, 1u);
}

TEST(GraphCacheGpu, CallSitesAreKeysAndFingerprintsSkipUpdates) {
  CUAWAIT_REQUIRE_GPU();
  cu::stream s;
  cu::graph_cache cache;
  job_buffers a(30);
  for (int i = 0; i < 3; ++i) {
    cache.launch(s, [&](cu::stream_ref cs) { a.enqueue(cs, 1.0f, 2.0f); }); // one call site
  }
  cu::graph g = cu::capture(s, [&](cu::stream_ref cs) { a.enqueue(cs, 1.0f, 2.0f); });
  EXPECT_EQ(cache.launch(s, "fp", g, 42), cuawait::graph_cache_outcome::instantiated);
  EXPECT_EQ(cache.launch(s, "fp", g, 42), cuawait::graph_cache_outcome::reused);
  s.sync();
  a.expect(1.0f, 2.0f);
  const auto st = cache.stats();
  EXPECT_EQ(st.misses, 2u);
  EXPECT_EQ(st.updates, 2u);
  EXPECT_EQ(st.reused, 1u);
  EXPECT_EQ(st.size, 2u);
}

} // namespace
