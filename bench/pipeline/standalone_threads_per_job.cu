// SPDX-License-Identifier: Apache-2.0
// cuawait-standalone-threads-per-job: the threads_per_job baseline of docs/WORKLOAD.md as a
// program of its own (plain CUDA runtime + std::thread, no cuawait library, no CLI11), to
// check the benchmark's harness: its threads_per_job at the same parameters, run in the
// same call, should be within a few percent of this.
//
//   T threads, each with its own non-blocking stream, pinned host buffer and device buffer;
//   per job: CPU pre, H2D, kernel A, kernel B, D2H, one cudaStreamSynchronize, CPU post.
//
// What it shares with the benchmark, so that only the harness differs: the kernels and
// their launch (kernels.cu, compiled into this target: the same device code, grid
// min(4 * SMs, ceil(n / 256)) of 256 threads), and the CPU steps and result check
// (host_work.hpp / reference.hpp: stamp the job's input, busy-spin cpu_us reading the buffer,
// record the samples). Everything else (setup, threads, timing) is written out here.
//
//   cuawait-standalone-threads-per-job --jobs 20000 --bytes 65536 --iters 20 --cpu-us 5
//       --threads 16 [--repeat R] [--samples K] [--device D]

#include "host_work.hpp"
#include "kernels.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace cuawait::bench;

// A CUDA error ends the program at once (from any thread): a check program must not go on.
#define CHECK(call)                                                                                \
  do {                                                                                             \
    const cudaError_t e_ = (call);                                                                 \
    if (e_ != cudaSuccess) {                                                                       \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));  \
      std::fflush(stderr);                                                                         \
      std::_Exit(1);                                                                               \
    }                                                                                              \
  } while (0)

struct args {
  workload w{20000, 65536, 20, 5};
  int threads = 16;
  int repeat = 1;
  int samples = 16;
  int device = 0;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "cuawait-standalone-threads-per-job: %s\nusage: --jobs N --bytes B (multiple of "
               "4) --iters I --cpu-us U --threads T [--repeat R] [--samples K] [--device D]\n",
               why);
  std::exit(2);
}

args parse(int argc, char** argv) {
  args a;
  for (int i = 1; i < argc; ++i) {
    const std::string opt = argv[i];
    if (i + 1 >= argc) {
      usage(("missing value after " + opt).c_str());
    }
    const char* v = argv[++i];
    try {
      if (opt == "--jobs")
        a.w.jobs = std::stoll(v);
      else if (opt == "--bytes")
        a.w.bytes = std::stoll(v);
      else if (opt == "--iters")
        a.w.iters = std::stoi(v);
      else if (opt == "--cpu-us")
        a.w.cpu_us = std::stod(v);
      else if (opt == "--threads")
        a.threads = std::stoi(v);
      else if (opt == "--repeat")
        a.repeat = std::stoi(v);
      else if (opt == "--samples")
        a.samples = std::stoi(v);
      else if (opt == "--device")
        a.device = std::stoi(v);
      else
        usage(("unknown option " + opt).c_str());
    } catch (const std::exception&) {
      usage(("bad value for " + opt).c_str());
    }
  }
  if (a.w.jobs < 1 || a.w.bytes < 4 || a.w.bytes % 4 != 0 || a.w.iters < 1 || a.w.cpu_us < 0 ||
      a.threads < 1 || a.threads > 1024 || a.repeat < 1 || a.samples < 2) {
    usage("a value is out of range");
  }
  return a;
}

//! One thread's stream and buffers.
struct slot {
  cudaStream_t stream = nullptr;
  float* host = nullptr;
  float* dev = nullptr;
};

//! One timed run of every job on `slots.size()` threads; returns seconds.
double run_once(const args& a, const host_work& work, int grid, const std::vector<slot>& slots) {
  const std::size_t bytes = static_cast<std::size_t>(a.w.bytes);
  const std::size_t n = work.n();
  std::atomic<std::int64_t> next{0};
  std::atomic<bool> go{false};
  auto worker = [&](const slot& s) {
    go.wait(false);
    for (;;) {
      const std::int64_t job = next.fetch_add(1, std::memory_order_relaxed);
      if (job >= a.w.jobs) {
        return;
      }
      work.pre(job, s.host);
      CHECK(cudaMemcpyAsync(s.dev, s.host, bytes, cudaMemcpyHostToDevice, s.stream));
      CHECK(launch_kernel_a(s.dev, s.dev, n, a.w.iters, grid, s.stream));
      CHECK(launch_kernel_b(s.dev, s.dev, n, a.w.iters, grid, s.stream));
      CHECK(cudaMemcpyAsync(s.host, s.dev, bytes, cudaMemcpyDeviceToHost, s.stream));
      CHECK(cudaStreamSynchronize(s.stream));
      work.post(job, s.host);
    }
  };
  std::vector<std::thread> pool;
  for (const slot& s : slots) {
    pool.emplace_back(worker, std::cref(s));
  }
  const auto t0 = std::chrono::steady_clock::now(); // threads made before the timer
  go = true;
  go.notify_all();
  for (std::thread& t : pool) {
    t.join();
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

} // namespace

int main(int argc, char** argv) {
  const args a = parse(argc, argv);
  CHECK(cudaSetDevice(a.device));
  cudaDeviceProp p{};
  CHECK(cudaGetDeviceProperties(&p, a.device));
  const std::size_t bytes = static_cast<std::size_t>(a.w.bytes);
  const int grid = kernel_grid(a.w.floats(), p.multiProcessorCount);

  std::vector<slot> slots(static_cast<std::size_t>(a.threads));
  for (slot& s : slots) {
    CHECK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
    CHECK(cudaHostAlloc(reinterpret_cast<void**>(&s.host), bytes, cudaHostAllocDefault));
    std::memset(s.host, 0, bytes);
    CHECK(cudaMalloc(reinterpret_cast<void**>(&s.dev), bytes));
    CHECK(cudaMemset(s.dev, 0, bytes));
    // Warm-up (untimed, unchecked): loads the kernels and touches this stream's engines.
    CHECK(cudaMemcpyAsync(s.dev, s.host, bytes, cudaMemcpyHostToDevice, s.stream));
    CHECK(launch_kernel_a(s.dev, s.dev, a.w.floats(), 1, grid, s.stream));
    CHECK(launch_kernel_b(s.dev, s.dev, a.w.floats(), 1, grid, s.stream));
    CHECK(cudaMemcpyAsync(s.host, s.dev, bytes, cudaMemcpyDeviceToHost, s.stream));
  }
  CHECK(cudaDeviceSynchronize());

  job_checker checker(a.w.jobs, a.w.floats(), a.w.iters, a.samples);
  const host_work work(a.w, a.samples, checker);
  std::printf("standalone threads_per_job on %s: %lld jobs, %lld bytes, %d iters, cpu_us %g, "
              "%d threads, grid %d x %d\n",
              p.name, static_cast<long long>(a.w.jobs), static_cast<long long>(a.w.bytes),
              a.w.iters, a.w.cpu_us, a.threads, grid, kernel_block);
  std::vector<double> us;
  bool ok = true;
  for (int r = 0; r < a.repeat; ++r) {
    checker.reset();
    const double s = run_once(a, work, grid, slots);
    const job_checker::verdict v = checker.check();
    us.push_back(s * 1e6 / static_cast<double>(a.w.jobs));
    ok = ok && v.ok();
    std::printf("run %d: %.2f us/job (%.3f s), check %s (%lld samples)\n", r, us.back(), s,
                v.ok() ? "ok" : "WRONG", static_cast<long long>(v.samples_checked));
    if (!v.ok()) {
      std::fprintf(stderr, "wrong results:\n%s", v.first_problems.c_str());
    }
  }
  std::sort(us.begin(), us.end());
  std::printf("standalone threads_per_job %d threads: %.2f us/job (median of %d)\n", a.threads,
              us[us.size() / 2], a.repeat);
  for (slot& s : slots) {
    CHECK(cudaStreamDestroy(s.stream));
    CHECK(cudaFreeHost(s.host));
    CHECK(cudaFree(s.dev));
  }
  return ok ? 0 : 1;
}
