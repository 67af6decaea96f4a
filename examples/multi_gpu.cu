// SPDX-License-Identifier: Apache-2.0
// Several GPUs: one runtime serves every visible device (a context each, polled by the same
// workers), and a device_scheduler gives each job the device with the fewest jobs in
// flight. Each job stays one sequential coroutine on its device. Quoted in
// docs/MULTI_GPU.md. Usage: example_multi_gpu [devices...] (default: every visible one;
// "0 0" runs two contexts on device 0).
#include <cuawait/cuda.hpp>

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace ca = cuawait;
namespace cu = cuawait::cuda;

__global__ void scale_add(float* x, int n, float a, float b) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    x[i] = x[i] * a + b;
  }
}

// One job on the device the scheduler picked: that device is current, its stream pool,
// memory pool and reactor are used.
ca::task<bool> job(cu::device_lease& d, int id, int n) {
  auto s = co_await d.acquire_stream(); // a stream of d's device
  cu::pinned_buffer<float> host(n, s);  // pinned memory, usable from every device
  for (int i = 0; i < n; ++i) {
    host.data()[i] = static_cast<float>(id);
  }
  cu::device_buffer<float> dev(n, s); // from d's memory pool
  s.copy(dev, host);
  s.launch(scale_add, dim3(64), dim3(256), dev.data(), n, 2.0f, 1.0f);
  co_await s.copy(host, dev); // the wait goes to d's reactor
  co_return host.data()[n - 1] == 2.0f * static_cast<float>(id) + 1.0f;
}

// Calls `job` with the job's id (a named type: the scheduler keeps it in its coroutine).
struct job_of {
  int id;
  int n;
  ca::task<bool> operator()(cu::device_lease& d) const { return job(d, id, n); }
};

ca::task<bool> spread(ca::runtime& rt, cu::device_scheduler& sched, int id) {
  co_await rt.pool().schedule();
  co_return co_await sched.run(job_of{id, 1 << 16});
}

ca::task<int> all_jobs(ca::runtime& rt, cu::device_scheduler& sched, int jobs) {
  std::vector<ca::task<bool>> tasks;
  for (int id = 0; id < jobs; ++id) {
    tasks.push_back(spread(rt, sched, id));
  }
  int ok = 0;
  for (bool good : co_await ca::when_all(std::move(tasks))) {
    ok += good ? 1 : 0;
  }
  co_return ok;
}

int main(int argc, char** argv) {
  if (cu::device_count() == 0) {
    std::printf("multi_gpu: no CUDA device, nothing to run\n");
    return 0;
  }
  ca::runtime_options o;
  o.devices = cu::all_devices();
  if (argc > 1) {
    o.devices.clear();
    for (int i = 1; i < argc; ++i) {
      o.devices.push_back(std::atoi(argv[i]));
    }
  }
  ca::runtime rt(o);
  cu::device_scheduler sched(rt);
  const int jobs = 256;
  const int ok = rt.run(all_jobs(rt, sched, jobs));
  for (std::size_t i = 0; i < sched.size(); ++i) {
    std::printf("multi_gpu: device %d (#%zu): %zu jobs\n", rt.devices()[i], i, sched.completed(i));
  }
  std::printf("multi_gpu: %d of %d jobs correct\n", ok, jobs);
  return ok == jobs ? 0 : 1;
}
