// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Umbrella kept at the top of the include tree: `cuawait::runtime` belongs to the CUDA
//! layer (target cuawait::cuda) and lives in <cuawait/cuda/runtime.hpp>.

#include "cuawait/cuda/runtime.hpp"
