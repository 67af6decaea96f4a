// SPDX-License-Identifier: Apache-2.0
// The probes of cuawait-doctor. Each keeps to a few hundred samples or a few hundred MiB,
// so the whole run stays within a few seconds on a PCIe or NVLink-C2C host.

#include "probes.hpp"

#include <cuawait/cuda.hpp>

#include <chrono>
#include <cstring>
#include <exception>
#include <memory>
#include <thread>
#include <vector>

namespace cuawait::tools::doctor_cli {

namespace {

namespace cu = cuawait::cuda;
using clock_type = std::chrono::steady_clock;

__global__ void empty_kernel() {}

double us_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::micro>(clock_type::now() - t0).count();
}

constexpr int warm_up = 50;
constexpr int samples = 500;

//! Launch cost and launch-to-completion, seen by a host thread spinning on the stream.
void probe_launch(machine_report& r) {
  const cu::stream s;
  std::vector<double> enqueue, complete;
  for (int i = 0; i < warm_up + samples; ++i) {
    const auto t0 = clock_type::now();
    empty_kernel<<<1, 1, 0, s.get()>>>();
    const double e = us_since(t0);
    CUAWAIT_CUDA_CHECK("empty kernel", cudaGetLastError());
    cudaError_t q = cudaErrorNotReady;
    while ((q = cudaStreamQuery(s.get())) == cudaErrorNotReady) {
    }
    CUAWAIT_CUDA_CHECK("stream query", q);
    const double c = us_since(t0);
    if (i >= warm_up) {
      enqueue.push_back(e);
      complete.push_back(c);
    }
  }
  r.launch_enqueue = percentiles(enqueue);
  r.launch_complete = percentiles(complete);
}

//! Host memory of `bytes`, pinned (cudaHostAlloc) or pageable (touched once).
struct host_block {
  host_block(std::size_t bytes, bool pinned) : m_pinned(pinned) {
    if (pinned) {
      CUAWAIT_CUDA_CHECK("pinned allocation", cudaHostAlloc(&m_data, bytes, cudaHostAllocDefault));
    } else {
      m_data = ::operator new(bytes);
    }
    std::memset(m_data, 1, bytes);
  }
  host_block(const host_block&) = delete;
  host_block& operator=(const host_block&) = delete;
  ~host_block() {
    if (m_pinned) {
      (void)cudaFreeHost(m_data);
    } else {
      ::operator delete(m_data);
    }
  }
  void* m_data = nullptr;
  bool m_pinned;
};

//! Copies of each size host to device and back, pinned and pageable: `repeats` copies back
//! to back on one stream, timed on the host until the stream is done.
void probe_copies(machine_report& r) {
  const std::size_t sizes[] = {std::size_t{64} << 10, std::size_t{1} << 20, std::size_t{16} << 20,
                               std::size_t{64} << 20};
  const std::size_t biggest = sizes[std::size(sizes) - 1];
  const cu::stream s;
  void* dev = nullptr;
  CUAWAIT_CUDA_CHECK("device allocation", cudaMalloc(&dev, biggest));
  const std::unique_ptr<void, decltype(&cudaFree)> dev_owner(dev, &cudaFree);
  for (const bool pinned : {true, false}) {
    const host_block host(biggest, pinned);
    for (const bool h2d : {true, false}) {
      for (const std::size_t bytes : sizes) {
        // About 256 MiB per figure, at least 4 copies and at most 200.
        const int repeats =
            static_cast<int>(std::clamp<std::size_t>((std::size_t{256} << 20) / bytes, 4, 200));
        auto copy_once = [&] {
          CUAWAIT_CUDA_CHECK(
              "copy",
              h2d ? cudaMemcpyAsync(dev, host.m_data, bytes, cudaMemcpyHostToDevice, s.get())
                  : cudaMemcpyAsync(host.m_data, dev, bytes, cudaMemcpyDeviceToHost, s.get()));
        };
        copy_once(); // warm: the first copy of a range pays for its mapping
        CUAWAIT_CUDA_CHECK("stream sync", cudaStreamSynchronize(s.get()));
        const auto t0 = clock_type::now();
        for (int i = 0; i < repeats; ++i) {
          copy_once();
        }
        CUAWAIT_CUDA_CHECK("stream sync", cudaStreamSynchronize(s.get()));
        const double us = us_since(t0);
        copy_figure f;
        f.direction = h2d ? "h2d" : "d2h";
        f.memory = pinned ? "pinned" : "pageable";
        f.bytes = bytes;
        f.repeats = repeats;
        f.us_per_copy = us / repeats;
        f.gb_per_s = static_cast<double>(bytes) * repeats / (us * 1e3);
        r.copies.push_back(f);
      }
    }
  }
}

//! `n` awaits of an empty kernel by a coroutine on the pool, each timed from before the
//! launch to the coroutine running again; the first `warm_up` are left out.
task<void> round_trips(runtime& rt, cu::stream_ref s, std::vector<double>& out) {
  co_await rt.pool().schedule();
  for (int i = 0; i < warm_up + samples; ++i) {
    const auto t0 = clock_type::now();
    co_await s.launch(empty_kernel, dim3(1), dim3(1));
    const double us = us_since(t0);
    if (i >= warm_up) {
      out.push_back(us);
    }
  }
}

//! Each completion strategy in a runtime of its own (two workers: the one awaiting polls
//! while idle, as in any program on the pool).
void probe_strategies(int device, machine_report& r) {
  r.default_strategy = cu::to_string(cu::default_strategy);
  for (const cu::strategy st :
       {cu::strategy::timeline, cu::strategy::event_poll, cu::strategy::stream_poll,
        cu::strategy::host_callback, cu::strategy::blocking_sync}) {
    strategy_figure f;
    f.name = cu::to_string(st);
    try {
      runtime_options o;
      o.threads = 2;
      o.device = device;
      o.strategy = st;
      runtime rt(o);
      // The default strategy falls back to event_poll where the driver lacks its entry
      // point: measure only what was asked for.
      if (const cu::strategy got = rt.reactor().source().kind(); got != st) {
        f.why_not =
            std::string("unavailable here (the runtime fell back to ") + cu::to_string(got) + ")";
        r.strategies.push_back(std::move(f));
        continue;
      }
      std::vector<double> us;
      {
        const cu::stream s;
        rt.run(round_trips(rt, s, us));
      }
      f.round_trip = percentiles(us);
      f.available = true;
    } catch (const std::exception& e) {
      f.why_not = e.what();
    }
    r.strategies.push_back(std::move(f));
  }
}

} // namespace

int count_devices(machine_report& r) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    r.device_count = 0;
    r.no_device_reason =
        std::string("no CUDA device found (cudaGetDeviceCount: ") +
        (err != cudaSuccess ? cudaGetErrorString(err) : "0 devices") +
        "); nothing to probe. Run it on a machine with a GPU. For a report on a program, run "
        "the program with CUAWAIT_DOCTOR=1 (docs/DOCTOR.md).";
    return 0;
  }
  r.device_count = count;
  return count;
}

void probe_machine(int device, machine_report& r) {
  const auto t0 = clock_type::now();
  CUAWAIT_CUDA_CHECK("set device", cudaSetDevice(device));
  cudaDeviceProp p{};
  CUAWAIT_CUDA_CHECK("device properties", cudaGetDeviceProperties(&p, device));
  r.device = {device,
              p.name,
              p.major,
              p.minor,
              p.multiProcessorCount,
              static_cast<double>(p.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0)};
  r.hardware_threads = std::thread::hardware_concurrency();
  CUAWAIT_CUDA_CHECK("context", cudaFree(nullptr)); // the context, outside the timings
  probe_launch(r);
  probe_copies(r);
  probe_strategies(device, r);
  r.seconds = us_since(t0) / 1e6;
}

} // namespace cuawait::tools::doctor_cli
