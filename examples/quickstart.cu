// SPDX-License-Identifier: Apache-2.0
// Quickstart: many independent GPU jobs, each one sequential coroutine, none blocking a
// thread. Quoted in README.md; built with the examples, run by scripts/gpu-check.
#include <cuawait/cuda.hpp>

#include <cstdio>
#include <vector>

namespace ca = cuawait;
namespace cu = cuawait::cuda;

__global__ void scale(float* x, int n, float a) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    x[i] *= a;
  }
}
__global__ void add(float* x, int n, float b) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    x[i] += b;
  }
}

// One job: upload, two kernels, download, check. Reads top to bottom like the blocking loop,
// but every co_await suspends instead of blocking, so the thread serves other jobs meanwhile.
ca::task<bool> job(cu::stream_pool& streams, int id, int n) {
  auto s = co_await streams.acquire(); // a stream lease, returned on scope exit
  cu::pinned_buffer<float> host(n, s); // pooled page-locked memory
  for (int i = 0; i < n; ++i) {
    host.data()[i] = static_cast<float>(id);
  }
  cu::device_buffer<float> dev(n, s); // stream-ordered allocation
  s.copy(dev, host);                  // enqueue without waiting...
  s.launch(scale, dim3(64), dim3(256), dev.data(), n, 2.0f);
  s.launch(add, dim3(64), dim3(256), dev.data(), n, 1.0f);
  co_await s.copy(host, dev); // ...and await once: resumed when done
  co_return host.data()[n - 1] == 2.0f * static_cast<float>(id) + 1.0f;
}

ca::task<int> all_jobs(cu::stream_pool& streams, int jobs) {
  std::vector<ca::task<bool>> tasks;
  for (int id = 0; id < jobs; ++id) {
    tasks.push_back(job(streams, id, 1 << 16));
  }
  int ok = 0;
  for (bool good : co_await ca::when_all(std::move(tasks))) {
    ok += good ? 1 : 0;
  }
  co_return ok;
}

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("quickstart: no CUDA device, nothing to run\n");
    return 0;
  }
  ca::runtime rt; // thread pool + GPU completion reactor
  cu::stream_pool streams(16);
  const int jobs = 1000;
  // All jobs run on this thread, interleaved at their co_awaits; none blocks it. (To spread
  // CPU-heavy jobs over the runtime's pool, a job starts with co_await rt.pool().schedule().)
  const int ok = rt.run(all_jobs(streams, jobs));
  std::printf("quickstart: %d of %d jobs correct\n", ok, jobs);
  return ok == jobs ? 0 : 1;
}
