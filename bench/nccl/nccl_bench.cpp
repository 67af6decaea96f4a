// SPDX-License-Identifier: Apache-2.0
// cuawait-bench-nccl: an all-reduce of 1 GiB of floats on a one-rank communicator (one GPU),
// awaited through cuawait (`co_await comm.all_reduce(...)` in a runtime) against the plain
// form (`ncclAllReduce` then `cudaStreamSynchronize`), in the same binary, alternating.
// Prints the median of each and one ratio line (cuawait / direct; 1.00 means no overhead).
//
//   cuawait-bench-nccl [--bytes N] [--repeat R]

#include <cuawait/nccl.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

namespace {

namespace ca = cuawait;
namespace cu = cuawait::cuda;
namespace nccl = cuawait::nccl;
using clock_type = std::chrono::steady_clock;

double ms_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "nccl bench: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

} // namespace

int main(int argc, char** argv) {
  std::size_t bytes = std::size_t{1} << 30;
  int repeat = 11;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view a = argv[i];
    if (a == "--bytes") {
      bytes = std::strtoull(argv[i + 1], nullptr, 10);
    } else if (a == "--repeat") {
      repeat = std::max(1, std::atoi(argv[i + 1]));
    } else {
      std::fprintf(stderr, "usage: %s [--bytes N] [--repeat R]\n", argv[0]);
      return 2;
    }
  }
  const std::size_t count = bytes / sizeof(float);

  ca::runtime rt(ca::runtime_options{.threads = 2});
  const std::array<int, 1> devices{rt.context().device()};
  auto comms = nccl::communicator::init_all(devices);
  nccl::communicator& comm = comms[0];
  float* send = nullptr;
  float* recv = nullptr;
  check(cudaMalloc(reinterpret_cast<void**>(&send), count * sizeof(float)), "cudaMalloc");
  check(cudaMalloc(reinterpret_cast<void**>(&recv), count * sizeof(float)), "cudaMalloc");
  check(cudaMemset(send, 0, count * sizeof(float)), "cudaMemset");
  cu::stream s;

  const auto direct = [&] {
    const auto t0 = clock_type::now();
    cu::check_status("ncclAllReduce",
                     ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, comm.get(), s.get()));
    check(cudaStreamSynchronize(s.get()), "cudaStreamSynchronize");
    return ms_since(t0);
  };
  const auto awaited = [&] {
    return rt.run([&]() -> ca::task<double> {
      co_await rt.pool().schedule();
      const auto t0 = clock_type::now();
      co_await comm.all_reduce(send, recv, count, ncclSum, s);
      co_return ms_since(t0);
    }());
  };

  (void)direct(); // warm-up: NCCL sets up its channels on the first call
  (void)awaited();
  std::vector<double> d;
  std::vector<double> c;
  for (int r = 0; r < repeat; ++r) {
    d.push_back(direct());
    c.push_back(awaited());
  }
  const double dm = median(d);
  const double cm = median(c);
  int version = 0;
  (void)ncclGetVersion(&version);
  std::printf("nccl all_reduce %.2f GiB, 1 rank, NCCL %d, median of %d: direct %.3f ms "
              "(%.1f GB/s), cuawait %.3f ms (%.1f GB/s)\n",
              static_cast<double>(bytes) / (1 << 30), version, repeat, dm,
              static_cast<double>(bytes) / dm / 1e6, cm, static_cast<double>(bytes) / cm / 1e6);
  std::printf("nccl ratio cuawait/direct: %.3f\n", cm / dm);
  check(cudaFree(send), "cudaFree");
  check(cudaFree(recv), "cudaFree");
  return 0;
}
