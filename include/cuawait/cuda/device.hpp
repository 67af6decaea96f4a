// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Device selection and the properties cuawait uses.

#include "cuawait/cuda/error.hpp"

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

namespace cuawait::cuda {

//! Number of CUDA devices; 0 when there is none or no usable driver (never throws).
[[nodiscard]] inline int device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

//! The ordinals of every visible device (0 to `device_count() - 1`; empty when none), e.g.
//! for `runtime_options::devices`.
[[nodiscard]] inline std::vector<int> all_devices() {
  std::vector<int> ids(static_cast<std::size_t>(device_count()));
  for (std::size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<int>(i);
  }
  return ids;
}

//! Makes `id` the calling thread's current device. @throws cuda_error
inline void set_device(int id) { CUAWAIT_CUDA_CHECK("set device", cudaSetDevice(id)); }

//! What cuawait needs to know about a device.
struct device {
  int id = 0;
  std::string name;
  int sm_count = 0;             //!< streaming multiprocessors
  int major = 0, minor = 0;     //!< compute capability
  std::size_t total_memory = 0; //!< bytes
  int least_priority = 0;       //!< stream priority range: numerically greatest = lowest
  int greatest_priority = 0;    //!< numerically least = highest
  bool can_map_host_memory = false;

  //! The properties of device `id`. @throws cuda_error
  [[nodiscard]] static device query(int id) {
    cudaDeviceProp p{};
    CUAWAIT_CUDA_CHECK("device query", cudaGetDeviceProperties(&p, id));
    device d;
    d.id = id;
    d.name = p.name;
    d.sm_count = p.multiProcessorCount;
    d.major = p.major;
    d.minor = p.minor;
    d.total_memory = p.totalGlobalMem;
    d.can_map_host_memory = p.canMapHostMemory != 0;
    const int saved = current_id();
    set_device(id);
    const cudaError_t e = cudaDeviceGetStreamPriorityRange(&d.least_priority, &d.greatest_priority);
    (void)cudaSetDevice(saved);
    check("device query", e, "cudaDeviceGetStreamPriorityRange");
    return d;
  }
  //! The calling thread's current device. @throws cuda_error
  [[nodiscard]] static device current() { return query(current_id()); }
  //! The calling thread's current device id. @throws cuda_error
  [[nodiscard]] static int current_id() {
    int id = 0;
    CUAWAIT_CUDA_CHECK("device query", cudaGetDevice(&id));
    return id;
  }
};

} // namespace cuawait::cuda
