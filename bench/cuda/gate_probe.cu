// SPDX-License-Identifier: Apache-2.0
// Which CUDA call of a gated unit waits for the GPU? The stream is held by a spinning kernel
// (released by the host at the end, or after ~2 s by itself); each call of building,
// instantiating and launching a gated unit is timed on the host. A call that waits for the
// held kernel shows up as hundreds of milliseconds. One line per call.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstring>

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

double since(clk::time_point t0) {
  return std::chrono::duration<double, std::micro>(clk::now() - t0).count();
}

#define TIMED(label, call)                                                                         \
  do {                                                                                             \
    const auto t0_ = clk::now();                                                                   \
    const cudaError_t e_ = (call);                                                                 \
    std::printf("  %-44s %10.1f us  %s\n", label, since(t0_), cudaGetErrorName(e_));               \
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
  (void)cudaStreamDestroy(s);
  (void)cudaFreeHost(host);
  return 0;
}
