// SPDX-License-Identifier: Apache-2.0
// The machine's description and the floor's measurements (docs/WORKLOAD.md "The floor").

#include "measure.hpp"

#include "gpu_resources.hpp"
#include "host_work.hpp"
#include "kernels.hpp"
#include "reference.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <thread>
#include <vector>

namespace cuawait::bench {

std::string gpu_unavailable_reason(int device) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return std::string("no CUDA device (cudaGetDeviceCount: ") + cudaGetErrorName(e) + ": " +
           cudaGetErrorString(e) + ")";
  }
  if (count == 0) {
    return "no CUDA device (cudaGetDeviceCount found 0 devices)";
  }
  if (device >= count) {
    return "no CUDA device " + std::to_string(device) + " (" + std::to_string(count) +
           " device(s) present)";
  }
  return {};
}

int host_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    return std::max(1, CPU_COUNT(&set));
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

namespace {
std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(colon + 2);
    }
  }
  return "unknown";
}
} // namespace

machine_info query_machine(int device) {
  CUAWAIT_CUDA_CHECK("set device", cudaSetDevice(device));
  cudaDeviceProp p{};
  CUAWAIT_CUDA_CHECK("device properties", cudaGetDeviceProperties(&p, device));
  machine_info m;
  m.gpu_name = p.name;
  m.device = device;
  m.sms = p.multiProcessorCount;
  m.compute_major = p.major;
  m.compute_minor = p.minor;
  m.gpu_memory_bytes = static_cast<double>(p.totalGlobalMem);
  CUAWAIT_CUDA_CHECK("driver version", cudaDriverGetVersion(&m.driver_version));
  CUAWAIT_CUDA_CHECK("runtime version", cudaRuntimeGetVersion(&m.runtime_version));
  m.host_cores = host_cores();
  m.host_cpu = cpu_model();
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0) {
    m.host_name = host;
  }
  return m;
}

void warm_up(const workload& w, int sms) {
  const std::size_t bytes = std::min<std::size_t>(static_cast<std::size_t>(w.bytes), 1 << 20);
  const raw_slot slot(bytes);
  const cudaStream_t s = slot.stream.get();
  const std::size_t n = bytes / 4;
  for (int i = 0; i < 3; ++i) {
    CUAWAIT_CUDA_CHECK("warm-up H2D",
                       cudaMemcpyAsync(slot.d(), slot.h(), bytes, cudaMemcpyHostToDevice, s));
    CUAWAIT_CUDA_CHECK("warm-up kernel A",
                       launch_kernel_a(slot.d(), slot.d(), n, 1, kernel_grid(n, sms), s));
    CUAWAIT_CUDA_CHECK("warm-up kernel B",
                       launch_kernel_b(slot.d(), slot.d(), n, 1, kernel_grid(n, sms), s));
    CUAWAIT_CUDA_CHECK("warm-up D2H",
                       cudaMemcpyAsync(slot.h(), slot.d(), bytes, cudaMemcpyDeviceToHost, s));
  }
  CUAWAIT_CUDA_CHECK("warm-up sync", cudaStreamSynchronize(s));
}

namespace {

float elapsed_ms(const raw_event& a, const raw_event& b) {
  float ms = 0;
  CUAWAIT_CUDA_CHECK("event elapsed", cudaEventElapsedTime(&ms, a.get(), b.get()));
  return ms;
}

struct copy_rates {
  double h2d = 0, d2h = 0, both = 0;
};

//! Best of `reps` copies of `bytes` each way, then both ways at once on two streams.
copy_rates measure_copies(std::size_t bytes, int reps) {
  const host_ptr h1 = make_pinned(bytes), h2 = make_pinned(bytes);
  const device_ptr d1 = make_device(bytes), d2 = make_device(bytes);
  const raw_stream s1 = make_stream(), s2 = make_stream();
  const raw_event e0 = make_event(true), e1 = make_event(true), e2 = make_event(true);
  copy_rates best;
  const double b = static_cast<double>(bytes);
  for (int r = 0; r <= reps; ++r) { // repetition 0 warms up and is not counted
    CUAWAIT_CUDA_CHECK("floor H2D", cudaEventRecord(e0.get(), s1.get()));
    CUAWAIT_CUDA_CHECK(
        "floor H2D", cudaMemcpyAsync(d1.get(), h1.get(), bytes, cudaMemcpyHostToDevice, s1.get()));
    CUAWAIT_CUDA_CHECK("floor H2D", cudaEventRecord(e1.get(), s1.get()));
    CUAWAIT_CUDA_CHECK("floor H2D", cudaEventSynchronize(e1.get()));
    const double h2d = b / (elapsed_ms(e0, e1) * 1e-3);

    CUAWAIT_CUDA_CHECK("floor D2H", cudaEventRecord(e0.get(), s1.get()));
    CUAWAIT_CUDA_CHECK(
        "floor D2H", cudaMemcpyAsync(h2.get(), d2.get(), bytes, cudaMemcpyDeviceToHost, s1.get()));
    CUAWAIT_CUDA_CHECK("floor D2H", cudaEventRecord(e1.get(), s1.get()));
    CUAWAIT_CUDA_CHECK("floor D2H", cudaEventSynchronize(e1.get()));
    const double d2h = b / (elapsed_ms(e0, e1) * 1e-3);

    CUAWAIT_CUDA_CHECK("floor both", cudaEventRecord(e0.get(), s1.get()));
    CUAWAIT_CUDA_CHECK("floor both", cudaStreamWaitEvent(s2.get(), e0.get(), 0));
    CUAWAIT_CUDA_CHECK(
        "floor both", cudaMemcpyAsync(d1.get(), h1.get(), bytes, cudaMemcpyHostToDevice, s1.get()));
    CUAWAIT_CUDA_CHECK(
        "floor both", cudaMemcpyAsync(h2.get(), d2.get(), bytes, cudaMemcpyDeviceToHost, s2.get()));
    CUAWAIT_CUDA_CHECK("floor both", cudaEventRecord(e1.get(), s1.get()));
    CUAWAIT_CUDA_CHECK("floor both", cudaEventRecord(e2.get(), s2.get()));
    CUAWAIT_CUDA_CHECK("floor both", cudaEventSynchronize(e1.get()));
    CUAWAIT_CUDA_CHECK("floor both", cudaEventSynchronize(e2.get()));
    const double both = 2 * b / (std::max(elapsed_ms(e0, e1), elapsed_ms(e0, e2)) * 1e-3);
    if (r > 0) {
      best.h2d = std::max(best.h2d, h2d);
      best.d2h = std::max(best.d2h, d2h);
      best.both = std::max(best.both, both);
    }
  }
  return best;
}

//! GPU time per job of kernels A and B with `streams` streams overlapping: every launch is
//! enqueued behind a gate kernel first, so the host's launch cost is not in the figure.
double measure_kernels(const workload& w, int sms, int streams, int jobs, int reps) {
  const std::size_t bytes = static_cast<std::size_t>(w.bytes);
  const std::size_t n = w.floats();
  const int grid = kernel_grid(n, sms);
  const host_ptr flag_host = make_pinned(sizeof(int), cudaHostAllocMapped);
  auto* flag = static_cast<volatile int*>(flag_host.get());
  int* flag_device = nullptr;
  CUAWAIT_CUDA_CHECK(
      "floor kernels",
      cudaHostGetDevicePointer(reinterpret_cast<void**>(&flag_device), flag_host.get(), 0));
  const raw_stream gate = make_stream();
  std::vector<raw_stream> s;
  std::vector<device_ptr> d;
  std::vector<raw_event> done;
  for (int k = 0; k < streams; ++k) {
    s.push_back(make_stream());
    d.push_back(make_device(bytes));
    done.push_back(make_event());
  }
  const raw_event start = make_event(true), end = make_event(true);
  double best = INFINITY;
  constexpr unsigned long long gate_limit_ns = 10'000'000'000ull;
  for (int r = 0; r <= reps; ++r) {
    *flag = 0;
    CUAWAIT_CUDA_CHECK("floor gate", launch_gate(flag_device, gate_limit_ns, gate.get()));
    CUAWAIT_CUDA_CHECK("floor kernels", cudaEventRecord(start.get(), gate.get()));
    const auto submit_start = std::chrono::steady_clock::now();
    for (int k = 0; k < streams; ++k) {
      CUAWAIT_CUDA_CHECK("floor kernels", cudaStreamWaitEvent(s[k].get(), start.get(), 0));
    }
    for (int j = 0; j < jobs; ++j) {
      const auto k = static_cast<std::size_t>(j % streams);
      auto* p = static_cast<float*>(d[k].get());
      CUAWAIT_CUDA_CHECK("floor kernel A", launch_kernel_a(p, p, n, w.iters, grid, s[k].get()));
      CUAWAIT_CUDA_CHECK("floor kernel B", launch_kernel_b(p, p, n, w.iters, grid, s[k].get()));
    }
    for (int k = 0; k < streams; ++k) {
      CUAWAIT_CUDA_CHECK("floor kernels", cudaEventRecord(done[k].get(), s[k].get()));
      CUAWAIT_CUDA_CHECK("floor kernels", cudaStreamWaitEvent(gate.get(), done[k].get(), 0));
    }
    CUAWAIT_CUDA_CHECK("floor kernels", cudaEventRecord(end.get(), gate.get()));
    const double submit_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - submit_start).count();
    *flag = 1;
    CUAWAIT_CUDA_CHECK("floor kernels", cudaEventSynchronize(end.get()));
    if (submit_s * 1e9 > 0.8 * static_cast<double>(gate_limit_ns)) {
      std::fprintf(stderr,
                   "warning: kernel floor: enqueueing took %.1f s, close to the gate's "
                   "limit; the kernel figure may include launch cost\n",
                   submit_s);
    }
    if (r > 0) { // repetition 0 warms up
      best = std::min(best, elapsed_ms(start, end) * 1e3 / jobs);
    }
  }
  return best;
}

//! CPU pre- and post-processing of one job on one thread, as every mode runs it.
double measure_cpu(const workload& w, int samples, int jobs) {
  job_checker scratch(jobs, w.floats(), w.iters, samples);
  const host_work work(w, samples, scratch);
  const host_ptr buf = make_pinned(static_cast<std::size_t>(w.bytes));
  auto* p = static_cast<float*>(buf.get());
  const auto t0 = std::chrono::steady_clock::now();
  for (int j = 0; j < jobs; ++j) {
    work.pre(j, p);
    work.post(j, p);
  }
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
         jobs;
}

} // namespace

floor_measurements measure_floor(const options& o, const machine_info& m, std::FILE* progress) {
  floor_measurements f;
  const int reps = o.quick ? 2 : 5;
  const copy_rates c = measure_copies(static_cast<std::size_t>(o.floor_copy_bytes), reps);
  f.h2d_bytes_per_s = c.h2d;
  f.d2h_bytes_per_s = c.d2h;
  f.both_bytes_per_s = c.both;
  std::fprintf(
      progress, "[floor] copies of %lld MiB: H2D %.1f GB/s, D2H %.1f GB/s, both ways %.1f GB/s\n",
      static_cast<long long>(o.floor_copy_bytes >> 20), c.h2d / 1e9, c.d2h / 1e9, c.both / 1e9);
  std::fflush(progress);
  constexpr int kernel_streams = 16;
  const int kernel_jobs = static_cast<int>(std::clamp<std::int64_t>(o.w.jobs, kernel_streams, 512));
  f.kernel_us_per_job = measure_kernels(o.w, m.sms, kernel_streams, kernel_jobs, reps);
  std::fprintf(progress, "[floor] kernels A+B: %.2f us per job (%d jobs on %d streams)\n",
               f.kernel_us_per_job, kernel_jobs, kernel_streams);
  std::fflush(progress);
  const int cpu_jobs = static_cast<int>(std::clamp<std::int64_t>(o.w.jobs, 1, 200));
  f.cpu_us_per_job_one_thread = measure_cpu(o.w, o.samples, cpu_jobs);
  f.cores = m.host_cores;
  std::fprintf(progress, "[floor] CPU pre+post: %.2f us per job on one thread, %d cores\n",
               f.cpu_us_per_job_one_thread, f.cores);
  std::fflush(progress);
  return f;
}

} // namespace cuawait::bench
