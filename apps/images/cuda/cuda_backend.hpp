// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The CUDA backend of cuawait-images: `make_cuda_backend()` for the executable.

#include "engine.hpp"

#include <memory>

namespace cuawait::images {

//! The CUDA backend. Creating it touches no CUDA API; `unavailable_reason()` probes the
//! device (and says why none is usable).
[[nodiscard]] std::unique_ptr<gpu_backend> make_cuda_backend();

} // namespace cuawait::images
