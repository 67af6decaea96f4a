// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Umbrella header of the CUDA-free core. Never includes a CUDA header.

#include "cuawait/executor.hpp"
#include "cuawait/sync_wait.hpp"
#include "cuawait/task.hpp"
#include "cuawait/version.hpp"
