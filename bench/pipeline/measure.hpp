// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! What the run measures about the machine before the modes: its description, and the
//! floor's terms (copy bandwidth, kernel time, CPU time).

#include "floor.hpp"
#include "options.hpp"
#include "results.hpp"

#include <cstdio>
#include <string>

namespace cuawait::bench {

//! Empty when CUDA device `device` can be used, else why not ("no CUDA device: ...").
[[nodiscard]] std::string gpu_unavailable_reason(int device);

//! Selects `device` and describes it and the host. @throws cuda_error
[[nodiscard]] machine_info query_machine(int device);

//! Host cores this process may run on (its CPU affinity).
[[nodiscard]] int host_cores();

//! Loads the kernels and touches the copy engines once, so that no mode pays for that.
//! @throws cuda_error
void warm_up(const workload& w, int sms);

//! Measures the floor's terms for `o.w`, printing one progress line per measurement on
//! `progress`. @throws cuda_error
[[nodiscard]] floor_measurements measure_floor(const options& o, const machine_info& m,
                                               std::FILE* progress);

} // namespace cuawait::bench
