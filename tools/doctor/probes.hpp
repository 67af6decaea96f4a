// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The machine probes of `cuawait-doctor` (probes.cu): launch latency, copy bandwidth, and
//! each completion strategy's round trip. A few seconds in all.

#include "report.hpp"

namespace cuawait::tools::doctor_cli {

//! Counts the CUDA devices. With none (or when CUDA cannot be asked), returns 0 and sets
//! `r.no_device_reason` to a message that says so.
int count_devices(machine_report& r);

//! Runs every probe on device `device` and fills `r` (which `count_devices` filled).
//! @throws cuda_error when a CUDA call other than a strategy's setup fails
void probe_machine(int device, machine_report& r);

} // namespace cuawait::tools::doctor_cli
