// SPDX-License-Identifier: Apache-2.0
#include "cuawait/cuda/stream_pool.hpp"

namespace cuawait::cuda {
namespace {

// Slot groups are indexed by cuawait::priority: low, normal, high.
std::array<std::size_t, priority_count> group_sizes(const stream_pool_options& o) {
  return {o.low, o.normal, o.high};
}

} // namespace

stream_pool::stream_pool(stream_pool_options options) : m_slots(group_sizes(options)) {
  int previous = 0;
  CUAWAIT_CUDA_CHECK("stream_pool: current device", cudaGetDevice(&previous));
  if (options.device >= 0 && options.device != previous) {
    CUAWAIT_CUDA_CHECK("stream_pool: select device", cudaSetDevice(options.device));
  }
  // Restores the caller's device however construction ends.
  struct restore_device {
    int device;
    bool active;
    ~restore_device() {
      if (active) {
        (void)try_check(cudaSetDevice(device));
      }
    }
  } restore{previous, options.device >= 0 && options.device != previous};

  int least = 0;
  int greatest = 0;
  CUAWAIT_CUDA_CHECK("stream_pool: priority range",
                     cudaDeviceGetStreamPriorityRange(&least, &greatest));
  m_cuda_priority[static_cast<int>(priority::low)] = least;
  m_cuda_priority[static_cast<int>(priority::normal)] = least + (greatest - least) / 2;
  m_cuda_priority[static_cast<int>(priority::high)] = greatest;

  const auto sizes = group_sizes(options);
  m_streams.reserve(m_slots.size());
  for (int g = 0; g < priority_count; ++g) {
    for (std::size_t i = 0; i < sizes[g]; ++i) {
      m_streams.emplace_back(stream_options{options.non_blocking, m_cuda_priority[g]});
    }
  }
}

stream_pool::~stream_pool() = default;

} // namespace cuawait::cuda
