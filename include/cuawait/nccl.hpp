// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Umbrella header of the NCCL layer (target cuawait::nccl, on the CUDA layer): the CUDA
//! layer and every NCCL header. See docs/NCCL.md.

#include "cuawait/cuda.hpp"
#include "cuawait/nccl/communicator.hpp"
#include "cuawait/nccl/datatype.hpp"
#include "cuawait/nccl/operation.hpp"
