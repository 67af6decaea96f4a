// SPDX-License-Identifier: Apache-2.0
// Streaming GPU batch results through an async_generator: the producer uploads a batch,
// launches a kernel, co_awaits the result's copy back (suspending, never blocking) and
// co_yields it; the consumer reads the stream with `co_await gen.next()`.
#include <cuawait/async_generator.hpp>
#include <cuawait/cuda.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <vector>

namespace ca = cuawait;
namespace cu = cuawait::cuda;

// Adds the squares of x[0..n) into *sum.
__global__ void sum_of_squares(const int* x, int n, unsigned long long* sum) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    atomicAdd(sum, static_cast<unsigned long long>(x[i]) * static_cast<unsigned long long>(x[i]));
  }
}

// One element per batch of `input`: the batch's sum of squares, computed on the GPU.
ca::async_generator<unsigned long long>
batch_sums(cu::stream_pool& streams, const std::vector<int>& input, std::size_t batch) {
  auto s = co_await streams.acquire(); // held for the whole stream, returned at the end
  cu::pinned_buffer<int> host_in(batch, s);
  cu::device_buffer<int> dev_in(batch, s);
  cu::pinned_buffer<unsigned long long> host_sum(1, s);
  cu::device_buffer<unsigned long long> dev_sum(1, s);
  for (std::size_t first = 0; first < input.size(); first += batch) {
    const std::size_t n = std::min(batch, input.size() - first);
    std::copy_n(input.begin() + static_cast<std::ptrdiff_t>(first), n, host_in.data());
    s.copy(dev_in.data(), host_in.data(), n);
    s.memset(dev_sum.data(), 0, 1);
    s.launch(sum_of_squares, dim3(64), dim3(256), dev_in.data(), static_cast<int>(n),
             dev_sum.data());
    co_await s.copy(host_sum, dev_sum); // suspended until the batch is done
    co_yield host_sum.data()[0];        // the consumer runs now; we resume at its next()
  }
}

ca::task<int> check(cu::stream_pool& streams) {
  std::vector<int> input(1 << 20);
  for (std::size_t i = 0; i < input.size(); ++i) {
    input[i] = static_cast<int>(i % 1000);
  }
  unsigned long long expected = 0;
  for (int x : input) {
    expected += static_cast<unsigned long long>(x) * static_cast<unsigned long long>(x);
  }

  auto gen = batch_sums(streams, input, 1 << 16);
  unsigned long long total = 0;
  int batches = 0;
  while (unsigned long long* partial = co_await gen.next()) { // null once the stream ends
    total += *partial;
    ++batches;
  }
  std::printf("stream_batches: %d batches, sum %llu, expected %llu\n", batches, total, expected);
  co_return total == expected ? 0 : 1;
}

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("stream_batches: no CUDA device, nothing to run\n");
    return 0;
  }
  ca::runtime rt;
  cu::stream_pool streams(1);
  return rt.run(check(streams));
}
