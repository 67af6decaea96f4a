// SPDX-License-Identifier: Apache-2.0
// Cached regions on the GPU: replays give the results of direct submission for kernel,
// copy and memset nodes while pointers, arguments and memset values change; coroutine
// bodies that suspend and change threads; shape changes (re-instantiated, with a reason);
// eviction; a refused node update falling back to instantiation; errors inside a region
// (named, nothing launched, stream and cache usable); captured bodies; concurrent replays
// on a runtime; a batcher whose batches are cached regions.

#include "common/gpu.hpp"

#include <cuawait/cuda/batcher.hpp>
#include <cuawait/cuda/device_context.hpp>
#include <cuawait/cuda/region.hpp>
#include <cuawait/cuda/stream.hpp>
#include <cuawait/runtime.hpp>
#include <cuawait/sync_wait.hpp>
#include <cuawait/task.hpp>
#include <cuawait/thread_pool.hpp>
#include <cuawait/when_all.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace cu = cuawait::cuda;
using cuawait::graph_cache_outcome;
using cuawait::task;

__global__ void accumulate(const float* in, float* out, int n, float a, float b) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    out[i] += fmaf(in[i], a, b);
  }
}
__global__ void add_scalar(float* p, int n, float v) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    p[i] += v;
  }
}

constexpr int n = 40'000;
constexpr std::size_t bytes = n * sizeof(float);

//! The parameters a replay changes: scalars and the memset byte.
struct params {
  float a = 1.0f;
  float b = 0.0f;
  float c = 0.0f;
  int fill = 0;
};

//! One job's buffers: pinned input and output, two device buffers.
struct job_buffers {
  float* h_in = nullptr;
  float* h_out = nullptr;
  float* d_in = nullptr;
  float* d_acc = nullptr;
  explicit job_buffers(unsigned seed) {
    CUAWAIT_CUDA_CHECK("test", cudaMallocHost(&h_in, bytes));
    CUAWAIT_CUDA_CHECK("test", cudaMallocHost(&h_out, bytes));
    CUAWAIT_CUDA_CHECK("test", cudaMalloc(&d_in, bytes));
    CUAWAIT_CUDA_CHECK("test", cudaMalloc(&d_acc, bytes));
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(-10.0f, 10.0f);
    for (int i = 0; i < n; ++i) {
      h_in[i] = d(rng);
    }
    poison();
  }
  ~job_buffers() {
    (void)cudaFreeHost(h_in);
    (void)cudaFreeHost(h_out);
    (void)cudaFree(d_in);
    (void)cudaFree(d_acc);
  }
  job_buffers(const job_buffers&) = delete;
  job_buffers& operator=(const job_buffers&) = delete;

  void poison() const {
    for (int i = 0; i < n; ++i) {
      h_out[i] = std::nanf("");
    }
  }

  //! Every node kind: memset, copy H2D, two kernels, copy D2H. Works on a `stream_ref`
  //! (direct submission) and on a `region_stream` (recorded).
  template <class S>
  void enqueue(const S& s, const params& p) const {
    (void)s.memset(d_acc, p.fill, n);
    (void)s.copy(d_in, h_in, n);
    (void)s.launch(accumulate, dim3(40), dim3(256), d_in, d_acc, n, p.a, p.b);
    (void)s.launch(add_scalar, dim3(40), dim3(256), d_acc, n, p.c);
    (void)s.copy(h_out, d_acc, n);
  }
};

void expect_same(const job_buffers& got, const job_buffers& want) {
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(std::memcmp(&got.h_out[i], &want.h_out[i], sizeof(float)), 0)
        << "element " << i << ": " << got.h_out[i] << " instead of " << want.h_out[i];
  }
}

//! A context of its own per test, so that counters start at zero.
struct fresh_context {
  cu::device_context ctx;
  cu::context_scope scope{ctx};
  explicit fresh_context(cuawait::region_cache_options o = {})
      : ctx(cu::device_context_options{.regions = o}) {}
  cu::region_cache& cache() { return ctx.regions(); }
};

TEST(CachedRegion, ReplaysGiveTheResultsOfDirectSubmissionForEveryNodeKind) {
  CUAWAIT_REQUIRE_GPU();
  fresh_context fc;
  cu::stream s;
  job_buffers direct(7), first(7), second(7); // same inputs; two sets of region buffers
  const params ps[] = {{2.0f, 1.0f, 0.5f, 0},
                       {-1.0f, 3.0f, 0.25f, 0x3f},
                       {0.5f, -2.0f, 4.0f, 0},
                       {0.5f, -2.0f, 4.0f, 0}};
  std::vector<graph_cache_outcome> outcomes;
  for (int i = 0; i < 4; ++i) {
    const job_buffers& job = i % 2 == 0 ? first : second;
    job.poison();
    direct.poison();
    outcomes.push_back(cuawait::sync_wait(
        cu::cached_region(s, "kinds", [&](cu::region_stream rs) { job.enqueue(rs, ps[i]); })));
    direct.enqueue(cu::stream_ref(s), ps[i]);
    s.sync();
    expect_same(job, direct);
  }
  EXPECT_EQ(outcomes[0], graph_cache_outcome::instantiated);
  EXPECT_EQ(outcomes[1], graph_cache_outcome::updated);
  EXPECT_EQ(outcomes[2], graph_cache_outcome::updated);
  EXPECT_EQ(outcomes[3], graph_cache_outcome::updated) << "the buffers changed back";
  // The same buffers and parameters again: launched as cached.
  EXPECT_EQ(cuawait::sync_wait(cu::cached_region(
                s, "kinds", [&](cu::region_stream rs) { second.enqueue(rs, ps[3]); })),
            graph_cache_outcome::reused);
  const auto st = fc.cache().stats();
  EXPECT_EQ(st.misses, 1u);
  EXPECT_EQ(st.updates, 3u);
  EXPECT_EQ(st.reused, 1u);
  EXPECT_EQ(st.reinstantiations, 0u);
  EXPECT_GT(st.node_updates, 0u);
  EXPECT_EQ(fc.cache().executables("kinds"), 1u);
}

TEST(CachedRegion, ACoroutineBodyMaySuspendOnCpuWorkAndChangeThreads) {
  CUAWAIT_REQUIRE_GPU();
  fresh_context fc;
  cuawait::thread_pool pool(1);
  cu::stream s;
  job_buffers job(11), direct(11);
  const params p{3.0f, -1.0f, 2.0f, 0};
  const auto begin = std::this_thread::get_id();
  std::thread::id after;
  for (int round = 0; round < 2; ++round) {
    job.poison();
    (void)cuawait::sync_wait(cu::cached_region(s, "hop", [&](cu::region_stream rs) -> task<void> {
      (void)rs.memset(job.d_acc, p.fill, n);
      (void)rs.copy(job.d_in, job.h_in, n);
      co_await pool.schedule(); // CPU work elsewhere, mid-region
      after = std::this_thread::get_id();
      (void)rs.launch(accumulate, dim3(40), dim3(256), job.d_in, job.d_acc, n, p.a, p.b);
      (void)rs.launch(add_scalar, dim3(40), dim3(256), job.d_acc, n, p.c);
      (void)rs.copy(job.h_out, job.d_acc, n);
    }));
    EXPECT_NE(after, begin);
    direct.enqueue(cu::stream_ref(s), p);
    s.sync();
    expect_same(job, direct);
  }
  EXPECT_EQ(fc.cache().stats().reused, 1u);
}

TEST(CachedRegion, AShapeChangeReinstantiatesAndSaysWhy) {
  CUAWAIT_REQUIRE_GPU();
  fresh_context fc;
  cu::stream s;
  job_buffers job(3), direct(3);
  const params p{1.5f, 0.5f, 1.0f, 0};
  auto region = [&](int extra) {
    return cu::cached_region(s, "shape", [&, extra](cu::region_stream rs) {
      job.enqueue(rs, p);
      for (int k = 0; k < extra; ++k) {
        (void)rs.launch(add_scalar, dim3(40), dim3(256), job.d_acc, n, 1.0f);
        (void)rs.copy(job.h_out, job.d_acc, n);
      }
    });
  };
  EXPECT_EQ(cuawait::sync_wait(region(0)), graph_cache_outcome::instantiated);
  job.poison();
  EXPECT_EQ(cuawait::sync_wait(region(2)), graph_cache_outcome::reinstantiated);
  EXPECT_NE(fc.cache().last_reinstantiation_reason().find("9 operations instead of 5"),
            std::string::npos)
      << fc.cache().last_reinstantiation_reason();
  direct.enqueue(cu::stream_ref(s), p);
  for (int k = 0; k < 2; ++k) {
    (void)cu::stream_ref(s).launch(add_scalar, dim3(40), dim3(256), direct.d_acc, n, 1.0f);
  }
  (void)cu::stream_ref(s).copy(direct.h_out, direct.d_acc, n);
  s.sync();
  expect_same(job, direct);
  // Both shapes stay cached under the key.
  EXPECT_EQ(cuawait::sync_wait(region(0)), graph_cache_outcome::reused);
  EXPECT_EQ(fc.cache().stats().size, 2u);
}

TEST(CachedRegion, TheLeastRecentlyUsedRegionIsEvicted) {
  CUAWAIT_REQUIRE_GPU();
  fresh_context fc(cuawait::region_cache_options{.capacity = 2});
  cu::stream s;
  job_buffers job(5), direct(5);
  const params p{1.0f, 1.0f, 1.0f, 0};
  auto run = [&](const char* key) {
    job.poison();
    return cuawait::sync_wait(
        cu::cached_region(s, key, [&](cu::region_stream rs) { job.enqueue(rs, p); }));
  };
  EXPECT_EQ(run("a"), graph_cache_outcome::instantiated);
  EXPECT_EQ(run("b"), graph_cache_outcome::instantiated);
  EXPECT_EQ(run("c"), graph_cache_outcome::instantiated); // evicts a
  EXPECT_EQ(fc.cache().stats().evictions, 1u);
  EXPECT_EQ(fc.cache().executables("a"), 0u);
  EXPECT_EQ(run("a"), graph_cache_outcome::instantiated);
  EXPECT_EQ(run("c"), graph_cache_outcome::reused);
  direct.enqueue(cu::stream_ref(s), p);
  s.sync();
  expect_same(job, direct);
}

// Which updates CUDA refuses depends on the GPU and the driver (the H200 with CUDA 13
// updates a copy whose source moves from pinned host to device memory in place). The test
// tries sources of other kinds, in turn, until one is refused, and checks the fallback
// then: re-instantiated, with the reason, and the right result. When every candidate is
// updated in place it skips, saying so; the fallback's logic is also covered without a GPU
// (RegionCache.RefusedNodeUpdateFallsBackToInstantiationWithTheReason).
TEST(CachedRegion, ARefusedNodeUpdateFallsBackToInstantiation) {
  CUAWAIT_REQUIRE_GPU();
  struct candidate {
    const char* what;
    float* src;
  };
  job_buffers job(9);
  float* d_other = nullptr;
  float* managed = nullptr;
  float* mapped = nullptr;
  CUAWAIT_CUDA_CHECK("test", cudaMalloc(&d_other, bytes));
  CUAWAIT_CUDA_CHECK("test", cudaMallocManaged(&managed, bytes));
  CUAWAIT_CUDA_CHECK("test", cudaHostAlloc(&mapped, bytes, cudaHostAllocMapped));
  for (float* p : {d_other, managed, mapped}) {
    CUAWAIT_CUDA_CHECK("test", cudaMemcpy(p, job.h_in, bytes, cudaMemcpyDefault));
  }
  const candidate candidates[] = {
      {"device memory", d_other}, {"managed memory", managed}, {"mapped host memory", mapped}};
  std::string tried;
  bool refused = false;
  for (const candidate& c : candidates) {
    fresh_context fc;
    cu::stream s;
    auto run = [&](const float* src) {
      job.poison();
      return cuawait::sync_wait(cu::cached_region(s, "move", [&, src](cu::region_stream rs) {
        (void)rs.copy(job.d_in, src, n);
        (void)rs.copy(job.h_out, job.d_in, n);
      }));
    };
    ASSERT_EQ(run(job.h_in), graph_cache_outcome::instantiated);
    const graph_cache_outcome second = run(c.src);
    const auto st = fc.cache().stats();
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(job.h_out[i], job.h_in[i]) << "element " << i << ", source in " << c.what;
    }
    if (st.update_failures == 0) {
      EXPECT_EQ(second, graph_cache_outcome::updated) << c.what;
      tried += std::string(tried.empty() ? "" : ", ") + c.what;
      continue;
    }
    refused = true;
    EXPECT_EQ(st.update_failures, 1u) << c.what;
    EXPECT_EQ(second, graph_cache_outcome::reinstantiated) << c.what;
    EXPECT_NE(fc.cache().last_reinstantiation_reason().find("refused"), std::string::npos)
        << fc.cache().last_reinstantiation_reason();
    std::printf("CUDA refused a copy whose source moved from pinned host to %s\n", c.what);
    break;
  }
  (void)cudaFree(d_other);
  (void)cudaFree(managed);
  (void)cudaFreeHost(mapped);
  if (!refused) {
    GTEST_SKIP() << "this GPU and driver updated in place every copy whose source moved from "
                    "pinned host memory to: "
                 << tried << "; no refusal to test the fallback with";
  }
}

TEST(CachedRegion, AwaitingGpuWorkInsideARegionFailsNamingItAndLaunchesNothing) {
  CUAWAIT_REQUIRE_GPU();
  fresh_context fc;
  cu::stream s;
  job_buffers job(13), direct(13);
  try {
    (void)cuawait::sync_wait(cu::cached_region(s, "await", [&](cu::region_stream rs) -> task<void> {
      job.enqueue(rs, params{});
      co_await rs.launch(add_scalar, dim3(40), dim3(256), job.d_acc, n, 1.0f);
    }));
    ADD_FAILURE() << "awaiting inside a cached region did not fail";
  } catch (const cu::cuda_error& e) {
    EXPECT_EQ(e.code(), cudaErrorStreamCaptureUnsupported);
    EXPECT_NE(e.operation().find("co_await kernel launch inside a cached region"),
              std::string::npos)
        << e.what();
  }
  s.sync();
  EXPECT_TRUE(std::isnan(job.h_out[0])) << "a failed region launched its work";
  EXPECT_EQ(fc.cache().stats().misses, 0u);
  // The stream and the key are usable.
  const params p{2.0f, 2.0f, 2.0f, 0};
  (void)cuawait::sync_wait(
      cu::cached_region(s, "await", [&](cu::region_stream rs) { job.enqueue(rs, p); }));
  direct.enqueue(cu::stream_ref(s), p);
  s.sync();
  expect_same(job, direct);
}

TEST(CachedRegion, AForbiddenCallInsideARegionIsNamedAndTheStreamStaysUsable) {
  CUAWAIT_REQUIRE_GPU();
  fresh_context fc;
  cu::stream s;
  job_buffers job(17), direct(17);
  try {
    (void)cuawait::sync_wait(cu::cached_region(s, "sync", [&](cu::region_stream rs) {
      job.enqueue(rs, params{});
      (void)rs.enqueue([](cudaStream_t cs) { return cudaStreamSynchronize(cs); });
    }));
    ADD_FAILURE() << "a stream synchronisation inside a cached region was accepted";
  } catch (const cu::cuda_error& e) {
    EXPECT_EQ(e.operation(), "enqueue") << e.what();
  }
  EXPECT_FALSE(cuawait::cuda::detail::stream_is_capturing(s.get()));
  s.sync();
  EXPECT_TRUE(std::isnan(job.h_out[0])) << "a failed region launched its work";
  // Awaiting the captured stream itself is refused too, naming it.
  try {
    (void)cuawait::sync_wait(cu::cached_region(s, "stream", [&](cu::stream_ref cs) -> task<void> {
      job.enqueue(cs, params{});
      co_await cs;
    }));
    ADD_FAILURE() << "awaiting the captured stream did not fail";
  } catch (const cu::cuda_error& e) {
    EXPECT_NE(e.operation().find("co_await stream inside a graph capture region"),
              std::string::npos)
        << e.what();
  }
  const params p{-1.0f, 0.0f, 3.0f, 0};
  (void)cuawait::sync_wait(
      cu::cached_region(s, "sync2", [&](cu::region_stream rs) { job.enqueue(rs, p); }));
  direct.enqueue(cu::stream_ref(s), p);
  s.sync();
  expect_same(job, direct);
}

TEST(CachedRegion, CapturedBodiesAndEnqueueReplayLikeDirectSubmission) {
  CUAWAIT_REQUIRE_GPU();
  fresh_context fc;
  cu::stream s;
  job_buffers job(19), direct(19);
  for (int round = 0; round < 3; ++round) {
    const params p{1.0f + static_cast<float>(round), 0.5f, -1.0f, 0};
    job.poison();
    // A body on a stream_ref: captured every time, updated as a whole graph.
    (void)cuawait::sync_wait(
        cu::cached_region(s, "whole", [&](cu::stream_ref cs) { job.enqueue(cs, p); }));
    direct.enqueue(cu::stream_ref(s), p);
    s.sync();
    expect_same(job, direct);
    // A recorded body with a raw launch in the middle: switches to capture there.
    job.poison();
    (void)cuawait::sync_wait(cu::cached_region(s, "mixed", [&](cu::region_stream rs) {
      (void)rs.memset(job.d_acc, p.fill, n);
      (void)rs.copy(job.d_in, job.h_in, n);
      (void)rs.enqueue([&](cudaStream_t cs) {
        accumulate<<<40, 256, 0, cs>>>(job.d_in, job.d_acc, n, p.a, p.b);
        return cudaGetLastError();
      });
      (void)rs.launch(add_scalar, dim3(40), dim3(256), job.d_acc, n, p.c);
      (void)rs.copy(job.h_out, job.d_acc, n);
    }));
    s.sync();
    expect_same(job, direct);
  }
  const auto st = fc.cache().stats();
  EXPECT_EQ(st.captures, 6u);
  EXPECT_EQ(st.misses, 2u);
  EXPECT_EQ(st.updates, 4u);
}

TEST(CachedRegion, ConcurrentReplaysOnARuntimeEachGetTheirOwnResults) {
  CUAWAIT_REQUIRE_GPU();
  constexpr int pipelines = 6;
  constexpr int rounds = 5;
  cuawait::runtime rt(cuawait::runtime_options{.threads = 3});
  std::vector<std::unique_ptr<job_buffers>> jobs, directs;
  std::vector<cu::stream> streams(pipelines);
  for (int i = 0; i < pipelines; ++i) {
    jobs.push_back(std::make_unique<job_buffers>(100 + i));
    directs.push_back(std::make_unique<job_buffers>(100 + i));
  }
  std::atomic<int> wrong{0};
  for (int i = 0; i < pipelines; ++i) {
    rt.spawn([](job_buffers& job, job_buffers& direct, cu::stream_ref s, int i,
                std::atomic<int>& wrong) -> task<void> {
      for (int r = 0; r < rounds; ++r) {
        const params p{static_cast<float>(i + 1), static_cast<float>(r), 0.25f, 0};
        job.poison();
        (void)co_await cu::cached_region(s, "shared",
                                         [&](cu::region_stream rs) { job.enqueue(rs, p); });
        direct.enqueue(s, p);
        co_await s;
        for (int k = 0; k < n; k += 97) {
          if (std::memcmp(&job.h_out[k], &direct.h_out[k], sizeof(float)) != 0) {
            wrong.fetch_add(1);
            break;
          }
        }
      }
    }(*jobs[i], *directs[i], streams[i], i, wrong));
  }
  rt.join_spawned();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(CachedRegion, ABatchersWorkCanBeACachedRegion) {
  CUAWAIT_REQUIRE_GPU();
  fresh_context fc;
  constexpr int jobs = 24;
  std::vector<std::unique_ptr<job_buffers>> bufs, directs;
  for (int i = 0; i < jobs; ++i) {
    bufs.push_back(std::make_unique<job_buffers>(200 + i));
    directs.push_back(std::make_unique<job_buffers>(200 + i));
  }
  struct work {
    job_buffers* b = nullptr;
    float c = 0;
  };
  cu::region_cache& cache = fc.cache();
  {
    cu::batcher<work> batch(
        [&cache](std::span<work* const> ws, cu::stream_ref s) {
          (void)cache.launch(s, "batch", [&](cu::region_stream rs) {
            for (work* w : ws) {
              w->b->enqueue(rs, params{1.0f, 0.0f, w->c, 0});
            }
          });
        },
        cuawait::batch_options{.max_batch = 4});
    std::vector<task<void>> all;
    for (int i = 0; i < jobs; ++i) {
      all.push_back([](cu::batcher<work>& b, work w) -> task<void> {
        (void)co_await b.submit(w);
      }(batch, work{bufs[i].get(), static_cast<float>(i)}));
    }
    cuawait::sync_wait(cuawait::when_all(std::move(all)));
  }
  cu::stream s;
  for (int i = 0; i < jobs; ++i) {
    directs[i]->enqueue(cu::stream_ref(s), params{1.0f, 0.0f, static_cast<float>(i), 0});
  }
  s.sync();
  for (int i = 0; i < jobs; ++i) {
    expect_same(*bufs[i], *directs[i]);
  }
  const auto st = cache.stats();
  EXPECT_GE(st.hits + st.misses, 6u);
  EXPECT_GE(st.misses, 1u);
}

} // namespace
