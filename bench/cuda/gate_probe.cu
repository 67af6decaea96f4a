// SPDX-License-Identifier: Apache-2.0
// Which CUDA call of a gated unit waits for the GPU? The stream is held by a spinning kernel
// (released by the host at the end, or after ~2 s by itself); each call of building,
// instantiating and launching a gated unit is timed on the host. A call that waits for the
// held kernel shows up as hundreds of milliseconds. One line per call.
#include <cuawait/cuda.hpp>

#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

namespace {

using clk = std::chrono::steady_clock;

__global__ void spin(const volatile int* release, int* outcome) {
  const long long start = clock64();
  while (*release == 0) {
    if (clock64() - start > 4'000'000'000LL) {
      *outcome = 2;
      return;
    }
  }
  *outcome = 1;
}

__global__ void check(cudaGraphConditionalHandle h, const volatile int* closed) {
  cudaGraphSetConditional(h, *closed == 0 ? 1U : 0U);
}

__global__ void body(int* out) { *out = 1; }

__global__ void count(int* out, int add) { atomicAdd(out, add); }

double since(clk::time_point t0) {
  return std::chrono::duration<double, std::micro>(clk::now() - t0).count();
}

int g_unit = -1; // >= 0: print only calls slower than 500 us, with the unit's index

#define TIMED(label, call)                                                                         \
  do {                                                                                             \
    const auto t0_ = clk::now();                                                                   \
    const cudaError_t e_ = (call);                                                                 \
    const double us_ = since(t0_);                                                                 \
    if (g_unit < 0 || us_ > 500) {                                                                 \
      std::printf("  %-44s %10.1f us  %s (unit %d)\n", label, us_, cudaGetErrorName(e_), g_unit);  \
    }                                                                                              \
  } while (0)

//! One gated unit, built the way the library builds it; `upload`: instantiate with an
//! upload on the stream; `keep`: return the exec to destroy once the stream is idle.
cudaGraphExec_t unit(cudaStream_t s, int* words, int* out, bool upload, bool keep) {
  cudaGraph_t g = nullptr;
  TIMED("cudaGraphCreate", cudaGraphCreate(&g, 0));
  cudaGraphConditionalHandle h{};
  TIMED("cudaGraphConditionalHandleCreate",
        cudaGraphConditionalHandleCreate(&h, g, 0, cudaGraphCondAssignDefault));
  const int* closed = words;
  void* args[] = {&h, &closed};
  cudaKernelNodeParams kp{};
  kp.func = reinterpret_cast<void*>(&check);
  kp.gridDim = dim3(1);
  kp.blockDim = dim3(1);
  kp.kernelParams = args;
  cudaGraphNode_t cn = nullptr;
  TIMED("cudaGraphAddKernelNode (check)", cudaGraphAddKernelNode(&cn, g, nullptr, 0, &kp));
  cudaGraphNodeParams cp{};
  cp.type = cudaGraphNodeTypeConditional;
  cp.conditional.handle = h;
  cp.conditional.type = cudaGraphCondTypeIf;
  cp.conditional.size = 1;
  cudaGraphNode_t in = nullptr;
  TIMED("cudaGraphAddNode (if)", cudaGraphAddNode(&in, g, &cn, nullptr, 1, &cp));
  TIMED("cudaStreamBeginCaptureToGraph",
        cudaStreamBeginCaptureToGraph(s, cp.conditional.phGraph_out[0], nullptr, nullptr, 0,
                                      cudaStreamCaptureModeThreadLocal));
  const auto t0 = clk::now();
  body<<<1, 1, 0, s>>>(out);
  std::printf("  %-44s %10.1f us\n", "captured launch", since(t0));
  cudaGraph_t captured = nullptr;
  TIMED("cudaStreamEndCapture", cudaStreamEndCapture(s, &captured));
  cudaGraphExec_t x = nullptr;
  if (upload) {
    cudaGraphInstantiateParams ip{};
    ip.flags = cudaGraphInstantiateFlagUpload;
    ip.uploadStream = s;
    TIMED("cudaGraphInstantiateWithParams (upload)", cudaGraphInstantiateWithParams(&x, g, &ip));
  } else {
    TIMED("cudaGraphInstantiate", cudaGraphInstantiate(&x, g, 0));
  }
  TIMED("cudaGraphLaunch", cudaGraphLaunch(x, s));
  TIMED("cudaGraphDestroy", cudaGraphDestroy(g));
  if (keep) {
    return x;
  }
  TIMED("cudaGraphExecDestroy", cudaGraphExecDestroy(x));
  return nullptr;
}

} // namespace

int main() {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  int* host = nullptr; // [0] release, [1] outcome, [2] closed, [3] out
  if (cudaHostAlloc(reinterpret_cast<void**>(&host), 4 * sizeof(int), cudaHostAllocMapped) !=
      cudaSuccess) {
    std::printf("gate probe: no GPU\n");
    return 0;
  }
  int* dev = nullptr;
  (void)cudaHostGetDevicePointer(reinterpret_cast<void**>(&dev), host, 0);
  cudaStream_t s = nullptr;
  (void)cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  std::printf("gate probe: warm (stream idle)\n");
  (void)unit(s, dev + 2, dev + 3, false, false);
  (void)cudaStreamSynchronize(s);
  for (int variant = 0; variant < 3; ++variant) {
    const bool upload = variant == 1;
    const bool keep = variant == 2;
    std::memset(host, 0, 4 * sizeof(int));
    spin<<<1, 1, 0, s>>>(dev, dev + 1);
    std::printf("gate probe: stream held (%s)\n",
                upload
                    ? "instantiate with upload on the stream"
                    : (keep ? "exec destroyed after the stream is idle" : "as the library does"));
    const auto t0 = clk::now();
    cudaGraphExec_t x = unit(s, dev + 2, dev + 3, upload, keep);
    std::printf("  %-44s %10.1f us\n", "whole unit, host time", since(t0));
    reinterpret_cast<volatile int*>(host)[0] = 1;
    (void)cudaStreamSynchronize(s);
    std::printf("  held kernel outcome %d (1: released by the host, 2: timed out)\n",
                reinterpret_cast<volatile int*>(host)[1]);
    if (x != nullptr) {
      (void)cudaGraphExecDestroy(x);
    }
  }
  // Twenty units behind a held kernel, each with its own event recorded after it and its
  // exec kept (as the library now does): only slow calls are printed.
  {
    std::memset(host, 0, 4 * sizeof(int));
    spin<<<1, 1, 0, s>>>(dev, dev + 1);
    std::printf("gate probe: 20 units, stream held, execs kept, an event after each\n");
    std::vector<cudaGraphExec_t> execs;
    std::vector<cudaEvent_t> events;
    const auto t0 = clk::now();
    for (g_unit = 0; g_unit < 20; ++g_unit) {
      execs.push_back(unit(s, dev + 2, dev + 3, false, true));
      cudaEvent_t ev = nullptr;
      TIMED("cudaEventCreateWithFlags", cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
      TIMED("cudaEventRecord", cudaEventRecord(ev, s));
      TIMED("cudaEventQuery", cudaEventQuery(ev));
      events.push_back(ev);
    }
    g_unit = -1;
    std::printf("  %-44s %10.1f us\n", "20 units, host time", since(t0));
    reinterpret_cast<volatile int*>(host)[0] = 1;
    (void)cudaStreamSynchronize(s);
    std::printf("  held kernel outcome %d (1: released by the host, 2: timed out)\n",
                reinterpret_cast<volatile int*>(host)[1]);
    for (cudaGraphExec_t x : execs) {
      (void)cudaGraphExecDestroy(x);
    }
    for (cudaEvent_t e : events) {
      (void)cudaEventDestroy(e);
    }
  }
  // The same through the library's gate.
  {
    namespace cu = cuawait::cuda;
    cu::device_context ctx;
    const cu::default_context_scope everywhere(ctx);
    cu::stream cs;
    cu::gate g(cs);
    (void)g.launch(body, dim3(1), dim3(1), dev + 3); // warm
    cs.sync();
    std::memset(host, 0, 4 * sizeof(int));
    (void)cs.launch(spin, dim3(1), dim3(1), static_cast<const volatile int*>(dev), dev + 1);
    std::printf("gate probe: 20 units through cuda::gate, stream held\n");
    const auto t0 = clk::now();
    for (int i = 0; i < 20; ++i) {
      const auto t1 = clk::now();
      (void)g.launch(count, dim3(1), dim3(1), dev + 3, i + 1);
      if (since(t1) > 500) {
        std::printf("  gate.launch %d: %.1f us\n", i, since(t1));
      }
    }
    std::printf("  %-44s %10.1f us\n", "20 gated units, host time", since(t0));
    reinterpret_cast<volatile int*>(host)[0] = 1;
    cs.sync();
    std::printf("  held kernel outcome %d (1: released by the host, 2: timed out)\n",
                reinterpret_cast<volatile int*>(host)[1]);
    std::printf("  bodies' sum %d (210: every unit ran with its own argument); ran %u, skipped "
                "%u, instantiated %llu, updated %llu\n",
                reinterpret_cast<volatile int*>(host)[3], g.ran(), g.skipped(),
                static_cast<unsigned long long>(g.instantiated()),
                static_cast<unsigned long long>(g.updated()));
    // Closed behind a held kernel: the queued units are skipped.
    std::memset(host, 0, 4 * sizeof(int));
    (void)cs.launch(spin, dim3(1), dim3(1), static_cast<const volatile int*>(dev), dev + 1);
    const unsigned ran0 = g.ran();
    for (int i = 0; i < 20; ++i) {
      (void)g.launch(count, dim3(1), dim3(1), dev + 3, i + 1);
    }
    g.close();
    reinterpret_cast<volatile int*>(host)[0] = 1;
    cs.sync();
    std::printf("gate probe: 20 units closed behind a held kernel: bodies' sum %d (0 expected), "
                "ran %u more, skipped %u, held kernel outcome %d\n",
                reinterpret_cast<volatile int*>(host)[3], g.ran() - ran0, g.skipped(),
                reinterpret_cast<volatile int*>(host)[1]);
  }
  (void)cudaStreamDestroy(s);
  (void)cudaFreeHost(host);
  return 0;
}
