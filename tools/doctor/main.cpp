// SPDX-License-Identifier: Apache-2.0
// cuawait-doctor: will probe the machine (launch latency, link bandwidth, strategy round
// trips) and say what to expect and which options to use. Today a skeleton: it
// names the devices it finds and says plainly that no probe is implemented yet. It measures
// nothing and invents nothing.
//
// Exit status: 0 with at least one device, 2 without one (or when CUDA cannot be asked).

#include <cuda_runtime_api.h>

#include <cstdio>

int main() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    std::fprintf(stderr,
                 "cuawait-doctor: no CUDA device found (cudaGetDeviceCount: %s); nothing to "
                 "probe. Run it on a machine with a GPU. For a report on a program, run the "
                 "program with CUAWAIT_DOCTOR=1 (docs/DOCTOR.md).\n",
                 err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    return 2;
  }
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, d) == cudaSuccess) {
      std::printf("device %d: %s, compute capability %d.%d, %d SMs\n", d, p.name, p.major, p.minor,
                  p.multiProcessorCount);
    }
  }
  std::printf("cuawait-doctor: the machine probes (launch latency, link bandwidth, strategy "
              "round trips) are not implemented yet; for a report on a program, run it with "
              "CUAWAIT_DOCTOR=1 (docs/DOCTOR.md).\n");
  return 0;
}
