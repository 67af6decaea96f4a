// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Called by the stream and event handles when they destroy their CUDA object, so that the
//! completion reactors of the live device contexts forget the lane keyed by it (and the
//! strategies what they keep per stream): a program that creates and destroys streams by
//! the million keeps those tables small.

#include <cuda_runtime_api.h>

namespace cuawait::cuda::detail {

//! `s` is about to be destroyed. Never throws; cheap when no context exists.
void forget_stream(cudaStream_t s) noexcept;
//! `e` is about to be destroyed. Never throws.
void forget_event(cudaEvent_t e) noexcept;

} // namespace cuawait::cuda::detail
