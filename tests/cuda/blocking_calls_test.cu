// SPDX-License-Identifier: Apache-2.0
// No call that blocks the calling thread (cudaFree, cudaFreeHost, cudaStreamSynchronize,
// cudaDeviceSynchronize, cudaEventSynchronize) runs on a runtime pool worker during a
// pipeline run that creates and drops every kind of buffer the library frees, trims the
// pinned pool and overflows its cache. Counted by an LD_PRELOAD shim over the shared CUDA
// runtime (tests/cuda/shim): the test runs itself again under the shim when the shim is not
// loaded yet.

#include "common/gpu.hpp"

#include <cuawait/cuda.hpp>
#include <cuawait/runtime.hpp>
#include <cuawait/task.hpp>

#include <gtest/gtest.h>

#include <dlfcn.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <string>
#include <vector>

extern char** environ;

namespace {

namespace ca = cuawait;
namespace cu = cuawait::cuda;
using ca::task;

constexpr int call_count = 5;
constexpr std::array<const char*, call_count> call_names = {
    "cudaFree", "cudaFreeHost", "cudaStreamSynchronize", "cudaDeviceSynchronize",
    "cudaEventSynchronize"};
using counts_fn = void (*)(unsigned long*, unsigned long*);

__global__ void scale(float* p, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    p[i] *= 2.0F;
  }
}

//! One job: every buffer kind the library frees, made and dropped on a pool worker.
task<void> job(cu::stream_pool& streams, cu::pinned_pool& small_cache, int i) {
  auto s = co_await streams.acquire();
  constexpr int n = 4096;
  {
    cu::pinned_buffer<float> in(n, s, small_cache); // returned fenced: freed past the limit
    cu::device_buffer<float> d(n, s);
    for (int k = 0; k < n; ++k) {
      in.data()[k] = static_cast<float>(k + i);
    }
    s.copy(d.data(), in.data(), n);
    s.launch(scale, dim3(n / 256), dim3(256), d.data(), n);
    co_await s.copy(in.data(), d.data(), n);
  }
  {
    cu::pinned_buffer<float> plain(n, small_cache); // returned unfenced: freed at once
  }
  {
    cu::mapped_buffer<int> flag(16); // cudaFreeHost when dropped
    cu::arena_pair arenas(4096, 2);  // cudaFree + cudaFreeHost when dropped
    auto slot = arenas.try_acquire();
    s.copy(slot->device().data(), slot->host().data(), 256);
    co_await s;
  }
  (void)small_cache.trim();
  (void)cu::pinned_pool::current().trim();
}

//! The pipeline, with counts taken from the shim.
void run_pipeline_under_shim(counts_fn counts) {
  {
    cu::pinned_pool small_cache(cu::pinned_pool_options{.max_cached_bytes = 0});
    {
      ca::runtime rt(ca::runtime_options{.threads = 4});
      cu::stream_pool streams(4);
      for (int i = 0; i < 64; ++i) {
        rt.spawn(job(streams, small_cache, i));
      }
      rt.join_spawned();
    }
  }
  std::array<unsigned long, call_count> workers{};
  std::array<unsigned long, call_count> elsewhere{};
  counts(workers.data(), elsewhere.data());
  for (int c = 0; c < call_count; ++c) {
    EXPECT_EQ(workers[c], 0UL) << call_names[c] << " ran on a pool worker";
  }
  // The shim saw the frees (on the release thread): it is really interposed.
  EXPECT_GT(elsewhere[1], 0UL) << "the shim counted no cudaFreeHost at all: not interposed "
                                  "(is the CUDA runtime linked statically?)";
  EXPECT_GT(elsewhere[0], 0UL) << "the shim counted no cudaFree at all";
}

TEST(BlockingCalls, NoneRunsOnAPoolWorkerDuringAPipeline) {
  CUAWAIT_REQUIRE_GPU();
  if (const auto counts =
          reinterpret_cast<counts_fn>(dlsym(RTLD_DEFAULT, "cuawait_blocking_shim_counts"))) {
    run_pipeline_under_shim(counts);
    return;
  }
  ASSERT_EQ(std::getenv("CUAWAIT_BLOCKING_SHIM_CHILD"), nullptr)
      << "running under the shim, yet its counters are not visible";
  // Run this test again in a child process with the shim preloaded.
  std::string preload = std::string("LD_PRELOAD=") + CUAWAIT_BLOCKING_SHIM;
  std::vector<std::string> env_strings = {preload, "CUAWAIT_BLOCKING_SHIM_CHILD=1"};
  std::vector<char*> env;
  for (std::string& e : env_strings) {
    env.push_back(e.data());
  }
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::string(*e).rfind("LD_PRELOAD=", 0) != 0) {
      env.push_back(*e);
    }
  }
  env.push_back(nullptr);
  std::string exe = "/proc/self/exe";
  std::string filter = "--gtest_filter=BlockingCalls.NoneRunsOnAPoolWorkerDuringAPipeline";
  std::array<char*, 3> argv = {exe.data(), filter.data(), nullptr};
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), env.data()), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the child under the shim crashed";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the run under the shim failed (its output is above)";
}

} // namespace
