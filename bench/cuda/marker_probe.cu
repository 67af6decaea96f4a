// SPDX-License-Identifier: Apache-2.0
// What a completion marker costs, measured with the raw CUDA API (no cuawait), to choose
// the marker per await by measurement: for each way of learning that a stream's work is
// done, T threads (each with its own stream) run `iters` rounds of "64 KiB H2D copy, empty
// kernel, marker, wait until the host sees it done", and the probe prints µs per round
// (aggregate over the threads: wall time / total rounds) and per round per thread.
//
//   cuawait-marker-probe [--threads 1,4,16] [--iters 4000] [--bytes 65536]

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

__global__ void empty_kernel() {}

//! A one-thread marker kernel: makes the stream's earlier writes visible, then the ticket.
__global__ void write_ticket(volatile std::uint64_t* word, std::uint64_t v) {
  __threadfence_system();
  *word = v;
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "marker-probe: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

using write_value64_fn = CUresult (*)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);

write_value64_fn load_write_value64() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  check(cudaGetDriverEntryPointByVersion("cuStreamWriteValue64", &fn, 12000, cudaEnableDefault,
                                         &found),
        "entry point");
  return reinterpret_cast<write_value64_fn>(fn);
}

enum class way {
  sync,
  event_spin,
  stream_query_spin,
  timeline_spin,
  timeline_no_barrier_spin,
  kernel_write_spin,
  none_enqueue_only
};
const char* name(way w) {
  switch (w) {
  case way::sync:
    return "cudaStreamSynchronize";
  case way::event_spin:
    return "event record + cudaEventQuery spin";
  case way::stream_query_spin:
    return "no marker + cudaStreamQuery spin";
  case way::timeline_spin:
    return "cuStreamWriteValue64 + word spin";
  case way::timeline_no_barrier_spin:
    return "cuStreamWriteValue64 no-barrier + spin";
  case way::kernel_write_spin:
    return "marker kernel write + word spin";
  case way::none_enqueue_only:
    return "enqueue only, one sync at the end";
  }
  return "?";
}

struct per_thread {
  cudaStream_t s{};
  cudaEvent_t e{};
  void* host = nullptr;
  void* dev = nullptr;
  std::uint64_t* word = nullptr;
  CUdeviceptr dword = 0;
};

double run(way w, int threads, int iters, std::size_t bytes, write_value64_fn wv) {
  std::vector<per_thread> pt(threads);
  for (auto& p : pt) {
    check(cudaStreamCreateWithFlags(&p.s, cudaStreamNonBlocking), "stream");
    check(cudaEventCreateWithFlags(&p.e, cudaEventDisableTiming), "event");
    check(cudaHostAlloc(&p.host, bytes, cudaHostAllocDefault), "host");
    check(cudaMalloc(&p.dev, bytes), "dev");
    check(cudaHostAlloc(reinterpret_cast<void**>(&p.word), 64, cudaHostAllocMapped), "word");
    *p.word = 0;
    void* d = nullptr;
    check(cudaHostGetDevicePointer(&d, p.word, 0), "word ptr");
    p.dword = reinterpret_cast<CUdeviceptr>(d);
  }
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::atomic<bool> unsupported{false};
  auto body = [&](per_thread& p) {
    ready.fetch_add(1);
    while (!go.load()) {
    }
    for (int i = 1; i <= iters; ++i) {
      check(cudaMemcpyAsync(p.dev, p.host, bytes, cudaMemcpyHostToDevice, p.s), "copy");
      empty_kernel<<<1, 1, 0, p.s>>>();
      switch (w) {
      case way::sync:
        check(cudaStreamSynchronize(p.s), "sync");
        break;
      case way::event_spin:
        check(cudaEventRecord(p.e, p.s), "record");
        while (cudaEventQuery(p.e) == cudaErrorNotReady) {
        }
        break;
      case way::stream_query_spin:
        while (cudaStreamQuery(p.s) == cudaErrorNotReady) {
        }
        break;
      case way::timeline_spin:
        if (wv(p.s, p.dword, static_cast<cuuint64_t>(i), 0) != CUDA_SUCCESS) {
          std::fprintf(stderr, "write value failed\n");
          std::exit(1);
        }
        while (std::atomic_ref<std::uint64_t>(*p.word).load(std::memory_order_acquire) <
               static_cast<std::uint64_t>(i)) {
        }
        break;
      case way::timeline_no_barrier_spin:
        if (wv(p.s, p.dword, static_cast<cuuint64_t>(i), 1 /* NO_MEMORY_BARRIER */) !=
            CUDA_SUCCESS) {
          unsupported.store(true); // refused on the H200 (CUDA 13.0): reported, not fatal
          i = iters;
          break;
        }
        while (std::atomic_ref<std::uint64_t>(*p.word).load(std::memory_order_acquire) <
               static_cast<std::uint64_t>(i)) {
        }
        break;
      case way::kernel_write_spin:
        write_ticket<<<1, 1, 0, p.s>>>(reinterpret_cast<volatile std::uint64_t*>(p.dword),
                                       static_cast<std::uint64_t>(i));
        while (std::atomic_ref<std::uint64_t>(*p.word).load(std::memory_order_acquire) <
               static_cast<std::uint64_t>(i)) {
        }
        break;
      case way::none_enqueue_only:
        break;
      }
    }
    check(cudaStreamSynchronize(p.s), "final sync");
  };
  std::vector<std::thread> ts;
  for (auto& p : pt) {
    ts.emplace_back(body, std::ref(p));
  }
  while (ready.load() != threads) {
  }
  const auto t0 = std::chrono::steady_clock::now();
  go = true;
  for (auto& t : ts) {
    t.join();
  }
  const double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  for (auto& p : pt) {
    cudaStreamDestroy(p.s);
    cudaEventDestroy(p.e);
    cudaFreeHost(p.host);
    cudaFree(p.dev);
    cudaFreeHost(p.word);
  }
  if (unsupported.load()) {
    return -1.0;
  }
  return us / (static_cast<double>(iters) * threads);
}

} // namespace

int main(int argc, char** argv) {
  std::vector<int> thread_counts{1, 4, 16};
  int iters = 4000;
  std::size_t bytes = 65536;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--threads") == 0) {
      thread_counts.clear();
      for (std::string s = argv[i + 1]; !s.empty();) {
        const auto c = s.find(',');
        thread_counts.push_back(std::stoi(s.substr(0, c)));
        s = c == std::string::npos ? "" : s.substr(c + 1);
      }
    } else if (std::strcmp(argv[i], "--iters") == 0) {
      iters = std::atoi(argv[i + 1]);
    } else if (std::strcmp(argv[i], "--bytes") == 0) {
      bytes = static_cast<std::size_t>(std::atoll(argv[i + 1]));
    }
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("marker-probe: no CUDA device, nothing measured\n");
    return 0;
  }
  check(cudaFree(nullptr), "init");
  const write_value64_fn wv = load_write_value64();
  std::printf("marker probe: %zu-byte H2D + empty kernel + marker + wait, %d rounds per thread\n",
              bytes, iters);
  std::printf("%-40s %8s %14s %16s\n", "way", "threads", "us/round(agg)", "us/round/thread");
  for (const way w : {way::none_enqueue_only, way::sync, way::event_spin, way::stream_query_spin,
                      way::timeline_spin, way::timeline_no_barrier_spin, way::kernel_write_spin}) {
    for (const int t : thread_counts) {
      (void)run(w, t, iters / 10, bytes, wv); // warm-up
      const double agg = run(w, t, iters, bytes, wv);
      if (agg < 0) {
        std::printf("%-40s %8d %14s %16s\n", name(w), t, "unsupported", "-");
        continue;
      }
      std::printf("%-40s %8d %14.2f %16.2f\n", name(w), t, agg, agg * t);
    }
  }
  return 0;
}
